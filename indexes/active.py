"""The active tool index: tools that may be retrieved, in a Chroma collection.

Only active tools live here.  Every call to Chroma goes through :mod:`indexes.chroma`;
the copies this process keeps of the collection are in :mod:`indexes.copies`.

Up to :data:`EXACT_LIMIT` records, an index opened with ``exact_limit`` ranks with the
exact tier (:mod:`indexes.exact`): the collection's vectors in one matrix in the
process, loaded from Chroma on the first lookup and kept in step with this index's own
writes; Chroma remains the store of record, and ranks any larger collection.

An index opened with ``lexical`` also keeps a BM25 copy of its records' texts
(:attr:`~indexes.records.IndexRecord.lexical`: the document, or a text of its own kept
in the metadata), loaded and kept in step the same way, whatever the collection's size:
:meth:`ActiveIndex.lexical_scored`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from indexes.chroma import (
    CHROMA_FILE,
    ChromaStore,
    close_client,
    http_client,
    persistent_client,
)
from indexes.copies import FieldCache, LocalCopies
from indexes.embedder import Embedder, query_vector
from indexes.errors import IndexMissing, ToolIndexError
from indexes.exact import ExactTier, Snapshot
from indexes.lexical import LexicalScores
from indexes.records import ID_KEY, IndexHit, IndexRecord
from indexes.search import Ranked, Searcher
from indexes.writes import SizeCache, Writer

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection as ChromaCollection

__all__ = ["CHROMA_FILE", "EXACT_LIMIT", "ID_KEY", "ActiveIndex", "IndexHit", "IndexRecord"]

EXACT_LIMIT = 15_000
"""The collection size up to which the exact tier ranks by default (embedded store).
On the reference machine a brute-force pass over all vectors cost 0.55-0.58x Chroma's
query at 10k tools, 0.91-1.11x at 20k and 1.22x at 30k, once the matrix (1.5 KiB a
tool) no longer fits the CPU cache (``benchmarks/bench_embed.py``, crossover)."""


class ActiveIndex:
    """Upsert, get, verified delete and top-k search over one Chroma collection."""

    def __init__(
        self,
        client: ClientAPI,
        embedder: Embedder,
        collection: str = "tools",
        local_fields: bool = False,
        exact_limit: int | None = None,
        lexical: bool = False,
    ) -> None:
        """``local_fields``: keep the metadata fields that :meth:`search_fields` returns
        in this process, so that a lookup asks Chroma for ids and distances only.  Only
        for a collection this process alone writes (the embedded store); otherwise
        another writer's update would be served stale.

        ``exact_limit``: rank in the process, exactly, while the collection holds at
        most this many records (see :mod:`indexes.exact`); ``None`` or 0 always asks
        Chroma.  Like ``local_fields``, only for a collection whose other writers, if
        any, are followed by :meth:`invalidate`.

        ``lexical``: keep a BM25 copy of the documents for :meth:`lexical_ranked`, on the
        same terms as the exact tier."""
        self._client = client
        self._embedder = embedder
        self._name = collection
        self._store = ChromaStore(client, embedder, collection)
        self._sizes = SizeCache(self._store)
        self._path: Path | None = None
        self._local_fields = local_fields
        self._fields = FieldCache()
        self._copies = LocalCopies(exact_limit, lexical)
        self._writer = Writer(self._store, embedder, self._copies, self._fields, self._sizes)
        # through the instance, at each load: a test may replace _load_vectors
        self._searcher = Searcher(
            self._store, self._copies, self._size_hint, lambda limit: self._load_vectors(limit)
        )

    # ---- construction -------------------------------------------------------------
    @classmethod
    def persistent(
        cls,
        path: str | Path,
        embedder: Embedder,
        collection: str = "tools",
        create: bool = True,
        exact_limit: int | None = EXACT_LIMIT,
        lexical: bool = False,
    ) -> ActiveIndex:
        """An index stored under ``path`` by an embedded Chroma (one writer process).
        With ``create=False`` a store that is not there (a deleted or emptied folder) is
        :class:`IndexMissing` instead of a new, empty one."""
        if not create and not (Path(path) / CHROMA_FILE).is_file():
            raise IndexMissing(str(path))
        client = persistent_client(path)
        index = cls(
            client,
            embedder,
            collection,
            local_fields=True,
            exact_limit=exact_limit,
            lexical=lexical,
        )
        index._path = Path(path)
        return index

    @classmethod
    def http(
        cls,
        host: str,
        port: int,
        embedder: Embedder,
        collection: str = "tools",
        ssl: bool = False,
        exact_limit: int | None = None,
        lexical: bool = False,
    ) -> ActiveIndex:
        """An index held by a Chroma server (``chroma run``).  Other processes may write
        to it, so the exact tier is off unless asked for (its owner must then call
        :meth:`invalidate` whenever another process wrote)."""
        client = http_client(host, port, ssl)
        return cls(client, embedder, collection, exact_limit=exact_limit, lexical=lexical)

    def close(self) -> None:
        """Release this index's Chroma client.  Chroma keeps one system per folder for
        as long as any client of it is open in the process; one left open keeps its
        database connections, and should the folder be deleted and rebuilt by another
        process, every later client of this process on that folder would read and write
        the deleted files.  A client of a Chroma server has a system of its own, whose
        stop drops its HTTP connection pool without closing the sockets (each one a
        ResourceWarning when it is collected): the pool is closed first.  Idempotent."""
        client: Any = self._client
        if client is None:  # closed already
            return
        self._client = None  # type: ignore[assignment]
        self._path = None
        close_client(client)

    # ---- properties ---------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def max_batch_size(self) -> int:
        return self._store.max_batch

    @property
    def _collection(self) -> ChromaCollection:
        """The Chroma collection (replaceable, e.g. by a recorder of its calls)."""
        return self._store.collection

    @_collection.setter
    def _collection(self, collection: ChromaCollection) -> None:
        self._store.collection = collection

    @property
    def _exact(self) -> ExactTier | None:
        return self._copies.exact

    def files_lost(self) -> bool:
        """Whether an embedded store's files were deleted under this process (it may
        still answer from the files it holds open, but can no longer write)."""
        return self._path is not None and not (self._path / CHROMA_FILE).is_file()

    @property
    def exact_limit(self) -> int:
        """The collection size up to which lookups rank in the process (0: never)."""
        exact = self._copies.exact
        return exact.limit if exact is not None else 0

    @exact_limit.setter
    def exact_limit(self, limit: int) -> None:
        self._copies.set_exact_limit(limit)

    def count(self) -> int:
        return self._sizes.count()

    def _size_hint(self) -> int:
        """The collection size, cached between our own writes (and for a few seconds,
        in case another process writes to a shared server)."""
        return self._sizes.hint()

    # ---- writes -------------------------------------------------------------------
    def upsert(
        self,
        records: Sequence[IndexRecord],
        embeddings: np.ndarray | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Insert or replace ``records``; embeds their documents unless given vectors.

        Ids must be unique within one call (the last one would silently win in Chroma).
        """
        return self._writer.upsert(records, embeddings, progress)

    def delete(self, ids: Collection[str]) -> list[str]:
        """Delete ``ids`` and prove it with a ``get``; returns the ids that were present.

        Chroma's own delete counts are not trusted, and an empty id list (which Chroma
        rejects) is a no-op here.
        """
        return self._writer.delete(ids)

    def discard(self, ids: Collection[str]) -> None:
        """Delete ``ids``, whichever of them are present, and prove it with a ``get``:
        one request to Chroma fewer than :meth:`delete`, which first reads which ids
        were present to return them (a move needs no answer: it verifies the end)."""
        self._writer.discard(ids)

    def forget_fields(self, keep_vectors: bool = False) -> None:
        """Drop every field kept in this process, and the exact tier's vectors and the
        lexical copy unless ``keep_vectors`` (another process wrote to the collection)."""
        self._fields.clear()
        if not keep_vectors:
            self._copies.drop()

    def invalidate(self) -> None:
        """Another process changed the collection: drop everything kept in this
        process (fields and vectors); the next lookup reads them again from Chroma."""
        self.forget_fields()

    # ---- reads --------------------------------------------------------------------
    def existing(self, ids: Iterable[str]) -> set[str]:
        """The subset of ``ids`` currently in the index."""
        return self._store.existing(ids)

    def get(self, ids: Iterable[str]) -> dict[str, IndexRecord]:
        """Records for the ``ids`` that exist, keyed by id."""
        return self._store.get(ids)

    def scan(self, page_size: int = 1000) -> Iterator[IndexRecord]:
        """Every record, in pages, without embeddings."""
        if page_size < 1:
            raise ToolIndexError("page_size must be at least 1")
        return self._store.scan(page_size)

    def unreadable(self, ids: Iterable[str]) -> set[str]:
        """The ``ids`` Chroma lists but cannot return a vector for (a record left so by a
        write that failed part-way: it is never ranked by a query)."""
        bad: set[str] = set()
        wanted = list(dict.fromkeys(ids))
        for start in range(0, len(wanted), self._store.max_batch):
            bad |= self._store.unreadable(wanted[start : start + self._store.max_batch])
        return bad

    def embed_query(self, text: str) -> np.ndarray:
        return query_vector(self._embedder, text)

    # ---- ranking ----------------------------------------------------------------------
    def search(
        self,
        query: str | np.ndarray,
        k: int,
        exclude: Collection[str] = (),
        documents: bool = True,
    ) -> list[IndexHit]:
        """The ``k`` nearest records, skipping ``exclude``, best first.

        Excluded ids are dropped after an over-fetch rather than with a Chroma ``where``
        filter, which costs 10-100x an unfiltered query.  With ``documents=False`` the
        hits carry metadata only (an empty ``document``), which is cheaper to fetch.
        """
        return self.search_ranked(query, k, exclude, documents)[0]

    def search_ranked(
        self,
        query: str | np.ndarray,
        k: int,
        exclude: Collection[str] = (),
        documents: bool = True,
        ids_only: bool = False,
    ) -> Ranked:
        """Like :meth:`search`, also returning the excluded records that ranked above the
        last returned hit (what the exclusion displaced), in rank order.  ``ids_only``
        hits carry no document and no metadata."""
        if k < 1:
            raise ToolIndexError("k must be at least 1")
        vector = self.embed_query(query) if isinstance(query, str) else np.asarray(query)
        return self._searcher.ranked(vector, k, exclude, documents, ids_only)

    def search_fields(
        self,
        query: str | np.ndarray,
        k: int,
        exclude: Collection[str],
        fields: Sequence[str],
    ) -> Ranked:
        """:meth:`search_ranked` for hits that need only the metadata ``fields`` (no
        document).

        The ranking query asks Chroma for ids and distances only, which costs about a
        third of one that returns metadata; the winners' fields come from this process
        when the index was opened with ``local_fields`` (read once per record with a
        ``get``, kept in step with this index's own upserts and deletes).
        """
        vector = self.embed_query(query) if isinstance(query, str) else np.asarray(query)
        cache = self._fields if self._local_fields else None
        return self._searcher.fields(vector, k, exclude, tuple(fields), cache)

    def _load_vectors(self, limit: int) -> Snapshot | None:
        loaded = self._store.vectors(limit)
        return None if loaded is None else Snapshot.build(*loaded)

    def search_scored(
        self, query: str | np.ndarray, k: int, exclude: Collection[str] = ()
    ) -> tuple[list[IndexHit], list[IndexHit], float | None]:
        """:meth:`search_ranked` by ids alone (``ids_only``), with the standard deviation
        of the similarity over the whole collection when the exact tier ranked the
        lookup (``None`` when Chroma did: it sees only the nearest records)."""
        if k < 1:
            raise ToolIndexError("k must be at least 1")
        vector = self.embed_query(query) if isinstance(query, str) else np.asarray(query)
        return self._searcher.scored(vector, k, exclude)

    def lexical_ranked(self, text: str, n: int) -> list[tuple[str, float]]:
        """The ``n`` best ids for ``text`` by BM25, best first, with their scores; empty
        when the index keeps no lexical copy, or when it could not be loaded (a write
        ran meanwhile, or Chroma failed: the next lookup tries again)."""
        found = self.lexical_scored(text, n)
        return [] if found is None else found.ranked

    def lexical_scored(
        self, text: str, n: int, include: Collection[str] = ()
    ) -> LexicalScores | None:
        """:meth:`lexical_ranked`, with the BM25 scores of the ``include`` ids and the
        standard deviation of the score over the collection; ``None`` where
        :meth:`lexical_ranked` is empty for want of a lexical copy."""
        return self._copies.lexical_scored(
            text, n, include, lambda: {r.id: r.lexical for r in self.scan()}
        )

    def similarities(self, query: np.ndarray, ids: Collection[str]) -> dict[str, float]:
        """The cosine similarity to ``query`` (its best view, for several rows) of each of
        ``ids`` the index holds."""
        return self._searcher.similarities(query, ids)
