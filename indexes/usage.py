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

**Memory.**  The sources of a tool fall in two *pools*, the trusted and the untrusted.
Each (tool, outcome, pool) keeps at most ``memory`` distinct requests, those whose hash
is smallest among every request any source of the pool reported (a bottom-k sample of
their union: the same evidence in any order keeps the same requests), and for each kept
request the sessions each source that made it brought (:mod:`indexes.usage_sample`).  So
a tool holds at most ``4 * memory`` request vectors (int8, a scale each) however many
sources report it: another source adds a count to a kept request, never a vector.  A
source's requests are those of the sample it made; a request seen again adds a session.

**Bounds.**  One source's part, raise or penalty, is capped at ``source_cap`` (or
``trusted_cap`` for a trusted source), the sum of every untrusted source's part at
``source_cap`` too, and the sum of all parts at ``total_cap``: one source's own part is
never more than its cap, and any number of untrusted sources together never move a
tool by more than one of them may.  A sample is shared within its pool, so a source's
requests may push another source's requests of the same pool out of it (only those
whose hash is larger); an untrusted source can thus also shrink the other untrusted
sources' parts, never a trusted source's: one untrusted source moves a tool by at most
twice ``source_cap`` (its own part, and the untrusted sum it shares, which stays within
``source_cap`` of zero), whatever it reports.

**Order and replicas.**  Everything the index answers is a function of the kept
requests and their counts alone, whatever the order the evidence came in, so
:meth:`UsageIndex.from_rows` on another replica rebuilds the same index, bit for bit,
from the rows a store keeps.  A store that keeps each (tool, source, outcome)'s
``memory`` smallest request keys keeps every request the index may ever need: the
bottom-k of a union is the bottom-k of its members' bottom-k samples.

**Cost.**  A lookup asks about the candidates its other rankers found (any tools, if
it names none).  Among them, each pool nominates its ``preselect`` tools whose usage
centroid (the session-weighted mean of the pool's kept requests for the tool, one row
per tool, pool and outcome, summed exactly as integers) comes nearest the request, at
``FLOOR`` or above, and only their kept requests are scored: the cost grows with the
candidates, never with the number of sessions or sources.  Each pool nominates its own
tools, so that no untrusted source can push a trusted source's tool out of the lookup.

**Forgetting.**  :meth:`UsageIndex.forget` drops every piece of a source's evidence:
nothing it reported is counted or scored afterwards, and the requests only it made
leave the samples.  The index is then exactly what it would be had the source never
reported whenever the source's requests pushed none of its pool's others out; in every
case, :meth:`UsageIndex.from_rows` over the remaining sources' rows of a store that keeps
each source's own bottom-k (as :mod:`sidecar.storage.requests` does, rebuilding the
lookups' index after a forget) is exactly that index.

