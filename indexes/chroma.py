"""The Chroma boundary: opening and closing clients, and every call to a collection.

Every Chroma call goes through :func:`chroma_errors`, the single place where Chroma's
exceptions become ours, and every answer is unwrapped here from Chroma's nested
per-query lists into our own types (:mod:`indexes.records`).  Embeddings are always
computed by our own embedder and passed in, so Chroma's default embedding function
(which downloads a model) is never used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from indexes.embedder import Embedder
from indexes.errors import EmbedderMismatchError, IndexBackendError, ToolIndexError
from indexes.records import ID_KEY, IndexHit, IndexRecord, plain

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection as ChromaCollection

CHROMA_FILE = "chroma.sqlite3"
"""The file an embedded Chroma store keeps its records in, under its folder."""


@contextlib.contextmanager
def chroma_errors(operation: str) -> Iterator[None]:
    try:
        yield
    except ToolIndexError:
        raise
    except Exception as exc:  # chromadb raises a wide, unstable set of types
        raise IndexBackendError(operation, f"{type(exc).__name__}: {exc}") from exc


def batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def persistent_client(path: str | Path) -> ClientAPI:
    """An embedded Chroma over the folder ``path`` (made if missing)."""
    with chroma_errors("open"):
        import chromadb
        from chromadb.config import Settings

        Path(path).mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(
            path=str(path), settings=Settings(anonymized_telemetry=False)
        )


def http_client(host: str, port: int, ssl: bool) -> ClientAPI:
    """A client of a Chroma server (``chroma run``)."""
    with chroma_errors("connect"):
        import chromadb
        from chromadb.config import Settings

        return chromadb.HttpClient(
            host=host, port=port, ssl=ssl, settings=Settings(anonymized_telemetry=False)
        )


def close_client(client: Any) -> None:
    """Release a client: a server client's HTTP pools first (the client, and the admin
    client it made for itself, each have one; stopping the system drops them without
    closing their sockets), then the client.  Never raises: closing must not mask the
    caller's error."""
    with contextlib.suppress(Exception):
        for part in (client, getattr(client, "_admin_client", None)):
            session = getattr(getattr(part, "_server", None), "_session", None)
            if session is not None and callable(getattr(session, "close", None)):
                session.close()
        close = getattr(client, "close", None)
        if callable(close):
            close()


