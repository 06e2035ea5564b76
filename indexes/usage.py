"""Usage: what finished sessions taught about which tools serve which requests.

A completed session says that its tools served its request; a session abandoned at a
deterministic failure says that the tool it failed at did not.  Each such fact is one
:class:`Evidence`: a tool, the *source* that reported it (a named token, ``gateway``,
``otlp``, ``local``), the session's key, the request's vector (embedded with the model
of the index) and the outcome.  :class:`UsageIndex` turns the evidence into a boost per
tool for a new request, which :func:`sidecar.lookup.ranking.fuse` adds to the tool's fused
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
``trusted_cap`` for a trusted source), the sum of every untrusted source's part at
``source_cap`` too, and the sum of all parts at ``total_cap``: one source alone can never
move a tool by more than its cap, whatever it reports, and any number of untrusted
sources together no more than one of them.  Each
(tool, source, outcome) keeps at most ``memory`` distinct requests, those whose hash is
smallest (a bottom-k sample: the same evidence in any order keeps the same requests),
each with the number of sessions that made it; a request seen again adds a session.
Everything the index answers is a function of the kept requests alone, so the rows a
store holds can be pruned to them (:attr:`Added.evicted`) and :meth:`UsageIndex.
from_rows` on another replica rebuilds the same index, bit for bit.

**Cost.**  A lookup asks about the candidates its other rankers found (any tools, if
it names none).  Among them, each source nominates its ``preselect`` tools whose usage
centroid (the session-weighted mean of the source's kept requests for the tool, one row
per tool, source and outcome, summed exactly as integers) comes nearest the request, at
``FLOOR`` or above, and only their kept requests are scored: the cost grows with the
candidates and the sources that taught them, never with the number of sessions.  Each
source nominates its own tools, so that none can push another's out of the lookup.

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
TOLERANCE = 1e-5
"""Similarities closer than this are equal (float32 dot products in other orders)."""


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

    def add(self, key: str, vector: np.ndarray, sessions: int = 1) -> Added:
        self._matrix = None
        found = self.entries.get(key)
        if found is not None:
            self.entries[key] = (found[0], found[1] + sessions)
            self.total += _quantized(found[0]) * sessions
            return Added(True)
        self.entries[key] = (vector, sessions)
        self.total += _quantized(vector) * sessions
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
        self._rows: _RowIndex | None = None

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
        per_source: int,
        floor: float,
        tools: Collection[str] | None = None,
    ) -> list[tuple[str, str]]:
        """(source, tool) pairs: for each source, the ``per_source`` tools whose rows of
        that source (either outcome) come nearest the request, at ``floor`` or above,
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
        sources, names = index.pair_source[pairs], index.pair_tool[pairs]
        order = np.lexsort((names, -best, sources))
        sources, names = sources[order], names[order]
        first = np.flatnonzero(np.r_[True, sources[1:] != sources[:-1]])
        rank = np.arange(len(sources)) - np.repeat(first, np.diff(np.r_[first, len(sources)]))
        chosen = rank < per_source
        return [
            (index.sources[s], index.tools[t])
            for s, t in zip(sources[chosen].tolist(), names[chosen].tolist(), strict=True)
        ]

    def _index(self) -> _RowIndex:
        if self._rows is None:
            self._rows = _RowIndex(self.keys)
        return self._rows


class _RowIndex:
    """Where each (source, tool) pair's rows are, in a centroid table's key order."""

    def __init__(self, keys: Sequence[tuple[str, str, str]]) -> None:
        self.sources = sorted({k[0] for k in keys})
        self.tools = sorted({k[1] for k in keys})
        source_at = {s: i for i, s in enumerate(self.sources)}
        tool_at = {t: i for i, t in enumerate(self.tools)}
        pair_of_row: list[int] = []
        pair_source: list[int] = []
        pair_tool: list[int] = []
        rows_of: dict[str, list[int]] = {}
        for row, (source, tool, _) in enumerate(keys):
            if not pair_of_row or keys[row - 1][:2] != (source, tool):
                pair_source.append(source_at[source])
                pair_tool.append(tool_at[tool])
            pair_of_row.append(len(pair_source) - 1)
            rows_of.setdefault(tool, []).append(row)
        self.pair_of_row = np.array(pair_of_row, dtype=np.intp)
        self.pair_source = np.array(pair_source, dtype=np.intp)
        self.pair_tool = np.array(pair_tool, dtype=np.intp)
        self.tool_rows = {t: np.array(r, dtype=np.intp) for t, r in rows_of.items()}


