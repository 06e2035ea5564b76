"""The requests a usage index keeps of one tool, outcome and trust (see :mod:`indexes.usage`).

A :class:`RequestSample` holds the ``size`` smallest request keys that any of its sources
reported (a bottom-k sample of the union of their requests), and for each kept request
the sessions each source that made it brought.  Its memory is ``size`` vectors and one
small count per (request, source) pair, however many sources report: one more source
adds counts to the kept requests, never rows.  Vectors are kept as int8 codes with a
scale per row (384 + 4 bytes for MiniLM instead of 1,536): a similarity read back is
within about 1e-3 of the float32 one, far below the margins the index scores by.

The bottom-k of a union is the union's bottom-k of each source's own bottom-k: a store
that keeps each source's ``size`` smallest keys can rebuild the sample exactly without
any one source (:meth:`indexes.usage.UsageIndex.forget`).
"""

from __future__ import annotations

import numpy as np

QUANTUM = float(1 << 20)
"""Request vectors are summed as integers of this resolution: exact in any order."""
KEY = "S16"
"""A request key as its 16 raw bytes (the hex key's order is the bytes' order)."""


def encode(vector: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """A unit vector as int8 codes and the scale that brings them back."""
    peak = float(np.abs(vector).max())
    scale = np.float32(peak / 127.0 if peak > 0 else 1.0)
    codes = np.clip(np.rint(vector / scale), -127, 127).astype(np.int8)
    return codes, scale


def hex_key(raw: bytes) -> str:
    """The hex request key of ``raw`` (numpy drops a ``KEY``'s trailing zero bytes)."""
    return raw.ljust(16, b"\0").hex()


class RequestSample:
    """The kept requests of one tool, outcome and trust: rows in key order (key, int8
    codes, scale), and (request, source) pairs in key order with their sessions.  The
    caller holds the index's lock."""

    def __init__(self, size: int, dim: int) -> None:
        self.size = size
        self.keys = np.zeros(0, dtype=KEY)
        self.codes = np.zeros((0, dim), dtype=np.int8)
        self.scales = np.zeros(0, dtype=np.float32)
        self.pair_keys = np.zeros(0, dtype=KEY)
        self.pair_sources = np.zeros(0, dtype=np.int32)
        self.pair_counts = np.zeros(0, dtype=np.int64)
        self._pair_rows: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: bytes, vector: np.ndarray, source: int, sessions: int) -> tuple[bool, str]:
        """Count ``sessions`` of ``source`` for the request; returns whether the request
        is kept and the hex key of the one it pushed out ("" for none)."""
        at = int(np.searchsorted(self.keys, key))
        # a key read back from the array has lost its trailing zero bytes (``KEY``)
        if at < len(self.keys) and self.keys[at] == key.rstrip(b"\0"):
            self._count(key, source, sessions)
            return True, ""
        if len(self.keys) == self.size and at == self.size:
            return False, ""
        codes, scale = encode(vector)
        self.keys = np.insert(self.keys, at, key)
        self.codes = np.insert(self.codes, at, codes, axis=0)
        self.scales = np.insert(self.scales, at, scale)
        self._count(key, source, sessions)
        if len(self.keys) <= self.size:
            return True, ""
        dropped = bytes(self.keys[-1])
        self._drop_rows(np.array([len(self.keys) - 1]))
        return True, hex_key(dropped)

    def _count(self, key: bytes, source: int, sessions: int) -> None:
        lo = int(np.searchsorted(self.pair_keys, key, side="left"))
        hi = int(np.searchsorted(self.pair_keys, key, side="right"))
        found = np.flatnonzero(self.pair_sources[lo:hi] == source)
        if len(found):
            self.pair_counts[lo + int(found[0])] += sessions
            return
        self.pair_keys = np.insert(self.pair_keys, hi, key)
        self.pair_sources = np.insert(self.pair_sources, hi, source)
        self.pair_counts = np.insert(self.pair_counts, hi, sessions)
        self._pair_rows = None

    def _drop_rows(self, rows: np.ndarray) -> None:
        gone = np.isin(self.pair_keys, self.keys[rows])
        self.keys = np.delete(self.keys, rows)
        self.codes = np.delete(self.codes, rows, axis=0)
        self.scales = np.delete(self.scales, rows)
        self._drop_pairs(gone)

    def _drop_pairs(self, gone: np.ndarray) -> None:
        keep = ~gone
        self.pair_keys = self.pair_keys[keep]
        self.pair_sources = self.pair_sources[keep]
        self.pair_counts = self.pair_counts[keep]
        self._pair_rows = None

    def counted(self, key: bytes, source: int) -> int:
        """The sessions of ``source`` the sample holds for the request (0: not kept)."""
        lo = int(np.searchsorted(self.pair_keys, key, side="left"))
        hi = int(np.searchsorted(self.pair_keys, key, side="right"))
        found = np.flatnonzero(self.pair_sources[lo:hi] == source)
        return int(self.pair_counts[lo + int(found[0])]) if len(found) else 0

    def forget(self, source: int) -> int:
        """Drop ``source``'s counts, and the requests no other source made; returns the
        sessions dropped."""
        mine = self.pair_sources == source
        forgotten = int(self.pair_counts[mine].sum())
        if not mine.any():
            return 0
        self._drop_pairs(mine)
        orphans = np.flatnonzero(~np.isin(self.keys, self.pair_keys))
        if len(orphans):
            self.keys = np.delete(self.keys, orphans)
            self.codes = np.delete(self.codes, orphans, axis=0)
            self.scales = np.delete(self.scales, orphans)
        return forgotten

    def sessions(self) -> int:
        return int(self.pair_counts.sum())

    def sources(self) -> set[int]:
        return set(self.pair_sources.tolist())

    def pair_rows(self) -> np.ndarray:
        """Each pair's row."""
        if self._pair_rows is None:
            self._pair_rows = np.searchsorted(self.keys, self.pair_keys)
        return self._pair_rows

    def total(self) -> np.ndarray | None:
        """The session-weighted sum of the kept vectors, as exact integers (``None``:
        nothing kept)."""
        if not len(self.keys):
            return None
        weights = np.zeros(len(self.keys), dtype=np.int64)
        np.add.at(weights, self.pair_rows(), self.pair_counts)
        decoded = self.codes.astype(np.float64) * self.scales.astype(np.float64)[:, None]
        quantized = np.rint(decoded * QUANTUM).astype(np.int64)
        total: np.ndarray = (quantized * weights[:, None]).sum(axis=0)
        return total

    def similarities(self, queries: np.ndarray) -> np.ndarray:
        """Each pair's request's best similarity to the views ``queries``."""
        best = (self.codes.astype(np.float32) @ queries.T).max(axis=1) * self.scales
        out: np.ndarray = best[self.pair_rows()]
        return out