class ChromaStore:
    """One Chroma collection of records whose vectors ``embedder`` made: the calls the
    active index makes, each mapped to our errors and types."""

    def __init__(self, client: ClientAPI, embedder: Embedder, name: str) -> None:
        with chroma_errors("open"):
            self.max_batch = int(client.get_max_batch_size())
            self.collection: ChromaCollection = client.get_or_create_collection(
                name,
                embedding_function=None,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"embedder": embedder.name, "dim": embedder.dim},
            )
        stored = (self.collection.metadata or {}).get("embedder")
        if stored is not None and stored != embedder.name:
            raise EmbedderMismatchError(name, str(stored), embedder.name)
        self._dim = embedder.dim

    def count(self) -> int:
        with chroma_errors("count"):
            return int(self.collection.count())

    def upsert(self, chunk: Sequence[IndexRecord], vectors: np.ndarray) -> None:
        """Write one batch (at most ``max_batch`` records) with its vectors."""
        # Chroma merges metadata on upsert; a key the new record lacks is removed by
        # sending it as None, so the record is replaced, not merged.
        with chroma_errors("get"):
            old = self.collection.get(ids=[r.id for r in chunk], include=["metadatas"])
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
        with chroma_errors("upsert"):
            self.collection.upsert(
                ids=[r.id for r in chunk],
                embeddings=vectors,
                documents=[r.document for r in chunk],
                metadatas=cast(Any, metadatas),
            )

    def delete(self, ids: Iterable[str]) -> None:
        for chunk in batches(sorted(ids), self.max_batch):
            with chroma_errors("delete"):
                self.collection.delete(ids=list(chunk))

    def existing(self, ids: Iterable[str]) -> set[str]:
        found: set[str] = set()
        for chunk in batches(list(dict.fromkeys(ids)), self.max_batch):
            with chroma_errors("get"):
                got = self.collection.get(ids=list(chunk), include=[])
            found.update(got["ids"])
        return found

    def get(self, ids: Iterable[str]) -> dict[str, IndexRecord]:
        out: dict[str, IndexRecord] = {}
        for chunk in batches(list(dict.fromkeys(ids)), self.max_batch):
            with chroma_errors("get"):
                got = self.collection.get(ids=list(chunk), include=["documents", "metadatas"])
            for rid, doc, meta in zip(
                got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True
            ):
                out[rid] = IndexRecord(rid, doc or "", plain(meta))
        return out

    def records(self, ids: Sequence[str], documents: bool) -> dict[str, IndexRecord]:
        """The records of ``ids`` in one read, with or without their documents."""
        include: list[Any] = ["documents", "metadatas"] if documents else ["metadatas"]
        with chroma_errors("get"):
            got = self.collection.get(ids=list(ids), include=include)
        metas: list[Any] = list(got["metadatas"] or ()) or [None] * len(got["ids"])
        docs = (got["documents"] if documents else None) or [""] * len(got["ids"])
        return {
            rid: IndexRecord(rid, doc or "", plain(meta))
            for rid, doc, meta in zip(got["ids"], docs, metas, strict=True)
        }

    def scan(self, page_size: int) -> Iterator[IndexRecord]:
        offset = 0
        size = min(page_size, self.max_batch)
        while True:
            with chroma_errors("get"):
                got = self.collection.get(
                    include=["documents", "metadatas"], limit=size, offset=offset
                )
            if not got["ids"]:
                return
            for rid, doc, meta in zip(
                got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True
            ):
                yield IndexRecord(rid, doc or "", plain(meta))
            offset += len(got["ids"])

    def unreadable(self, ids: list[str]) -> set[str]:
        """The ``ids`` Chroma lists but cannot return a vector for."""
        from chromadb.errors import InternalError

        try:
            with chroma_errors("get"):
                got = self.collection.get(ids=ids, include=["embeddings"])
        except IndexBackendError as exc:
            if not isinstance(exc.__cause__, InternalError):
                raise
            if len(ids) == 1:
                return set(ids)
            half = len(ids) // 2  # one lost vector fails the whole get: find which
            return self.unreadable(ids[:half]) | self.unreadable(ids[half:])
        vectors = got["embeddings"]
        if vectors is None:
            return set(got["ids"])
        return {rid for rid, v in zip(got["ids"], vectors, strict=True) if v is None or len(v) == 0}

    def vectors(self, limit: int) -> tuple[list[str], np.ndarray] | None:
        """Every id and vector, in pages; ``None`` once there are more than ``limit``."""
        ids: list[str] = []
        rows: list[np.ndarray] = []
        offset = 0
        while True:
            with chroma_errors("get"):
                got = self.collection.get(
                    include=["embeddings"], limit=self.max_batch, offset=offset
                )
            if not got["ids"]:
                break
            ids += got["ids"]
            rows.append(np.asarray(got["embeddings"], dtype=np.float32))
            if len(ids) > limit:
                return None
            if len(got["ids"]) < self.max_batch:
                break
            offset += len(got["ids"])
        empty = np.zeros((0, self._dim), dtype=np.float32)
        return ids, np.concatenate(rows) if rows else empty

    def vectors_of(self, ids: Sequence[str]) -> Iterator[tuple[list[str], np.ndarray]]:
        """The vectors of those of ``ids`` Chroma holds, one batch at a time."""
        for chunk in batches(ids, self.max_batch):
            with chroma_errors("get"):
                got = self.collection.get(ids=list(chunk), include=["embeddings"])
            vectors = got["embeddings"]
            if vectors is not None and len(got["ids"]):
                yield list(got["ids"]), np.asarray(vectors, dtype=np.float32)

    def query(
        self, vector: np.ndarray, n: int, documents: bool = True, metadatas: bool = True
    ) -> list[IndexHit]:
        """The ``n`` nearest records to ``vector`` (several rows: the views of one query,
        each id scoring the best of its similarities), best first."""
        include: list[Any] = ["distances"]
        if metadatas:
            include.insert(0, "metadatas")
        if documents:
            include.insert(0, "documents")
        queries = np.asarray(vector, dtype=np.float32)
        queries = queries[None, :] if queries.ndim == 1 else queries
        with chroma_errors("query"):
            got = self.collection.query(query_embeddings=queries, n_results=n, include=include)
        best: dict[str, IndexHit] = {}
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
                    best[rid] = IndexHit(rid, score, doc, plain(meta))
        return sorted(best.values(), key=lambda h: -h.score)[:n]
