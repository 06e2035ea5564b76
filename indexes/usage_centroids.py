"""Usage centroids: one row per (pool, tool, outcome), the direction of the kept requests'
session-weighted sum, by which a lookup nominates the tools whose requests it scores
(see :mod:`indexes.usage`).  A pool is the trusted or the untrusted sources of a tool:
the rows do not multiply by the number of sources.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence

import numpy as np


class UsageCentroids:
    """One unit row per (pool, tool, outcome) with usage: the direction of its kept
    requests' session-weighted sum.  Rows stay in key order, so that the same evidence
    makes the same matrix whatever order it came in (and the same products, to the last
    bit); a row changes in place, and only a new or a forgotten one moves the others.
    The caller holds the index's lock."""

    def __init__(self, dim: int) -> None:
        self.keys: list[tuple[str, str, str]] = []
        self._matrix = np.zeros((16, dim), dtype=np.float32)
        self._rows: CentroidRows | None = None

    @property
    def matrix(self) -> np.ndarray:
        return self._matrix[: len(self.keys)]

    def put(self, key: tuple[str, str, str], total: np.ndarray | None) -> None:
        """Set ``key``'s row to the direction of ``total`` (``None`` or zero: remove)."""
        norm = 0.0 if total is None else float(np.linalg.norm(total.astype(np.float64)))
        at = bisect.bisect_left(self.keys, key)
        present = at < len(self.keys) and self.keys[at] == key
        n = len(self.keys)
        if total is None or norm == 0.0:
            if present:
                self._matrix[at : n - 1] = self._matrix[at + 1 : n]
                del self.keys[at]
                self._rows = None
            return
        if not present:
            if n == len(self._matrix):
                self._matrix = np.concatenate([self._matrix, np.zeros_like(self._matrix)])
            self._matrix[at + 1 : n + 1] = self._matrix[at:n]
            self.keys.insert(at, key)
            self._rows = None
        self._matrix[at] = total.astype(np.float64) / norm

    def nominated(
        self,
        queries: np.ndarray,
        per_pool: int,
        floor: float,
        tools: Collection[str] | None = None,
    ) -> list[tuple[str, str]]:
        """(pool, tool) pairs: for each pool, the ``per_pool`` tools whose rows of
        that pool (either outcome) come nearest the request, at ``floor`` or above,
        among ``tools`` (``None``: all); nearest first, equal ones by name."""
        if not self.keys:
            return []
        index = self._index()
        if tools is None:
            rows = np.arange(len(self.keys))
        else:
            found = [index.tool_rows[t] for t in tools if t in index.tool_rows]
            if not found:
                return []
            rows = np.sort(np.concatenate(found))
        sims = (self.matrix[rows] @ queries.T).max(axis=1)
        pairs = index.pair_of_row[rows]
        starts = np.flatnonzero(np.r_[True, pairs[1:] != pairs[:-1]])
        best, pairs = np.maximum.reduceat(sims, starts), pairs[starts]
        keep = best >= floor
        best, pairs = best[keep], pairs[keep]
        pools, names = index.pair_pool[pairs], index.pair_tool[pairs]
        order = np.lexsort((names, -best, pools))
        pools, names = pools[order], names[order]
        first = np.flatnonzero(np.r_[True, pools[1:] != pools[:-1]])
        rank = np.arange(len(pools)) - np.repeat(first, np.diff(np.r_[first, len(pools)]))
        chosen = rank < per_pool
        return [
            (index.pools[s], index.tools[t])
            for s, t in zip(pools[chosen].tolist(), names[chosen].tolist(), strict=True)
        ]

    def _index(self) -> CentroidRows:
        if self._rows is None:
            self._rows = CentroidRows(self.keys)
        return self._rows


class CentroidRows:
    """Where each (pool, tool) pair's rows are, in a centroid table's key order."""

    def __init__(self, keys: Sequence[tuple[str, str, str]]) -> None:
        self.pools = sorted({k[0] for k in keys})
        self.tools = sorted({k[1] for k in keys})
        pool_at = {s: i for i, s in enumerate(self.pools)}
        tool_at = {t: i for i, t in enumerate(self.tools)}
        pair_of_row: list[int] = []
        pair_pool: list[int] = []
        pair_tool: list[int] = []
        rows_of: dict[str, list[int]] = {}
        for row, (pool, tool, _) in enumerate(keys):
            if not pair_of_row or keys[row - 1][:2] != (pool, tool):
                pair_pool.append(pool_at[pool])
                pair_tool.append(tool_at[tool])
            pair_of_row.append(len(pair_pool) - 1)
            rows_of.setdefault(tool, []).append(row)
        self.pair_of_row = np.array(pair_of_row, dtype=np.intp)
        self.pair_pool = np.array(pair_pool, dtype=np.intp)
        self.pair_tool = np.array(pair_tool, dtype=np.intp)
        self.tool_rows = {t: np.array(r, dtype=np.intp) for t, r in rows_of.items()}
