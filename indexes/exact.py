"""The exact tier: every vector of a collection in one float32 matrix, ranked by brute
force in the process.

Up to tens of thousands of tools, one matrix-vector product over the whole catalog costs
less than a round trip through Chroma's HNSW query, and it is exact, where HNSW is
approximate (``benchmarks/bench_embed.py`` measures where the two cross).  Chroma stays
the store of record: the tier is a copy that :class:`~indexes.active.ActiveIndex` loads
from it and keeps in step with its own writes.

Concurrency: a :class:`Snapshot` is immutable.  Readers take the current one without a
lock; a write builds a new snapshot (copy on write) and swaps it in under the tier's
lock.  Every write also bumps a generation, so a snapshot loaded from Chroma while a
write ran is thrown away rather than installed (it may hold a record the write deleted).

Because a snapshot never changes, it also remembers its last :data:`MEMO_SIZE` rankings:
a repeated lookup (same query vector, k and exclusions) costs a dictionary read instead
of a pass over the matrix, and a write, which makes a new snapshot, starts afresh.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

MEMO_SIZE = 1024
"""Rankings a snapshot remembers (each a few dozen ids and scores)."""

Ranked = tuple[list[tuple[str, float]], list[tuple[str, float]]]
Scored = tuple[list[tuple[str, float]], list[tuple[str, float]], float]


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as float32 rows of unit length (a zero row stays zero)."""
    rows = np.asarray(vectors, dtype=np.float32)
    if rows.ndim == 1:
        rows = rows[None, :]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = rows / norms
    return out


@dataclass(frozen=True)
class Snapshot:
    """Ids and their unit vectors, row ``i`` of ``matrix`` belonging to ``ids[i]``."""

    ids: tuple[str, ...]
    matrix: np.ndarray
    position: Mapping[str, int]
    _memo: _Memo = field(default_factory=lambda: _Memo(MEMO_SIZE), compare=False, repr=False)

    @classmethod
    def build(cls, ids: Sequence[str], vectors: np.ndarray) -> Snapshot:
        """A snapshot of ``ids`` and their ``vectors`` (normalised here)."""
        return cls._of(ids, unit_rows(vectors) if len(ids) else _empty(vectors))

    @classmethod
    def _of(cls, ids: Sequence[str], matrix: np.ndarray) -> Snapshot:
        if len(ids) != len(matrix):
            raise ValueError("ids and vectors differ in length")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate ids")
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        matrix.setflags(write=False)
        return cls(tuple(ids), matrix, {rid: i for i, rid in enumerate(ids)})

    def __len__(self) -> int:
        return len(self.ids)

    def top(self, vector: np.ndarray, n: int) -> list[tuple[str, float]]:
        """The ``n`` nearest ids by cosine similarity, best first, with their scores
        (equal scores in row order).  Several query vectors (rows of ``vector``: the
        views of one query) score each id by the best of its similarities."""
        return self._top(self.scores(vector), n)

    def _top(self, scores: np.ndarray, n: int) -> list[tuple[str, float]]:
        n = min(n, len(self.ids))
        if n <= 0:
            return []
        if n < len(scores):
            # the n best in any order, then only those sorted
            best = np.argpartition(-scores, n - 1)[:n]
            order = best[np.lexsort((best, -scores[best]))]
        else:
            order = np.lexsort((np.arange(len(scores)), -scores))
        ids = self.ids
        return [(ids[i], min(1.0, max(-1.0, float(scores[i])))) for i in order]

    def scores(self, vector: np.ndarray) -> np.ndarray:
        """Every row's cosine similarity to ``vector`` (the best over its rows)."""
        queries = unit_rows(vector)
        if len(queries) == 1:
            out: np.ndarray = self.matrix @ queries[0]
            return out
        best: np.ndarray = (self.matrix @ queries.T).max(axis=1)
        return best

    def similarity(self, vector: np.ndarray, ids: Collection[str]) -> dict[str, float]:
        """The cosine similarity of each of ``ids`` it holds to ``vector`` (the best
        over its rows)."""
        rows = [(rid, self.position[rid]) for rid in ids if rid in self.position]
        if not rows:
            return {}
        queries = unit_rows(vector)
        sims = (self.matrix[[at for _, at in rows]] @ queries.T).max(axis=1)
        return {rid: min(1.0, max(-1.0, float(v))) for (rid, _), v in zip(rows, sims, strict=True)}

    def ranked(self, vector: np.ndarray, k: int, exclude: Collection[str]) -> Ranked:
        """The ``k`` best ids not in ``exclude``, and the excluded ones that ranked above
        the last of them (what the exclusion displaced), each best first with scores.
        One pass: ``k`` plus every exclusion is sure to be enough."""
        hits, displaced, _ = self.scored(vector, k, exclude)
        return hits, displaced

    def scored(self, vector: np.ndarray, k: int, exclude: Collection[str]) -> Scored:
        """:meth:`ranked`, and the standard deviation of the similarity over every
        record (the scale on which the hybrid ranking weighs it)."""
        key = (np.asarray(vector, dtype=np.float32).tobytes(), k, frozenset(exclude))
        found = self._memo.get(key)
        if found is None:
            scores = self.scores(vector)
            hits: list[tuple[str, float]] = []
            displaced: list[tuple[str, float]] = []
            for rid, score in self._top(scores, k + len(exclude)):
                if len(hits) == k:
                    break
                (displaced if rid in exclude else hits).append((rid, score))
            found = (hits, displaced, float(scores.std()) if len(scores) else 0.0)
            self._memo.put(key, found)
        return list(found[0]), list(found[1]), found[2]

    def upserted(self, ids: Sequence[str], vectors: np.ndarray) -> Snapshot:
        """A new snapshot with ``ids`` added or their vectors replaced."""
        rows = unit_rows(vectors)
        matrix = np.array(self.matrix) if len(self.ids) else _empty(rows)
        new_ids = list(self.ids)
        added: list[int] = []
        for i, rid in enumerate(ids):
            at = self.position.get(rid)
            if at is None:
                added.append(i)
                new_ids.append(rid)
            else:
                matrix[at] = rows[i]
        if added:
            matrix = np.concatenate([matrix, rows[added]])
        return Snapshot._of(new_ids, matrix)

    def without(self, ids: Collection[str]) -> Snapshot:
        """A new snapshot without ``ids`` (unknown ids are ignored)."""
        drop = [self.position[rid] for rid in ids if rid in self.position]
        if not drop:
            return self
        keep = np.ones(len(self.ids), dtype=bool)
        keep[drop] = False
        kept_ids = [rid for rid, k in zip(self.ids, keep, strict=True) if k]
        return Snapshot._of(kept_ids, self.matrix[keep])


