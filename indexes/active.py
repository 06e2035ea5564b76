"""The active tool index: tools that may be retrieved, in a Chroma collection.

Only active tools live here.  Embeddings are always computed by our own
:class:`~indexes.embedder.Embedder` and passed to Chroma, so Chroma's default
embedding function (which downloads a model) is never used.  Every Chroma call goes
through :func:`_chroma_errors`, the single place where Chroma's exceptions become ours.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from indexes.embedder import Embedder
from indexes.errors import (
    DeleteNotVerifiedError,
    EmbedderMismatchError,
    IndexBackendError,
    ToolIndexError,
)

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection as ChromaCollection

MetadataValue = str | int | float | bool
ID_KEY = "tool_id"
"""Metadata key that repeats the record id, so that ``where`` filters can use it
(Chroma ignores ``where`` on ``#id`` in the embedded client)."""

SIZE_HINT_TTL = 5.0
"""Seconds a cached collection size is trusted when another process may write to the
same Chroma server; it only sizes the first fetch of a lookup, never its result."""


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
    ) -> None:
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

    # ---- construction -------------------------------------------------------------
    @classmethod
    def persistent(
        cls, path: str | Path, embedder: Embedder, collection: str = "tools"
    ) -> ActiveIndex:
        """An index stored under ``path`` by an embedded Chroma (one writer process)."""
        with _chroma_errors("open"):
            import chromadb
            from chromadb.config import Settings

            Path(path).mkdir(parents=True, exist_ok=True)
            client = chromadb.PersistentClient(
                path=str(path), settings=Settings(anonymized_telemetry=False)
            )
        return cls(client, embedder, collection)

    @classmethod
    def http(
        cls, host: str, port: int, embedder: Embedder, collection: str = "tools", ssl: bool = False
    ) -> ActiveIndex:
        """An index held by a Chroma server (``chroma run``)."""
        with _chroma_errors("connect"):
            import chromadb
            from chromadb.config import Settings

            client = chromadb.HttpClient(
                host=host, port=port, ssl=ssl, settings=Settings(anonymized_telemetry=False)
            )
        return cls(client, embedder, collection)

    # ---- properties ---------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def max_batch_size(self) -> int:
        return self._max_batch

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
        done = 0
        self._size = None
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
            with _chroma_errors("upsert"):
                self._collection.upsert(
                    ids=[r.id for r in chunk],
                    embeddings=np.asarray(vectors, dtype=np.float32),
                    documents=[r.document for r in chunk],
                    metadatas=metadatas,
                )
            done += len(chunk)
            if progress is not None:
                progress(done)
        return done

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
            for chunk in _batches(sorted(present), self._max_batch):
                with _chroma_errors("delete"):
                    self._collection.delete(ids=list(chunk))
        remaining = self.existing(wanted)
        if remaining:
            raise DeleteNotVerifiedError(sorted(remaining))
        return [i for i in wanted if i in present]

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
                out[rid] = IndexRecord(rid, doc or "", dict(meta or {}))
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
                yield IndexRecord(rid, doc or "", dict(meta or {}))
            offset += len(got["ids"])

    def embed_query(self, text: str) -> np.ndarray:
        return self._embedder.embed([text])[0]

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
    ) -> tuple[list[IndexHit], list[IndexHit]]:
        """Like :meth:`search`, also returning the excluded records that ranked above the
        last returned hit (what the exclusion displaced), in rank order."""
        if k < 1:
            raise ToolIndexError("k must be at least 1")
        vector = self.embed_query(query) if isinstance(query, str) else np.asarray(query)
        fetch = self._first_fetch(k, len(exclude))
        while True:
            ranked = self._query(vector, fetch, documents)
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

    def _query(self, vector: np.ndarray, n: int, documents: bool = True) -> list[IndexHit]:
        include: list[Any] = ["metadatas", "distances"]
        if documents:
            include.insert(0, "documents")
        with _chroma_errors("query"):
            got = self._collection.query(
                query_embeddings=np.asarray([vector], dtype=np.float32),
                n_results=n,
                include=include,
            )
        ids = got["ids"][0]
        docs = (got["documents"] or [[""] * len(ids)])[0] if documents else [""] * len(ids)
        metas = (got["metadatas"] or [[]])[0]
        dists = (got["distances"] or [[]])[0]
        return [
            # float32 distances can stray just outside [0, 2]
            IndexHit(rid, min(1.0, max(-1.0, 1.0 - float(dist))), doc or "", dict(meta or {}))
            for rid, doc, meta, dist in zip(ids, docs, metas, dists, strict=True)
        ]
