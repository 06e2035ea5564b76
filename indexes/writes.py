"""Writes to the active index's collection, with the copies this process keeps of it
(:mod:`indexes.copies`) and its cached size kept in step: a write tells the copies when
it begins and what it wrote, and drops them when it failed part-way (some batches may be
in Chroma, some not: they are loaded again)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence

import numpy as np

from indexes.chroma import ChromaStore
from indexes.copies import FieldCache, LocalCopies
from indexes.embedder import Embedder
from indexes.errors import DeleteNotVerifiedError, ToolIndexError
from indexes.records import IndexRecord

SIZE_HINT_TTL = 5.0
"""Seconds a cached collection size is trusted when another process may write to the
same Chroma server; it only sizes the first fetch of a lookup, never its result."""


class SizeCache:
    """The collection's size, cached between this process's writes (and for
    :data:`SIZE_HINT_TTL` seconds, in case another process writes to a shared server)."""

    def __init__(self, store: ChromaStore) -> None:
        self._store = store
        self._size: tuple[int, float] | None = None

    def count(self) -> int:
        n = self._store.count()
        self._size = (n, time.monotonic())
        return n

    def hint(self) -> int:
        if self._size is None or time.monotonic() - self._size[1] > SIZE_HINT_TTL:
            return self.count()
        return self._size[0]

    def reset(self) -> None:
        self._size = None


class Writer:
    """Upserts and verified deletes over ``store``, embedding with ``embedder``."""

    def __init__(
        self,
        store: ChromaStore,
        embedder: Embedder,
        copies: LocalCopies,
        fields: FieldCache,
        size: SizeCache,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._copies = copies
        self._fields = fields
        self._size = size

    def upsert(
        self,
        records: Sequence[IndexRecord],
        embeddings: np.ndarray | None,
        progress: Callable[[int], None] | None,
    ) -> int:
        ids = [r.id for r in records]
        if len(set(ids)) != len(ids):
            raise ToolIndexError("duplicate ids in one upsert call")
        if embeddings is not None and len(embeddings) != len(records):
            raise ToolIndexError("embeddings and records differ in length")
        self._size.reset()
        self._fields.forget(ids)
        self._copies.begin_write()
        written: list[np.ndarray] = []
        try:
            done = self._batches(records, embeddings, progress, written)
        except BaseException:
            self._copies.drop()  # some batches may have been written: reload from Chroma
            raise
        finally:
            self._size.reset()
            self._fields.forget(ids)
        if records:
            self._copies.upserted(ids, np.concatenate(written), {r.id: r.lexical for r in records})
        return done

    def _batches(
        self,
        records: Sequence[IndexRecord],
        embeddings: np.ndarray | None,
        progress: Callable[[int], None] | None,
        written: list[np.ndarray],
    ) -> int:
        done = 0
        size = self._store.max_batch
        for start in range(0, len(records), size):
            chunk = records[start : start + size]
            vectors = (
                embeddings[start : start + len(chunk)]
                if embeddings is not None
                else self._embedder.embed([r.document for r in chunk])
            )
            vectors = np.asarray(vectors, dtype=np.float32)
            self._store.upsert(chunk, vectors)
            written.append(vectors)
            done += len(chunk)
            if progress is not None:
                progress(done)
        return done

    def delete(self, ids: Collection[str]) -> list[str]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        present = self._store.existing(wanted)
        if present:
            self._remove(sorted(present))
        self._verify_gone(wanted)
        return [i for i in wanted if i in present]

    def discard(self, ids: Collection[str]) -> None:
        """:meth:`delete` without first reading which ids are present (Chroma deletes an
        absent id as a no-op): one request fewer, for a caller that need not know."""
        wanted = list(dict.fromkeys(ids))
        if wanted:
            self._remove(wanted)
            self._verify_gone(wanted)

    def _remove(self, ids: list[str]) -> None:
        self._size.reset()
        self._fields.forget(ids)
        self._copies.deleted(ids)  # never ranked again, even before Chroma drops them
        try:
            self._store.delete(ids)
        except BaseException:
            self._copies.drop()  # some may remain in Chroma: reload from it
            raise
        finally:
            self._size.reset()
            self._fields.forget(ids)
            # a load that read them from Chroma before the delete is discarded
            self._copies.deleted(ids)

    def _verify_gone(self, wanted: list[str]) -> None:
        remaining = self._store.existing(wanted)
        if remaining:
            raise DeleteNotVerifiedError(sorted(remaining))
