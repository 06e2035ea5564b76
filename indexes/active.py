"""The active tool index: tools that may be retrieved, in a Chroma collection.

Only active tools live here.  Embeddings are always computed by our own
:class:`~indexes.embedder.Embedder` and passed to Chroma, so Chroma's default
embedding function (which downloads a model) is never used.  Every Chroma call goes
through :func:`_chroma_errors`, the single place where Chroma's exceptions become ours.

Up to :data:`EXACT_LIMIT` records, an index opened with ``exact_limit`` ranks with the
exact tier (:mod:`indexes.exact`): the collection's vectors in one matrix in the
process, loaded from Chroma on the first lookup and kept in step with this index's own
writes; Chroma remains the store of record, and ranks any larger collection.

An index opened with ``lexical`` also keeps a BM25 copy of its documents
(:mod:`indexes.lexical`), loaded and kept in step the same way, whatever the
collection's size: :meth:`ActiveIndex.lexical_ranked`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from indexes.embedder import Embedder, query_vector
from indexes.errors import (
    DeleteNotVerifiedError,
    EmbedderMismatchError,
    IndexBackendError,
    IndexMissing,
    ToolIndexError,
)
from indexes.exact import ExactTier, Snapshot
from indexes.lexical import LexicalTier

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection as ChromaCollection

MetadataValue = str | int | float | bool
ID_KEY = "tool_id"
"""Metadata key that repeats the record id, so that ``where`` filters can use it
(Chroma ignores ``where`` on ``#id`` in the embedded client)."""

CHROMA_FILE = "chroma.sqlite3"
"""The file an embedded Chroma store keeps its records in, under its folder."""
SIZE_HINT_TTL = 5.0
"""Seconds a cached collection size is trusted when another process may write to the
same Chroma server; it only sizes the first fetch of a lookup, never its result."""

EXACT_LIMIT = 15_000
"""The collection size up to which the exact tier ranks by default (embedded store).
On the reference machine a brute-force pass over all vectors cost 0.55-0.58x Chroma's
query at 10k tools, 0.91-1.11x at 20k and 1.22x at 30k, once the matrix (1.5 KiB a
tool) no longer fits the CPU cache (``benchmarks/bench_embed.py``, crossover)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexRecord:
    id: str
    document: str
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexHit:
    id: str
    score: float
    """Cosine similarity to the query, in [-1, 1]; higher is closer."""
    document: str
    metadata: Mapping[str, MetadataValue]


@contextlib.contextmanager
def _chroma_errors(operation: str) -> Iterator[None]:
    try:
        yield
    except ToolIndexError:
        raise
    except Exception as exc:  # chromadb raises a wide, unstable set of types
        raise IndexBackendError(operation, f"{type(exc).__name__}: {exc}") from exc


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


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
        with _chroma_errors("open"):
            self._max_batch = int(client.get_max_batch_size())
            self._collection: ChromaCollection = client.get_or_create_collection(
                collection,
                embedding_function=None,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"embedder": embedder.name, "dim": embedder.dim},
            )
        stored = (self._collection.metadata or {}).get("embedder")
        if stored is not None and stored != embedder.name:
            raise EmbedderMismatchError(collection, str(stored), embedder.name)
        self._size: tuple[int, float] | None = None
        self._path: Path | None = None
        self._local_fields = local_fields
        self._fields: tuple[str, ...] = ()
        self._known: dict[str, dict[str, MetadataValue]] = {}
        # a lookup keeps fields it read only if no write began or ended meanwhile
        self._known_lock = threading.Lock()
        self._generation = 0
        self._exact = ExactTier(exact_limit) if exact_limit else None
        self._exact_loading = threading.Lock()
        self._exact_failed = -1
        """The tier generation whose load failed (not retried until a write)."""
        self._lexical = LexicalTier() if lexical else None
        self._lexical_loading = threading.Lock()

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
        with _chroma_errors("open"):
            import chromadb
            from chromadb.config import Settings

            Path(path).mkdir(parents=True, exist_ok=True)
            client = chromadb.PersistentClient(
                path=str(path), settings=Settings(anonymized_telemetry=False)
            )
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
        with contextlib.suppress(Exception):  # closing must not mask the caller's error
            # the client, and the admin client it made for itself, each have a pool
            for part in (client, getattr(client, "_admin_client", None)):
                session = getattr(getattr(part, "_server", None), "_session", None)
                if session is not None and callable(getattr(session, "close", None)):
                    session.close()
            close = getattr(client, "close", None)
            if callable(close):
                close()

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
        with _chroma_errors("connect"):
            import chromadb
            from chromadb.config import Settings

            client = chromadb.HttpClient(
                host=host, port=port, ssl=ssl, settings=Settings(anonymized_telemetry=False)
            )
        return cls(client, embedder, collection, exact_limit=exact_limit, lexical=lexical)

    # ---- properties ---------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def max_batch_size(self) -> int:
        return self._max_batch

    def files_lost(self) -> bool:
        """Whether an embedded store's files were deleted under this process (it may
        still answer from the files it holds open, but can no longer write)."""
        return self._path is not None and not (self._path / CHROMA_FILE).is_file()

    @property
    def exact_limit(self) -> int:
        """The collection size up to which lookups rank in the process (0: never)."""
        return self._exact.limit if self._exact is not None else 0

    @exact_limit.setter
    def exact_limit(self, limit: int) -> None:
        if self._exact is not None:
            self._exact.drop()
        self._exact = ExactTier(limit) if limit > 0 else None

    def count(self) -> int:
        with _chroma_errors("count"):
            n = int(self._collection.count())
        self._size = (n, time.monotonic())
        return n

    def _size_hint(self) -> int:
        """The collection size, cached between our own writes (and for a few seconds,
        in case another process writes to a shared server)."""
        if self._size is None or time.monotonic() - self._size[1] > SIZE_HINT_TTL:
            return self.count()
        return self._size[0]

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
        ids = [r.id for r in records]
        if len(set(ids)) != len(ids):
            raise ToolIndexError("duplicate ids in one upsert call")
        if embeddings is not None and len(embeddings) != len(records):
            raise ToolIndexError("embeddings and records differ in length")
        self._size = None
        self._forget(ids)
        tier, lexical = self._exact, self._lexical
        if tier is not None:
            tier.begin_write()
        if lexical is not None:
            lexical.begin_write()
        written: list[np.ndarray] = []
        try:
            done = self._upsert(records, embeddings, progress, written)
        except BaseException:
            # some batches may have been written: reload from Chroma
            if tier is not None:
                tier.drop()
            if lexical is not None:
                lexical.drop()
            raise
        finally:
            self._size = None
            self._forget(ids)
        if tier is not None and records:
            tier.upserted(ids, np.concatenate(written))
        if lexical is not None and records:
            lexical.upserted({r.id: r.document for r in records})
        return done

    def _upsert(
        self,
        records: Sequence[IndexRecord],
        embeddings: np.ndarray | None,
        progress: Callable[[int], None] | None,
        written: list[np.ndarray],
    ) -> int:
        done = 0
        for start in range(0, len(records), self._max_batch):
            chunk = records[start : start + self._max_batch]
            vectors = (
                embeddings[start : start + len(chunk)]
                if embeddings is not None
                else self._embedder.embed([r.document for r in chunk])
            )
            # Chroma merges metadata on upsert; a key the new record lacks is removed by
            # sending it as None, so the record is replaced, not merged.
            with _chroma_errors("get"):
                old = self._collection.get(ids=[r.id for r in chunk], include=["metadatas"])
            stale = {
                rid: [key for key in (meta or {}) if key != ID_KEY]
                for rid, meta in zip(old["ids"], old["metadatas"] or [], strict=True)
            }
            metadatas: list[dict[str, Any]] = []
            for r in chunk:
                meta: dict[str, Any] = dict.fromkeys(stale.get(r.id, ()))
                meta.update(r.metadata)
                meta[ID_KEY] = r.id
                metadatas.append(meta)
            vectors = np.asarray(vectors, dtype=np.float32)
            with _chroma_errors("upsert"):
                self._collection.upsert(
                    ids=[r.id for r in chunk],
                    embeddings=vectors,
                    documents=[r.document for r in chunk],
                    metadatas=cast(Any, metadatas),
                )
            written.append(vectors)
            done += len(chunk)
            if progress is not None:
                progress(done)
        return done

    def unreadable(self, ids: Iterable[str]) -> set[str]:
        """The ``ids`` Chroma lists but cannot return a vector for (a record left so by a
        write that failed part-way: it is never ranked by a query)."""
        bad: set[str] = set()
        for chunk in _batches(list(dict.fromkeys(ids)), self._max_batch):
            bad |= self._unreadable(list(chunk))
        return bad

    def _unreadable(self, ids: list[str]) -> set[str]:
        from chromadb.errors import InternalError

        try:
            with _chroma_errors("get"):
                got = self._collection.get(ids=ids, include=["embeddings"])
        except IndexBackendError as exc:
            if not isinstance(exc.__cause__, InternalError):
                raise
            if len(ids) == 1:
                return set(ids)
            half = len(ids) // 2  # one lost vector fails the whole get: find which
            return self._unreadable(ids[:half]) | self._unreadable(ids[half:])
        vectors = got["embeddings"]
        if vectors is None:
            return set(got["ids"])
        return {rid for rid, v in zip(got["ids"], vectors, strict=True) if v is None or len(v) == 0}

    def delete(self, ids: Collection[str]) -> list[str]:
        """Delete ``ids`` and prove it with a ``get``; returns the ids that were present.

        Chroma's own delete counts are not trusted, and an empty id list (which Chroma
        rejects) is a no-op here.
        """
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        present = self.existing(wanted)
        if present:
            self._size = None
            self._forget(present)
            tier, lexical = self._exact, self._lexical
            # never ranked again, even before Chroma drops them
            if tier is not None:
                tier.deleted(present)
            if lexical is not None:
                lexical.deleted(present)
            try:
                for chunk in _batches(sorted(present), self._max_batch):
                    with _chroma_errors("delete"):
                        self._collection.delete(ids=list(chunk))
            except BaseException:
                # some may remain in Chroma: reload from it
                if tier is not None:
                    tier.drop()
                if lexical is not None:
                    lexical.drop()
                raise
            finally:
                self._size = None
                self._forget(present)
                # a load that read them from Chroma before the delete is discarded
                if tier is not None:
                    tier.deleted(present)
                if lexical is not None:
                    lexical.deleted(present)
        remaining = self.existing(wanted)
        if remaining:
            raise DeleteNotVerifiedError(sorted(remaining))
        return [i for i in wanted if i in present]

    def _forget(self, ids: Iterable[str]) -> None:
        with self._known_lock:
            self._generation += 1
            for rid in ids:
                self._known.pop(rid, None)

    def forget_fields(self, keep_vectors: bool = False) -> None:
        """Drop every field kept in this process, and the exact tier's vectors and the
        lexical copy unless ``keep_vectors`` (another process wrote to the collection)."""
        with self._known_lock:
            self._generation += 1
            self._known.clear()
        if keep_vectors:
            return
        if self._exact is not None:
            self._exact.drop()
        if self._lexical is not None:
            self._lexical.drop()

    def invalidate(self) -> None:
        """Another process changed the collection: drop everything kept in this
        process (fields and vectors); the next lookup reads them again from Chroma."""
        self.forget_fields()

    # ---- reads --------------------------------------------------------------------
    def existing(self, ids: Iterable[str]) -> set[str]:
        """The subset of ``ids`` currently in the index."""
        found: set[str] = set()
        wanted = list(dict.fromkeys(ids))
        for chunk in _batches(wanted, self._max_batch):
            with _chroma_errors("get"):
                got = self._collection.get(ids=list(chunk), include=[])
            found.update(got["ids"])
        return found

    def get(self, ids: Iterable[str]) -> dict[str, IndexRecord]:
        """Records for the ``ids`` that exist, keyed by id."""
        out: dict[str, IndexRecord] = {}
        wanted = list(dict.fromkeys(ids))
        for chunk in _batches(wanted, self._max_batch):
            with _chroma_errors("get"):
                got = self._collection.get(ids=list(chunk), include=["documents", "metadatas"])
            for rid, doc, meta in zip(
                got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True
            ):
                out[rid] = IndexRecord(rid, doc or "", _plain(meta))
        return out

    def scan(self, page_size: int = 1000) -> Iterator[IndexRecord]:
        """Every record, in pages, without embeddings."""
        if page_size < 1:
            raise ToolIndexError("page_size must be at least 1")
        offset = 0
        size = min(page_size, self._max_batch)
        while True:
            with _chroma_errors("get"):
                got = self._collection.get(
                    include=["documents", "metadatas"], limit=size, offset=offset
                )
            if not got["ids"]:
                return
            for rid, doc, meta in zip(
                got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True
            ):
                yield IndexRecord(rid, doc or "", _plain(meta))
            offset += len(got["ids"])

    def embed_query(self, text: str) -> np.ndarray:
        return query_vector(self._embedder, text)

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
    ) -> tuple[list[IndexHit], list[IndexHit]]:
        """Like :meth:`search`, also returning the excluded records that ranked above the
        last returned hit (what the exclusion displaced), in rank order.  ``ids_only``
        hits carry no document and no metadata."""
        if k < 1:
            raise ToolIndexError("k must be at least 1")
        vector = self.embed_query(query) if isinstance(query, str) else np.asarray(query)
        snapshot = self._exact_snapshot()
        # a vector of another dimension goes to Chroma, which rejects it as before
        if snapshot is not None and vector.shape[-1:] == snapshot.matrix.shape[1:]:
            found = self._exact_ranked(snapshot, vector, k, exclude, documents, ids_only)
            if found is not None:
                return found
        fetch = self._first_fetch(k, len(exclude))
        while True:
            ranked = self._query(vector, fetch, documents and not ids_only, not ids_only)
            hits: list[IndexHit] = []
            displaced: list[IndexHit] = []
            for hit in ranked:
                if len(hits) == k:
                    break
                (displaced if hit.id in exclude else hits).append(hit)
            if len(hits) == k or len(ranked) < fetch:
                return hits, displaced
            # the exclusions took the page: widen, doubling, up to the size that is sure
            # to be enough (k plus every exclusion)
            fetch = min(fetch * 2, k + len(exclude))

    def search_fields(
        self,
        query: str | np.ndarray,
        k: int,
        exclude: Collection[str],
        fields: Sequence[str],
    ) -> tuple[list[IndexHit], list[IndexHit]]:
        """:meth:`search_ranked` for hits that need only the metadata ``fields`` (no
        document).

        The ranking query asks Chroma for ids and distances only, which costs about a
        third of one that returns metadata; the winners' fields come from this process
        when the index was opened with ``local_fields`` (read once per record with a
        ``get``, kept in step with this index's own upserts and deletes).
        """
        wanted = tuple(fields)
        if not self._local_fields:
            hits, displaced = self.search_ranked(query, k, exclude, documents=False)
            return [_only(h, wanted) for h in hits], [_only(h, wanted) for h in displaced]
        with self._known_lock:
            if wanted != self._fields:
                self._fields, self._known = wanted, {}
                self._generation += 1
            generation = self._generation
        hits, displaced = self.search_ranked(query, k, exclude, documents=False, ids_only=True)
        known = self._known
        found: dict[str, dict[str, MetadataValue]] = {}
        for h in hits:
            fields_of = known.get(h.id)  # another thread may drop it at any moment
            if fields_of is not None:
                found[h.id] = fields_of
        missing = [h.id for h in hits if h.id not in found]
        if missing:
            with _chroma_errors("get"):
                got = self._collection.get(ids=missing, include=["metadatas"])
            for rid, meta in zip(got["ids"], got["metadatas"] or [], strict=True):
                found[rid] = {f: v for f, v in _plain(meta).items() if f in wanted}
            with self._known_lock:
                if generation == self._generation:
                    self._known.update((rid, found[rid]) for rid in got["ids"])
            if len(found) < len(hits):
                # deleted between the query and the get: rank again in one query
                hits, displaced = self.search_ranked(query, k, exclude, documents=False)
                return [_only(h, wanted) for h in hits], [_only(h, wanted) for h in displaced]
        return [IndexHit(h.id, h.score, "", dict(found[h.id])) for h in hits], displaced

    # ---- the exact tier ---------------------------------------------------------------
    def _exact_snapshot(self) -> Snapshot | None:
        """The exact tier's snapshot, loaded from Chroma on first use; ``None`` when the
        tier is off or the collection is over its limit."""
        tier = self._exact
        if tier is None:
            return None
        found = tier.current()
        if found is not None:
            return found
        if self._size_hint() > tier.limit:
            return None
        # one load at a time, and no lookup waits for it: while one thread loads, the
        # others ask Chroma (a load costs hundreds of ms at 10k tools)
        if not self._exact_loading.acquire(blocking=False):
            return None
        try:
            found = tier.current()
            if found is not None:
                return found
            generation = tier.generation()
            if generation == self._exact_failed:
                return None  # nothing was written since the last load failed
            try:
                loaded = self._load_vectors(tier.limit)
            except IndexBackendError as exc:
                # the tier is a copy: Chroma ranks until a write makes a retry worthwhile
                log.warning("exact tier not loaded (%s); Chroma ranks lookups", exc)
                self._exact_failed = generation
                return None
            if loaded is None or not tier.install(loaded, generation):
                return None  # too large, or a write ran meanwhile: Chroma ranks this one
            return loaded
        finally:
            self._exact_loading.release()

    def _load_vectors(self, limit: int) -> Snapshot | None:
        ids: list[str] = []
        rows: list[np.ndarray] = []
        offset = 0
        while True:
            with _chroma_errors("get"):
                got = self._collection.get(
                    include=["embeddings"], limit=self._max_batch, offset=offset
                )
            if not got["ids"]:
                break
            ids += got["ids"]
            rows.append(np.asarray(got["embeddings"], dtype=np.float32))
            if len(ids) > limit:
                return None
            if len(got["ids"]) < self._max_batch:
                break
            offset += len(got["ids"])
        empty = np.zeros((0, self._embedder.dim), dtype=np.float32)
        return Snapshot.build(ids, np.concatenate(rows) if rows else empty)

    def _exact_ranked(
        self,
        snapshot: Snapshot,
        vector: np.ndarray,
        k: int,
        exclude: Collection[str],
        documents: bool,
        ids_only: bool,
    ) -> tuple[list[IndexHit], list[IndexHit]] | None:
        """:meth:`search_ranked` from the exact tier; ``None`` when Chroma no longer holds
        a winner (another process deleted it): then Chroma ranks this lookup."""
        hits, displaced = snapshot.ranked(vector, k, exclude)
        if ids_only:
            return (
                [IndexHit(rid, score, "", {}) for rid, score in hits],
                [IndexHit(rid, score, "", {}) for rid, score in displaced],
            )
        wanted = [rid for rid, _ in hits + displaced]
        include: list[Any] = ["documents", "metadatas"] if documents else ["metadatas"]
        with _chroma_errors("get"):
            got = self._collection.get(ids=wanted, include=include) if wanted else None
        records: dict[str, tuple[str, dict[str, MetadataValue]]] = {}
        if got is not None:
            metas: list[Any] = list(got["metadatas"] or ()) or [None] * len(got["ids"])
            docs = (got["documents"] if documents else None) or [""] * len(got["ids"])
            for rid, doc, meta in zip(got["ids"], docs, metas, strict=True):
                records[rid] = (doc or "", _plain(meta))
        if len(records) < len(wanted):
            return None

        def hit(rid: str, score: float) -> IndexHit:
            return IndexHit(rid, score, records[rid][0], records[rid][1])

        return [hit(*h) for h in hits], [hit(*h) for h in displaced]

    # ---- the lexical tier and similarities ---------------------------------------------
    def lexical_ranked(self, text: str, n: int) -> list[tuple[str, float]]:
        """The ``n`` best ids for ``text`` by BM25, best first, with their scores; empty
        when the index keeps no lexical copy, or when it could not be loaded (a write
        ran meanwhile, or Chroma failed: the next lookup tries again)."""
        lexical = self._lexical
        if lexical is None:
            return []
        found = lexical.ranked(text, n)
        if found is not None:
            return found
        with self._lexical_loading:
            if not lexical.loaded():
                generation = lexical.generation()
                try:
                    documents = {r.id: r.document for r in self.scan()}
                except IndexBackendError as exc:
                    log.warning("lexical tier not loaded (%s); dense ranking only", exc)
                    return []
                lexical.install(documents, generation)
        return lexical.ranked(text, n) or []

    def similarities(self, query: np.ndarray, ids: Collection[str]) -> dict[str, float]:
        """The cosine similarity to ``query`` (its best view, for several rows) of each of
        ``ids`` the index holds."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        snapshot = self._exact_snapshot()
        vector = np.asarray(query, dtype=np.float32)
        if snapshot is not None and vector.shape[-1:] == snapshot.matrix.shape[1:]:
            found = snapshot.similarity(vector, wanted)
            if len(found) == len(wanted):
                return found
        out: dict[str, float] = {}
        for chunk in _batches(wanted, self._max_batch):
            with _chroma_errors("get"):
                got = self._collection.get(ids=list(chunk), include=["embeddings"])
            vectors = got["embeddings"]
            if vectors is None or not len(got["ids"]):
                continue
            rows = Snapshot.build(got["ids"], np.asarray(vectors, dtype=np.float32))
            out |= rows.similarity(vector, got["ids"])
        return out

    def _first_fetch(self, k: int, excluded: int) -> int:
        """How many neighbours to ask for so that ``k`` survive ``excluded`` exclusions
        in one query, as a rule.

        Each extra round trip costs a whole query, while a few more neighbours cost
        little, so the fetch assumes the excluded ids are spread through the ranking as
        through the collection: ``k`` plus a margin, scaled by the share left after the
        exclusions.  The loop in :meth:`search_ranked` still widens when they cluster.
        """
        if not excluded:
            return k
        margin = min(excluded, max(2, k // 2))
        size = self._size_hint()
        # the excluded ids need not all be in the collection: this over-estimates the
        # share, which only asks for a few more neighbours
        share = min(0.9, excluded / size) if size else 0.0
        fetch = min(k + excluded, math.ceil((k + margin) / (1.0 - share)))
        # never more than the collection holds (a stale size only means one more query)
        return max(k, min(fetch, size)) if size else fetch

    def _query(
        self, vector: np.ndarray, n: int, documents: bool = True, metadatas: bool = True
    ) -> list[IndexHit]:
        include: list[Any] = ["distances"]
        if metadatas:
            include.insert(0, "metadatas")
        if documents:
            include.insert(0, "documents")
        queries = np.asarray(vector, dtype=np.float32)
        queries = queries[None, :] if queries.ndim == 1 else queries
        with _chroma_errors("query"):
            got = self._collection.query(query_embeddings=queries, n_results=n, include=include)
        best: dict[str, IndexHit] = {}
        # several views of one query: each id scores the best of its similarities
        for row in range(len(queries)):
            ids = got["ids"][row]
            docs = None
            if documents:
                docs = (got["documents"] or [[""] * len(ids)] * len(queries))[row]
            metas: list[Any] = [None] * len(ids)
            if metadatas and got["metadatas"]:
                metas = list(got["metadatas"][row])
            dists = (got["distances"] or [[]] * len(queries))[row]
            for i, (rid, meta, dist) in enumerate(zip(ids, metas, dists, strict=True)):
                # float32 distances can stray just outside [0, 2]
                score = min(1.0, max(-1.0, 1.0 - float(dist)))
                if rid not in best or score > best[rid].score:
                    doc = (docs[i] or "") if docs is not None else ""
                    best[rid] = IndexHit(rid, score, doc, _plain(meta))
        return sorted(best.values(), key=lambda h: -h.score)[:n]


def _plain(meta: Any) -> dict[str, Any]:
    """Chroma's metadata mapping as a plain dict (``None`` as empty)."""
    return dict(meta or {})


def _only(hit: IndexHit, fields: Sequence[str]) -> IndexHit:
    return IndexHit(
        hit.id, hit.score, "", {f: hit.metadata[f] for f in fields if f in hit.metadata}
    )