This module is pure (numpy only): it stores nothing and imports nothing of the sidecar.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from indexes.usage_centroids import UsageCentroids
from indexes.usage_sample import RequestSample

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
"""Distinct requests kept per tool, outcome and pool (the trusted or untrusted sources)."""
PRESELECT = 8
"""Tools, nearest by usage centroid, whose requests a lookup scores, per pool."""
OUTCOMES = ("completed", "abandoned")
POOLS = ("trusted", "untrusted")
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
    requests of the same tool, outcome and pool it pushed out of the sample (with every
    source's count of them)."""

    kept: bool
    evicted: tuple[str, ...] = ()


@dataclass(frozen=True)
class UsageBoost:
    """A tool's usage for one request: ``score`` is added to its fused score (in dense
    spreads; negative when abandoned sessions lower it), ``sessions`` counts the
    completed sessions whose requests raised it."""

    score: float
    sessions: int


@dataclass
class _Scored:
    """One nominated tool's (request, source) pairs: their sources, whether trusted,
    completed, their similarity to the request and their sessions."""

    sources: np.ndarray
    trusted: np.ndarray
    completed: np.ndarray
    sims: np.ndarray
    counts: np.ndarray


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
        # tool -> (pool, outcome) -> sample
        self._tools: dict[str, dict[tuple[str, str], RequestSample]] = {}
        self._centroids = UsageCentroids(dim)
        # a source's name by its number in the samples, and back
        self._names: list[str] = []
        self._numbers: dict[str, int] = {}

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
        key = bytes.fromhex(request_key(vector))
        pool = self._pool(evidence.source)
        with self._lock:
            number = self._number(evidence.source)
            samples = self._tools.setdefault(evidence.tool_id, {})
            sample = samples.get((pool, evidence.outcome))
            if sample is None:
                sample = samples[(pool, evidence.outcome)] = RequestSample(self._size, self.dim)
            kept, evicted = sample.add(key, vector, number, sessions)
            if kept:
                self._recentre(evidence.tool_id, pool, evidence.outcome)
            if not samples[(pool, evidence.outcome)]:
                self._drop(evidence.tool_id, (pool, evidence.outcome))
            return Added(kept, (evicted,) if evicted else ())

    def counted(self, evidence: Evidence) -> int:
        """The sessions of ``evidence``'s source the index holds for its request (0 when
        the request is not kept): what a row read again adds is its count beyond this."""
        key = bytes.fromhex(evidence.key)
        pool = self._pool(evidence.source)
        with self._lock:
            number = self._numbers.get(evidence.source)
            sample = self._tools.get(evidence.tool_id, {}).get((pool, evidence.outcome))
            if number is None or sample is None:
                return 0
            return sample.counted(key, number)

    def forget(self, source: str) -> int:
        """Drop everything ``source`` taught; returns the sessions forgotten (of the
        requests the index kept)."""
        pool = self._pool(source)
        with self._lock:
            number = self._numbers.get(source)
            if number is None:
                return 0
            forgotten = 0
            for tool in sorted(self._tools):
                for outcome in OUTCOMES:
                    sample = self._tools.get(tool, {}).get((pool, outcome))
                    if sample is None:
                        continue
                    dropped = sample.forget(number)
                    forgotten += dropped
                    if dropped:
                        self._recentre(tool, pool, outcome)
                    if not sample:
                        self._drop(tool, (pool, outcome))
            return forgotten

    def forget_tool(self, tool_id: str) -> None:
        """Drop a tool's usage (the tool left the catalog)."""
        with self._lock:
            for pool, outcome in self._tools.pop(tool_id, {}):
                self._centroids.put((pool, tool_id, outcome), None)

    def _drop(self, tool: str, which: tuple[str, str]) -> None:
        samples = self._tools[tool]
        del samples[which]
        self._centroids.put((which[0], tool, which[1]), None)
        if not samples:
            del self._tools[tool]

    def _recentre(self, tool: str, pool: str, outcome: str) -> None:
        sample = self._tools.get(tool, {}).get((pool, outcome))
        self._centroids.put((pool, tool, outcome), None if sample is None else sample.total())

    def _number(self, source: str) -> int:
        number = self._numbers.get(source)
        if number is None:
            number = self._numbers[source] = len(self._names)
            self._names.append(source)
        return number

    def _pool(self, source: str) -> str:
        return POOLS[0] if self.is_trusted(source) else POOLS[1]

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
            for pool, tool in sorted(pairs):
                by_tool.setdefault(tool, []).append(pool)
            parts = {t: self._scored(t, pools, queries) for t, pools in by_tool.items()}
            names = list(self._names)
        known = dict(dense)
        missing = sorted(t for t in parts if t not in known)
        if missing and similarity is not None:
            known.update(similarity(missing))
        out: dict[str, UsageBoost] = {}
        for tool in sorted(parts):
            if tool in known:
                boost = self._boost(parts[tool], names, known[tool], max(spread, 1e-6))
                if boost.score != 0.0:
                    out[tool] = boost
        return out

    def _scored(self, tool: str, pools: Sequence[str], queries: np.ndarray) -> _Scored:
        """The (request, source) pairs of the samples of ``tool`` in ``pools``, with
        their similarity to the request."""
        samples = self._tools.get(tool, {})
        found = [
            (pool == POOLS[0], outcome == OUTCOMES[0], samples[(pool, outcome)])
            for pool in pools
            for outcome in OUTCOMES
            if (pool, outcome) in samples
        ]
        sizes = [len(s.pair_sources) for _, _, s in found]
        return _Scored(
            np.concatenate([s.pair_sources for _, _, s in found]),
            np.repeat([t for t, _, _ in found], sizes).astype(bool),
            np.repeat([c for _, c, _ in found], sizes).astype(bool),
            np.concatenate([s.similarities(queries) for _, _, s in found]),
            np.concatenate([s.pair_counts for _, _, s in found]),
        )

    def _boost(
        self, scored: _Scored, names: Sequence[str], dense: float, spread: float
    ) -> UsageBoost:
        floor = max(dense, self._floor) + self._margin
        source_cap, trusted_cap, total_cap = self._caps
        sources, at = np.unique(scored.sources, return_inverse=True)
        lifts = np.maximum(scored.sims.astype(np.float64) - floor, 0.0)
        raise_, lower = np.zeros(len(sources)), np.zeros(len(sources))
        done = scored.completed
        np.maximum.at(raise_, at[done], lifts[done])
        np.maximum.at(lower, at[~done], lifts[~done])
        best = raise_ - lower
        # one request both completed and abandoned: its similarities, summed in other
        # orders, may differ in the last bits; they are the same request
        best[np.abs(best) <= TOLERANCE] = 0.0
        trusted = np.zeros(len(sources), dtype=bool)
        trusted[at] = scored.trusted
        caps = np.where(trusted, trusted_cap, source_cap)
        parts = np.clip(self._gain * best / spread, -caps, caps)
        score = untrusted = 0.0
        # summed in the sources' name order: the same bits whatever their numbers
        for i in sorted(range(len(sources)), key=lambda i: names[int(sources[i])]):
            if trusted[i]:
                score += float(parts[i])
            else:
                untrusted += float(parts[i])
        # untrusted sources together move a tool no more than one of them may: several
        # tokens acting together are no stronger than one
        score += min(source_cap, max(-source_cap, untrusted))
        raised = done & (scored.sims > floor) & (parts[at] > 0)
        sessions = int(scored.counts[raised].sum())
        return UsageBoost(min(total_cap, max(-total_cap, score)), sessions)

    def tools(self) -> list[str]:
        """The tools with usage, by name."""
        with self._lock:
            return sorted(self._tools)

    def stats(self) -> dict[str, int]:
        """Tools with usage, sources, kept requests, the sessions behind them, and the
        bytes their vectors take."""
        with self._lock:
            samples = [s for by in self._tools.values() for s in by.values()]
            requests = sum(len(s) for s in samples)
            return {
                "tools": len(self._tools),
                "sources": len(set().union(*(s.sources() for s in samples))),
                "requests": requests,
                "sessions": sum(s.sessions() for s in samples),
                "vector_bytes": sum(s.codes.nbytes + s.scales.nbytes for s in samples),
            }
