"""Usage: what finished sessions taught about which tools serve which requests.

A completed session says that its tools served its request; a session abandoned at a
deterministic failure says that the tool it failed at did not.  Each such fact is one
:class:`Evidence`: a tool, the *source* that reported it (a named token, ``gateway``,
``otlp``, ``local``), the session's key, the request's vector (embedded with the model
of the index) and the outcome.  :class:`UsageIndex` turns the evidence into a boost per
tool for a new request, which :func:`sidecar.ranking.fuse` adds to the tool's fused
score.

**The signal.**  A past request is a second description of the tool that served it, in
the words of the people who use it.  For a new request with dense similarity ``d`` to
the tool's own text, a source whose completed requests for the tool come closer than
that (best similarity ``p``) raises the tool by ``GAIN * max(0, p - max(d, FLOOR) -
MARGIN) / spread``, in units of the dense similarity's spread over the catalog (the
unit of the fusion); its abandoned requests (best similarity ``a``) lower it by the same
measure of ``a``.  So a tool is raised for requests like those it served, in proportion
to how much better they match than its own description, never for requests merely in
the neighbourhood of them (below ``FLOOR + MARGIN``: a paraphrase scores 0.6-0.9 with
this model, an unrelated request 0-0.3), and never for requests like those it was
abandoned on: for such a request ``a >= p`` and the source's part is at most zero.

**Bounds.**  One source's part, raise or penalty, is capped at ``source_cap`` (or
``trusted_cap`` for a trusted source) and the sum of all parts at ``total_cap``: one
source alone can never move a tool by more than its cap, whatever it reports.  Each
(tool, source, outcome) keeps at most ``memory`` distinct requests, those whose hash is
smallest (a bottom-k sample: the same evidence in any order keeps the same requests),
each with the number of sessions that made it; a request seen again adds a session.
Everything the index answers is a function of the kept requests alone, so the rows a
store holds can be pruned to them (:attr:`Added.evicted`) and :meth:`UsageIndex.
from_rows` on another replica rebuilds the same index, bit for bit.

**Cost.**  A lookup first ranks, for each source, the tools it taught by their usage
centroid (the session-weighted mean of the source's kept requests for the tool, one row
per tool, source and outcome, summed exactly as integers), and scores the requests of
each source's ``preselect`` nearest tools only: its cost grows with the tools that have
usage and the sources that taught them, never with the number of sessions.  Each source
picks its own tools, so that none can push another's out of the lookup either.

**Forgetting.**  :meth:`UsageIndex.forget` drops every piece of a source's evidence: the
index is then exactly what it would be had the source never reported.

This module is pure (numpy only): it stores nothing and imports nothing of the sidecar.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

GAIN = 0.75
"""Spreads of raise per spread by which a past request beats the tool's own text."""
MARGIN = 0.10
"""Cosine similarity a past request must beat the tool's own text by before it counts."""
FLOOR = 0.30
"""The similarity a past request must beat (by ``MARGIN``) however poorly the tool's own
text matches the request: below it, a request is not like the ones the tool served."""
SOURCE_CAP = 1.0
"""The most one untrusted source can raise (or lower) a tool, in dense spreads: about
the gap between the first tool of a ranking and its fifth."""
TRUSTED_CAP = 4.0
"""The same for a trusted source."""
TOTAL_CAP = 4.0
"""The most all sources together can raise or lower a tool."""
MEMORY = 64
"""Distinct requests kept per tool, source and outcome."""
PRESELECT = 8
"""Tools, nearest by usage centroid, whose requests a lookup scores."""
QUANTUM = float(1 << 20)
"""Request vectors are summed as integers of this resolution: exact in any order."""
OUTCOMES = ("completed", "abandoned")


@dataclass(frozen=True)
class Evidence:
    """One tool of one finished session: ``completed`` (it served ``vector``'s request)
    or not (the session was abandoned at a deterministic failure of this tool)."""

    tool_id: str
    source: str
    session: str
    vector: np.ndarray = field(compare=False, repr=False)
    completed: bool = True
    at: float = 0.0
    """When the session ended (seconds since the epoch): kept in rows, never scored."""

    @property
    def key(self) -> str:
        """The request's identity: identical request vectors are one request."""
        return request_key(unit(self.vector))

    @property
    def outcome(self) -> str:
        return OUTCOMES[0] if self.completed else OUTCOMES[1]

    def row(self) -> tuple[str, str, str, str, bytes, str, float]:
        """``(tool_id, source, session, key, vector, outcome, at)``, the vector as
        little-endian float32 bytes: what a store keeps to rebuild the index."""
        vector = np.asarray(self.vector, dtype="<f4").tobytes()
        return (self.tool_id, self.source, self.session, self.key, vector, self.outcome, self.at)

    @classmethod
    def from_row(cls, row: Sequence[object]) -> Evidence:
        """The evidence of a :meth:`row` (the key, recomputed, is not read)."""
        tool_id, source, session, _key, vector, outcome, at = row
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        if not isinstance(vector, bytes | bytearray | memoryview):
            raise ValueError("vector must be float32 bytes")
        return cls(
            str(tool_id),
            str(source),
            str(session),
            np.frombuffer(bytes(vector), dtype="<f4").astype(np.float32),
            outcome == OUTCOMES[0],
            float(at),  # type: ignore[arg-type]
        )


def unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` as one float32 row of unit length, as the index keeps it."""
    row = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(row))
    if not np.isfinite(norm) or norm == 0:
        raise ValueError("a request vector must be finite and non-zero")
    return np.asarray(row / np.float32(norm), dtype=np.float32)


def request_key(vector: np.ndarray) -> str:
    """A request vector's hash (hex): its identity, and its rank in the bottom-k sample."""
    data = np.ascontiguousarray(vector, dtype="<f4").tobytes()
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def request_vector(views: np.ndarray, tool_vector: np.ndarray | None) -> np.ndarray:
    """The vector that stands for a request in a tool's usage: of the request's views
    (its sentences' vectors, one row each), the one closest to the tool's own vector,
    for a request with several parts served by several tools; the only view, or the
    first when the tool's vector is unknown."""
    rows = np.asarray(views, dtype=np.float32)
    if rows.ndim == 1:
        return rows
    at = 0
    if tool_vector is not None and len(rows) > 1:
        at = int(np.argmax(rows @ np.asarray(tool_vector, dtype=np.float32)))
    chosen: np.ndarray = rows[at]
    return chosen


@dataclass(frozen=True)
class Added:
    """What :meth:`UsageIndex.add` did: whether the request is kept, and the keys of the
    requests of the same tool, source and outcome it pushed out of the memory (rows a
    store may delete)."""

    kept: bool
    evicted: tuple[str, ...] = ()


@dataclass(frozen=True)
class UsageBoost:
    """A tool's usage for one request: ``score`` is added to its fused score (in dense
    spreads; negative when abandoned sessions lower it), ``sessions`` counts the
    completed sessions whose requests raised it."""

    score: float
    sessions: int


def _quantized(vector: np.ndarray) -> np.ndarray:
    return np.rint(vector.astype(np.float64) * QUANTUM).astype(np.int64)


class _Memory:
    """The kept requests of one tool, source and outcome: key -> (vector, sessions), and
    the session-weighted sum of their vectors as exact integers."""

    def __init__(self, size: int, dim: int) -> None:
        self.size = size
        self.entries: dict[str, tuple[np.ndarray, int]] = {}
        self.total = np.zeros(dim, dtype=np.int64)
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None

    def sessions(self) -> int:
        return sum(n for _, n in self.entries.values())

    def add(self, key: str, vector: np.ndarray) -> Added:
        self._matrix = None
        found = self.entries.get(key)
        if found is not None:
            self.entries[key] = (found[0], found[1] + 1)
            self.total += _quantized(found[0])
            return Added(True)
        self.entries[key] = (vector, 1)
        self.total += _quantized(vector)
        if len(self.entries) <= self.size:
            return Added(True)
        largest = max(self.entries)
        dropped, sessions = self.entries.pop(largest)
        self.total -= _quantized(dropped) * sessions
        return Added(False) if largest == key else Added(True, (largest,))

    def matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept vectors (rows in key order) and their session counts."""
        if self._matrix is None:
            keys = sorted(self.entries)
            vectors = np.stack([self.entries[k][0] for k in keys])
            self._matrix = (vectors, np.array([self.entries[k][1] for k in keys]))
        return self._matrix


class _Centroids:
    """One unit row per (source, tool, outcome) with usage: the direction of its kept
    requests' session-weighted sum.  Rows stay in key order, so that the same evidence
    makes the same matrix whatever order it came in (and the same products, to the last
    bit); a row changes in place, and only a new or a forgotten one moves the others.
    The caller holds the index's lock."""

    def __init__(self, dim: int) -> None:
        self.keys: list[tuple[str, str, str]] = []
        self._matrix = np.zeros((16, dim), dtype=np.float32)
        self._groups: list[tuple[str, int, np.ndarray, list[str]]] | None = None

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
                self._groups = None
            return
        if not present:
            if n == len(self._matrix):
                self._matrix = np.concatenate([self._matrix, np.zeros_like(self._matrix)])
            self._matrix[at + 1 : n + 1] = self._matrix[at:n]
            self.keys.insert(at, key)
            self._groups = None
        self._matrix[at] = total.astype(np.float64) / norm

    def nominated(self, queries: np.ndarray, per_source: int) -> dict[str, list[str]]:
        """For each source, the ``per_source`` tools whose rows of that source (either
        outcome) come nearest the request, nearest first (equal ones by name)."""
        if not self.keys:
            return {}
        sims = (self.matrix @ queries.T).max(axis=1)
        out: dict[str, list[str]] = {}
        for source, start, starts, tools in self._grouped():
            best = np.maximum.reduceat(sims[start : start + int(starts[-1])], starts[:-1])
            rows = np.arange(len(tools))
            if per_source < len(tools):
                rows = np.argpartition(-best, per_source - 1)[:per_source]
            out[source] = [tools[i] for i in rows[np.lexsort((rows, -best[rows]))]]
        return out

    def _grouped(self) -> list[tuple[str, int, np.ndarray, list[str]]]:
        """Per source: its first row, where each of its tools' rows start (relative to
        that row, its number of rows last), and its tools."""
        if self._groups is None:
            keys = self.keys
            groups: list[tuple[str, int, np.ndarray, list[str]]] = []
            i = 0
            while i < len(keys):
                source, start = keys[i][0], i
                starts: list[int] = []
                tools: list[str] = []
                while i < len(keys) and keys[i][0] == source:
                    if not tools or tools[-1] != keys[i][1]:
                        tools.append(keys[i][1])
                        starts.append(i - start)
                    i += 1
                starts.append(i - start)
                groups.append((source, start, np.array(starts, dtype=np.intp), tools))
            self._groups = groups
        return self._groups


class UsageIndex:
    """The usage of the tools of one index, from evidence of any number of sources.

    Thread-safe: writes take a lock; a lookup reads a consistent view of the index."""

    def __init__(
        self,
        dim: int,
        *,
        trusted: Collection[str] = (),
        memory: int = MEMORY,
        preselect: int = PRESELECT,
        source_cap: float = SOURCE_CAP,
        trusted_cap: float = TRUSTED_CAP,
        total_cap: float = TOTAL_CAP,
        gain: float = GAIN,
        margin: float = MARGIN,
        floor: float = FLOOR,
    ) -> None:
        if dim < 1 or memory < 1 or preselect < 1:
            raise ValueError("dim, memory and preselect must be at least 1")
        if min(source_cap, trusted_cap, total_cap, gain) < 0:
            raise ValueError("caps and gain must not be negative")
        self.dim = dim
        self.trusted = frozenset(trusted)
        self._size = memory
        self._preselect = preselect
        self._caps = (source_cap, trusted_cap, total_cap)
        self._gain = gain
        self._margin = margin
        self._floor = floor
        self._lock = threading.Lock()
        # tool -> source -> outcome -> memory
        self._tools: dict[str, dict[str, dict[str, _Memory]]] = {}
        self._centroids = _Centroids(dim)

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[object]], dim: int, **options: object) -> UsageIndex:
        """The index of the evidence in ``rows`` (:meth:`Evidence.row`), in any order."""
        index = cls(dim, **options)  # type: ignore[arg-type]
        for row in rows:
            index.add(Evidence.from_row(row))
        return index

    # ---- writes ---------------------------------------------------------------------
    def add(self, evidence: Evidence) -> Added:
        """Learn one piece of evidence.  Each session is to be added once per tool (the
        rows a store keeps are keyed by tool, source and session): a session added twice
        counts twice."""
        vector = self._unit(evidence.vector)
        with self._lock:
            sources = self._tools.setdefault(evidence.tool_id, {})
            outcomes = sources.setdefault(evidence.source, {})
            memory = outcomes.get(evidence.outcome)
            if memory is None:
                memory = outcomes[evidence.outcome] = _Memory(self._size, self.dim)
            added = memory.add(request_key(vector), vector)
            self._recentre(evidence.tool_id, evidence.source, evidence.outcome)
            return added

    def forget(self, source: str) -> int:
        """Drop everything ``source`` taught; returns the sessions forgotten."""
        with self._lock:
            forgotten = 0
            for tool in sorted(self._tools):
                outcomes = self._tools[tool].pop(source, {})
                forgotten += sum(m.sessions() for m in outcomes.values())
                if not self._tools[tool]:
                    del self._tools[tool]
                for outcome in outcomes:
                    self._recentre(tool, source, outcome)
            return forgotten

    def forget_tool(self, tool_id: str) -> None:
        """Drop a tool's usage (the tool left the catalog)."""
        with self._lock:
            for source, outcomes in self._tools.pop(tool_id, {}).items():
                for outcome in outcomes:
                    self._centroids.put((source, tool_id, outcome), None)

    def _recentre(self, tool: str, source: str, outcome: str) -> None:
        memory = self._tools.get(tool, {}).get(source, {}).get(outcome)
        self._centroids.put((source, tool, outcome), None if memory is None else memory.total)

    def _unit(self, vector: np.ndarray) -> np.ndarray:
        row = np.asarray(vector).reshape(-1)
        if row.shape != (self.dim,):
            raise ValueError(f"a request vector has {self.dim} dimensions, got {row.shape}")
        return unit(row)

    # ---- reads ----------------------------------------------------------------------
    def boosts(
        self,
        views: np.ndarray,
        dense: Mapping[str, float],
        spread: float,
        similarity: Callable[[Sequence[str]], Mapping[str, float]] | None = None,
    ) -> dict[str, UsageBoost]:
        """The usage of the tools near a request (``views``: its vectors, one row per
        view), for those it raises or lowers.  ``dense`` holds tools' similarity to the
        request (their best view's), ``spread`` the standard deviation of that
        similarity over the catalog; a tool usage selects that ``dense`` lacks is asked
        of ``similarity``, and left out if still unknown."""
        queries = np.atleast_2d(np.asarray(views, dtype=np.float32))
        with self._lock:
            nominated = self._centroids.nominated(queries, self._preselect)
            by_tool: dict[str, list[str]] = {}
            for source in sorted(nominated):
                for tool in nominated[source]:
                    by_tool.setdefault(tool, []).append(source)
            parts = {t: self._memories(t, sources) for t, sources in by_tool.items()}
        known = dict(dense)
        missing = sorted(t for t in parts if t not in known)
        if missing and similarity is not None:
            known.update(similarity(missing))
        out: dict[str, UsageBoost] = {}
        for tool in sorted(parts):
            if tool in known:
                boost = self._boost(parts[tool], queries, known[tool], max(spread, 1e-6))
                if boost.score != 0.0:
                    out[tool] = boost
        return out

    def _memories(
        self, tool: str, sources: Sequence[str]
    ) -> list[tuple[float, dict[str, tuple[np.ndarray, np.ndarray]]]]:
        """The cap and the kept requests per outcome (matrix, sessions) of each of the
        ``sources`` that nominated ``tool``."""
        source_cap, trusted_cap, _ = self._caps
        taught = self._tools.get(tool, {})
        return [
            (
                trusted_cap if source in self.trusted else source_cap,
                {outcome: m.matrix() for outcome, m in sorted(taught[source].items())},
            )
            for source in sources
            if source in taught
        ]

    def _boost(
        self,
        sources: list[tuple[float, dict[str, tuple[np.ndarray, np.ndarray]]]],
        queries: np.ndarray,
        dense: float,
        spread: float,
    ) -> UsageBoost:
        floor = max(dense, self._floor) + self._margin
        score = 0.0
        sessions = 0
        for cap, outcomes in sources:
            raised = 0.0
            part = 0.0
            for outcome, (matrix, counts) in outcomes.items():
                sims = (matrix @ queries.T).max(axis=1)
                best = float(sims.max())
                lift = self._gain * max(0.0, best - floor) / spread
                if outcome == OUTCOMES[0]:
                    part += lift
                    raised = float(counts[sims > floor].sum())
                else:
                    part -= lift
            part = min(cap, max(-cap, part))
            score += part
            if part > 0:
                sessions += int(raised)
        total_cap = self._caps[2]
        return UsageBoost(min(total_cap, max(-total_cap, score)), sessions)

    def tools(self) -> list[str]:
        """The tools with usage, by name."""
        with self._lock:
            return sorted(self._tools)

    def stats(self) -> dict[str, int]:
        """Tools with usage, sources, kept requests, the sessions behind them, and the
        bytes their vectors take."""
        with self._lock:
            memories = [
                m for sources in self._tools.values() for o in sources.values() for m in o.values()
            ]
            return {
                "tools": len(self._tools),
                "sources": len({s for sources in self._tools.values() for s in sources}),
                "requests": sum(len(m.entries) for m in memories),
                "sessions": sum(m.sessions() for m in memories),
                "vector_bytes": sum(len(m.entries) for m in memories) * self.dim * 4,
            }