class UsageIndex:
    """The usage of the tools of one index, from evidence of any number of sources.

    Thread-safe: writes take a lock; a lookup reads a consistent view of the index."""

    def __init__(
        self,
        dim: int,
        *,
        trusted: Collection[str] = (),
        trusts: Callable[[str], bool] | None = None,
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
        self._trusts = trusts
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
    def add(self, evidence: Evidence, sessions: int = 1) -> Added:
        """Learn one piece of evidence, made by ``sessions`` sessions (a store keeps one
        row per request with the number of sessions that made it: adding it with its
        count is adding each session once).  Each session is to be added once per tool:
        a session added twice counts twice."""
        if sessions < 1:
            raise ValueError(f"a request is made by at least one session, got {sessions}")
        vector = self._unit(evidence.vector)
        with self._lock:
            sources = self._tools.setdefault(evidence.tool_id, {})
            outcomes = sources.setdefault(evidence.source, {})
            memory = outcomes.get(evidence.outcome)
            if memory is None:
                memory = outcomes[evidence.outcome] = _Memory(self._size, self.dim)
            added = memory.add(request_key(vector), vector, sessions)
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

    def is_trusted(self, source: str) -> bool:
        """Whether ``source`` is trusted: as ``trusts`` says when given; else named in
        ``trusted``, or under a name there that ends with ``:`` (``gateway:`` stands for
        every ``gateway:<name>``)."""
        if self._trusts is not None:
            return self._trusts(source)
        if source in self.trusted:
            return True
        return any(t.endswith(":") and source.startswith(t) for t in self.trusted)

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
        candidates: Collection[str] | None = None,
    ) -> dict[str, UsageBoost]:
        """The usage of the tools near a request (``views``: its vectors, one row per
        view), for those it raises or lowers, among ``candidates`` (``None``: every tool
        with usage).  ``dense`` holds tools' similarity to the request (their best
        view's), ``spread`` the standard deviation of that similarity over the catalog;
        a tool usage selects that ``dense`` lacks is asked of ``similarity``, and left
        out if still unknown."""
        queries = np.atleast_2d(np.asarray(views, dtype=np.float32))
        with self._lock:
            pairs = self._centroids.nominated(queries, self._preselect, self._floor, candidates)
            by_tool: dict[str, list[str]] = {}
            for source, tool in sorted(pairs):
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
    ) -> list[tuple[bool, np.ndarray, np.ndarray, np.ndarray]]:
        """For each of the ``sources`` that nominated ``tool``: whether it is trusted, and
        its kept requests of both outcomes (vectors, sessions, and which are completed)."""
        taught = self._tools.get(tool, {})
        out = []
        for source in sources:
            outcomes = taught.get(source)
            if outcomes is None:
                continue
            parts = [(o, *outcomes[o].matrix()) for o in OUTCOMES if o in outcomes]
            vectors = np.concatenate([v for _, v, _ in parts]) if len(parts) > 1 else parts[0][1]
            counts = np.concatenate([c for _, _, c in parts]) if len(parts) > 1 else parts[0][2]
            completed = np.concatenate([np.full(len(c), o == OUTCOMES[0]) for o, _, c in parts])
            out.append((self.is_trusted(source), vectors, counts, completed))
        return out

    def _boost(
        self,
        sources: list[tuple[bool, np.ndarray, np.ndarray, np.ndarray]],
        queries: np.ndarray,
        dense: float,
        spread: float,
    ) -> UsageBoost:
        floor = max(dense, self._floor) + self._margin
        score = untrusted = 0.0
        sessions = 0
        source_cap, trusted_cap, total_cap = self._caps
        for trusted, vectors, counts, completed in sources:
            sims = (vectors @ queries.T).max(axis=1)
            lifts = np.maximum(sims - floor, 0.0)
            raise_, lower = lifts[completed], lifts[~completed]
            best = (float(raise_.max()) if len(raise_) else 0.0) - (
                float(lower.max()) if len(lower) else 0.0
            )
            if abs(best) <= TOLERANCE:
                # one request both completed and abandoned: its similarities, summed in
                # other orders, may differ in the last bits; they are the same request
                best = 0.0
            cap = trusted_cap if trusted else source_cap
            part = min(cap, max(-cap, self._gain * best / spread))
            if trusted:
                score += part
            else:
                untrusted += part
            if part > 0:
                sessions += int(counts[completed & (sims > floor)].sum())
        # untrusted sources together move a tool no more than one of them may: several
        # tokens acting together are no stronger than one
        score += min(source_cap, max(-source_cap, untrusted))
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