class _Memo:
    """A small thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[object, Scored] = OrderedDict()

    def get(self, key: object) -> Scored | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: object, value: Scored) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def _empty(like: np.ndarray) -> np.ndarray:
    dim = like.shape[-1] if like.ndim else 0
    return np.zeros((0, dim), dtype=np.float32)


class ExactTier:
    """The current :class:`Snapshot` of a collection of at most ``limit`` records, or
    none (not loaded yet, dropped, or the collection outgrew ``limit``)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._generation = 0

    def current(self) -> Snapshot | None:
        return self._snapshot  # one attribute read: atomic, no lock needed

    def generation(self) -> int:
        with self._lock:
            return self._generation

    def install(self, snapshot: Snapshot, generation: int) -> bool:
        """Make ``snapshot`` (loaded from the store since ``generation``) current, unless
        a write began since then or it is over the limit."""
        with self._lock:
            if generation != self._generation or len(snapshot) > self.limit:
                return False
            self._snapshot = snapshot
            return True

    def begin_write(self) -> None:
        """A write to the store is about to start: loads in flight will not install."""
        with self._lock:
            self._generation += 1

    def upserted(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """The store now holds ``vectors`` for ``ids``."""
        with self._lock:
            self._generation += 1
            if self._snapshot is not None:
                updated = self._snapshot.upserted(ids, vectors)
                self._snapshot = updated if len(updated) <= self.limit else None

    def deleted(self, ids: Collection[str]) -> None:
        """``ids`` are leaving (or have left) the store: never rank them again."""
        with self._lock:
            self._generation += 1
            if self._snapshot is not None:
                self._snapshot = self._snapshot.without(ids)

    def drop(self) -> None:
        """Forget the snapshot (the store changed in a way this tier cannot follow)."""
        with self._lock:
            self._generation += 1
            self._snapshot = None
