"""The call-level learner: from failing and succeeding calls of the same tool, across
sessions, the conditions under which a tool fails with a given signature.

Sessions arrive one at a time (:meth:`FailureMemory.add_session`).  For every step the
features of the call are computed against the steps before it (:func:`call_features`),
and then:

- a *failing* call (a deterministic or unknown failure; transient ones teach nothing)
  is kept as a record (session, features, the argument values its error text names) in
  its group, (tool, normalized signature);
- a *succeeding* call only updates per-tool statistics: for each feature, each value
  seen succeeding (how many calls, when last), the smallest and largest numbers, and how
  many successes came with a value never seen succeeding before them.

Conditions are re-derived per group from those records and statistics when they are
asked for after a change (cheap: one pass over the group's records).  Candidates are
the predicates a failing call satisfies (see :func:`_candidates`); each gets its
support (failing sessions, two sessions acting on one object counting once), its
contradictions (succeeding calls it matches; for novelty and threshold predicates,
counted prequentially: each success against those before it) and a confidence.

Bounds (all in :class:`LearnParams`), which keep the state a function of derived
features only, never of raw outputs:

- a group keeps its ``max_failures_per_group`` most recent failing calls;
- a tool keeps at most ``max_values_per_feature`` distinct succeeding values per feature
  (``max_bad_values`` for the remembered-value features); a value that arrives when
  the table is full is not recorded, except a value that has failed before (so that
  "failed and not succeeded since" stays exact);
- a feature's cardinality is counted up to ``max_categorical + 1`` distinct values;
- a group derives conditions from at most ``max_observations_per_group`` (feature,
  value) pairs of its failing calls, chosen by support before any success is looked at.

Adding a successful session never turns an allow into a block: a success only raises
contradiction counts, cardinalities and the sets of values seen succeeding, drops
remembered values that succeeded since they failed, or is not recorded at all (a full
table); none of these adds or strengthens a condition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sidecar.classify import Kind
from sidecar.memory.conditions import (
    MAX_EXAMPLE_SESSIONS,
    FailureCondition,
    Predicate,
    confidence,
    explain,
    token,
)
from sidecar.memory.evidence import Session
from sidecar.memory.features import FAMILIES, FeatureValue, family_of, features_and_anchors
from sidecar.memory.signature import failure_kind, normalize_signature
from sidecar.memory.trace import Trace
from sidecar.memory.values import is_id_like, key_of

FORMAT = 1


@dataclass(frozen=True)
class LearnParams:
    max_failures_per_group: int = 100
    max_values_per_feature: int = 512
    max_bad_values: int = 4096
    max_categorical: int = 12
    """A bound-object field with more distinct values than this (over every call seen)
    is an identifier or a name, not a state: no ``==`` / ``not_in`` condition on it."""
    max_not_in: int = 50
    """A novelty predicate (value never seen to succeed) needs at most this many values
    seen succeeding; beyond that the feature is too varied for novelty to mean much."""
    max_observations_per_group: int = 2000
    """Distinct (feature, value) pairs of a group's failing calls that conditions are
    derived from, the best supported first."""
    min_confidence_kept: float = 0.3


@dataclass
class _Failure:
    session: str
    tick: int
    features: dict[str, FeatureValue]
    named: list[str] = field(default_factory=list)
    """``feature\\x1ftoken`` of the remembered values the error text names."""
    anchors: dict[str, list[str]] = field(default_factory=dict)
    """For a feature read per element of a list argument: the element of each value."""


@dataclass
class _Group:
    tool: str
    signature: str
    kind: Kind
    failures: list[_Failure] = field(default_factory=list)


@dataclass
class _ToolStats:
    successes: int = 0
    values: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    """feature -> token -> [calls, last tick]"""
    failed: set[str] = field(default_factory=set)
    """``feature\\x1ftoken`` of remembered values that have failed."""
    novel: dict[str, int] = field(default_factory=dict)
    """feature -> succeeding calls whose value had not been seen succeeding before them
    (while some value had): what "never seen to succeed" would have wrongly matched."""
    extremes: dict[str, list[float]] = field(default_factory=dict)
    """feature -> [smallest, largest] number seen succeeding."""
    beyond: dict[str, list[int]] = field(default_factory=dict)
    """feature -> [calls below the smallest seen before, calls above the largest]."""


class FailureMemory:
    """Learned failure conditions, per tool, from sessions added one at a time."""

    def __init__(self, params: LearnParams | None = None) -> None:
        self.params = params or LearnParams()
        self._tick = 0
        self._sessions = 0
        self._groups: dict[tuple[str, str], _Group] = {}
        self._tools: dict[str, _ToolStats] = {}
        self._cardinality: dict[str, set[str]] = {}
        self._manual: list[FailureCondition] = []
        self._cache: dict[str, list[FailureCondition]] = {}

    # ---- intake ---------------------------------------------------------------------
    def add_session(self, session: Session) -> None:
        trace = Trace(task_input=session.task_input)
        self._sessions += 1
        for step in session.steps:
            self._tick += 1
            features, anchors = features_and_anchors(
                trace, step.tool, step.arguments, session.task_input
            )
            self._count_cardinality(features)
            if step.error is None:
                self._success(step.tool, features)
            else:
                kind = failure_kind(step.error)
                if kind != "transient":
                    record = _Failure(
                        session.session_id,
                        self._tick,
                        features,
                        _named(features, step.arguments, step.error),
                        anchors,
                    )
                    self._failure(step.tool, step.error, kind, record)
            trace.add(step)

    def add_condition(self, condition: FailureCondition) -> None:
        """A hand-written condition (kept as given; never re-derived)."""
        self._manual.append(condition)
        self._cache.pop(condition.tool, None)

    def _count_cardinality(self, features: Mapping[str, FeatureValue]) -> None:
        cap = self.params.max_categorical + 1
        for name, value in features.items():
            if not name.startswith("obj:"):
                continue
            seen = self._cardinality.setdefault(name, set())
            if len(seen) >= cap:
                continue
            for item in value if isinstance(value, list) else [value]:
                seen.add(token(item))

    def _success(self, tool: str, features: Mapping[str, FeatureValue]) -> None:
        stats = self._tools.setdefault(tool, _ToolStats())
        stats.successes += 1
        for name, value in features.items():
            bad_value = family_of(name) == "bad_value"
            cap = self.params.max_bad_values if bad_value else self.params.max_values_per_feature
            table = stats.values.setdefault(name, {})
            items = value if isinstance(value, list) else [value]
            keys = {token(v) for v in items}
            if not bad_value:
                if table and any(k not in table for k in keys):
                    stats.novel[name] = stats.novel.get(name, 0) + 1
                _extremes(stats, name, items)
            for key in keys:
                entry = table.get(key)
                if entry is None:
                    if len(table) >= cap and f"{name}\x1f{key}" not in stats.failed:
                        continue
                    entry = table[key] = [0, 0]
                entry[0] += 1
                entry[1] = self._tick
        self._cache.pop(tool, None)

    def _failure(self, tool: str, error: str, kind: Kind, record: _Failure) -> None:
        signature = normalize_signature(error)
        group = self._groups.get((tool, signature))
        if group is None:
            group = self._groups[(tool, signature)] = _Group(tool, signature, kind)
        group.failures.append(record)
        del group.failures[: -self.params.max_failures_per_group]
        stats = self._tools.setdefault(tool, _ToolStats())
        for name, value in record.features.items():
            if family_of(name) == "bad_value":
                for item in value if isinstance(value, list) else [value]:
                    stats.failed.add(f"{name}\x1f{token(item)}")
        self._cache.pop(tool, None)

    # ---- conditions -----------------------------------------------------------------
    def tools(self) -> list[str]:
        return sorted({g.tool for g in self._groups.values()} | {c.tool for c in self._manual})

    def conditions(self, tool: str | None = None) -> list[FailureCondition]:
        """The current conditions of ``tool`` (of every tool when ``None``)."""
        if tool is None:
            return [c for t in self.tools() for c in self.conditions(t)]
        found = self._cache.get(tool)
        if found is None:
            found = [c for c in self._manual if c.tool == tool]
            for group in self._groups.values():
                if group.tool == tool and group.kind != "transient":
                    found += self._learn(group)
            self._cache[tool] = found
        return found

    def _learn(self, group: _Group) -> list[FailureCondition]:
        stats = self._tools.get(group.tool) or _ToolStats()
        named: set[str] = set()
        # what the failing calls showed: (feature, value) -> the value, its sessions, its
        # anchors, its last failure; kept to the best-supported ones *before* any success
        # is looked at, so that the cap cannot let a success promote a condition
        seen: dict[tuple[str, str], _Observed] = {}
        for record in group.failures:
            named.update(record.named)
            for name, value in record.features.items():
                items = value if isinstance(value, list) else [value]
                for i, item in enumerate(items):
                    obs = seen.get((name, token(item)))
                    if obs is None:
                        obs = seen[(name, token(item))] = _Observed(item)
                    obs.add(record.session, _anchor(record, name, i), record.tick)
        kept = sorted(
            seen,
            key=lambda k: (-seen[k].support(), FAMILIES.index(family_of(k[0])), k),
        )[: self.params.max_observations_per_group]
        evidence: dict[tuple[str, str, str], tuple[Predicate, _Observed]] = {}
        for name, item_key in kept:
            obs = seen[(name, item_key)]
            for predicate in self._candidates(name, obs.value, stats):
                key = (predicate.feature, predicate.op, token(predicate.value))
                if key in evidence:
                    evidence[key][1].merge(obs)
                else:
                    evidence[key] = (predicate, obs.copy())
        out: list[FailureCondition] = []
        for key, (predicate, obs) in evidence.items():
            support = obs.support()
            family = family_of(predicate.feature)
            table = stats.values.get(predicate.feature, {})
            if family == "bad_value":
                entry = table.get(key[2])
                if entry is not None and entry[1] > obs.last_tick:
                    continue  # it has succeeded since it failed
                warn_only = predicate.feature != "value:*" and f"{key[0]}\x1f{key[2]}" not in named
            else:
                warn_only = False
            contradictions = _contradictions(predicate, table, stats)
            conf = confidence(support, contradictions)
            if conf < self.params.min_confidence_kept:
                continue
            condition = FailureCondition(
                tool=group.tool,
                signature=group.signature,
                predicate=predicate,
                kind=group.kind,
                family=family,
                support=support,
                contradictions=contradictions,
                confidence=conf,
                warn_only=warn_only,
                sessions=tuple(sorted(obs.sessions))[:MAX_EXAMPLE_SESSIONS],
            )
            out.append(_explained(condition))
        return out

    def _candidates(self, name: str, item: Any, stats: _ToolStats) -> Iterable[Predicate]:
        """The predicates one value of a failing call's feature satisfies (see
        :mod:`sidecar.memory.features` for the families)."""
        family = family_of(name)
        if family == "bad_value":
            yield Predicate(name, "==", item)
            return
        if isinstance(item, bool) or item is None:
            if name.startswith(("grounded:", "bound:")) and item is not False:
                return  # a grounded, bound value explains nothing
            yield Predicate(name, "==", item)
            return
        table = stats.values.get(name, {})
        succeeded = [json.loads(k) for k in table]
        if family == "value_shape":
            yield from self._novel(name, item, succeeded)
            return
        categorical = not name.startswith("obj:") or (
            len(self._cardinality.get(name, ())) <= self.params.max_categorical
        )
        if _is_number(item):
            low, high = stats.extremes.get(name, (None, None))
            if high is not None and item > high:
                yield Predicate(name, ">", high)
            if low is not None and item < low:
                yield Predicate(name, "<", low)
            if not isinstance(item, int) or not categorical:
                return  # a measured quantity: thresholds only
        elif not categorical:
            return
        yield Predicate(name, "==", item)
        yield from self._novel(name, item, succeeded)

    def _novel(self, name: str, item: Any, succeeded: list[Any]) -> Iterable[Predicate]:
        if not succeeded or len(succeeded) > self.params.max_not_in:
            return
        if token(item) not in {token(v) for v in succeeded}:
            yield Predicate(name, "not_in", tuple(sorted(succeeded, key=token)))

    # ---- persistence ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "params": asdict(self.params),
            "tick": self._tick,
            "sessions": self._sessions,
            "groups": [
                {
                    "tool": g.tool,
                    "signature": g.signature,
                    "kind": g.kind,
                    "failures": [asdict(f) for f in g.failures],
                }
                for g in self._groups.values()
            ],
            "tools": {
                tool: {
                    "successes": s.successes,
                    "values": s.values,
                    "failed": sorted(s.failed),
                    "novel": s.novel,
                    "extremes": s.extremes,
                    "beyond": s.beyond,
                }
                for tool, s in self._tools.items()
            },
            "cardinality": {k: sorted(v) for k, v in self._cardinality.items()},
            "manual": [c.to_dict() for c in self._manual],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FailureMemory:
        if data.get("format") != FORMAT:
            raise ValueError(f"unknown failure-memory format {data.get('format')!r}")
        memory = cls(LearnParams(**data.get("params", {})))
        memory._tick = int(data["tick"])
        memory._sessions = int(data["sessions"])
        for raw in data["groups"]:
            group = _Group(raw["tool"], raw["signature"], raw["kind"])
            group.failures = [_Failure(**f) for f in raw["failures"]]
            memory._groups[(group.tool, group.signature)] = group
        for tool, raw in data["tools"].items():
            memory._tools[tool] = _ToolStats(
                raw["successes"],
                raw["values"],
                set(raw["failed"]),
                raw["novel"],
                raw["extremes"],
                raw["beyond"],
            )
        memory._cardinality = {k: set(v) for k, v in data["cardinality"].items()}
        memory._manual = [FailureCondition.from_dict(c) for c in data["manual"]]
        return memory

    # ---- introspection --------------------------------------------------------------
    def summary(self) -> dict[str, int]:
        return {
            "sessions": self._sessions,
            "calls": self._tick,
            "groups": len(self._groups),
            "failing_calls_kept": sum(len(g.failures) for g in self._groups.values()),
            "success_values_kept": sum(
                len(t) for s in self._tools.values() for t in s.values.values()
            ),
        }


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _contradictions(predicate: Predicate, table: Mapping[str, list[int]], stats: _ToolStats) -> int:
    """Succeeding calls the predicate matches.  A novelty predicate ("never seen to
    succeed") or a threshold ("beyond anything seen to succeed") is built from the
    successes themselves and matches none of them by construction; it is counted
    prequentially instead: each success against the successes before it, i.e. how often
    the predicate, had it been in force, would have stopped a call that then succeeded.
    These counts only ever grow."""
    if predicate.op == "==":
        entry = table.get(token(predicate.value))
        return int(entry[0]) if entry else 0
    if predicate.op == "not_in":
        return stats.novel.get(predicate.feature, 0)
    below, above = stats.beyond.get(predicate.feature, (0, 0))
    return above if predicate.op == ">" else below


def _extremes(stats: _ToolStats, name: str, items: list[Any]) -> None:
    numbers = [float(v) for v in items if _is_number(v)]
    if not numbers:
        return
    low, high = min(numbers), max(numbers)
    bounds = stats.extremes.get(name)
    if bounds is None:
        stats.extremes[name] = [low, high]
        return
    counts = stats.beyond.setdefault(name, [0, 0])
    if low < bounds[0]:
        counts[0] += 1
        bounds[0] = low
    if high > bounds[1]:
        counts[1] += 1
        bounds[1] = high


@dataclass
class _Observed:
    """One value of one feature across a group's failing calls."""

    value: Any
    sessions: set[str] = field(default_factory=set)
    anchors: set[str] = field(default_factory=set)
    last_tick: int = 0

    def add(self, session: str, anchor: str, tick: int) -> None:
        self.sessions.add(session)
        self.anchors.add(anchor)
        self.last_tick = max(self.last_tick, tick)

    def merge(self, other: _Observed) -> None:
        self.sessions |= other.sessions
        self.anchors |= other.anchors
        self.last_tick = max(self.last_tick, other.last_tick)

    def copy(self) -> _Observed:
        return _Observed(self.value, set(self.sessions), set(self.anchors), self.last_tick)

    def support(self) -> int:
        """Distinct failing sessions, counting sessions that show the same object once."""
        return min(len(self.sessions), len(self.anchors))


def _named(features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str) -> list[str]:
    """The remembered-value features whose value the error text names ("New item
    1434748144 not found"): the failure is about that value."""
    out: list[str] = []
    for name, raw in arguments.items():
        items = raw if isinstance(raw, list | tuple) else [raw]
        ids = [v for v in items if is_id_like(v)]
        hits = [v for v in ids if (key_of(v) or "") in error]
        for item in hits:
            out.append(f"elem:{name}\x1f{token(features_value(item))}")
        if ids and len(hits) == len(ids) and f"value:{name}" in features:
            out.append(f"value:{name}\x1f{token(features[f'value:{name}'])}")
    return out


def _anchor(record: _Failure, feature: str, index: int) -> str:
    """What makes two failures independent evidence for a predicate on ``feature``: a
    remembered value is evidence per session; a feature of one argument, per distinct
    value (or list element) of that argument, so that two sessions acting on the same
    object count once; a feature of several arguments, per distinct argument set."""
    prefix, _, rest = feature.partition(":")
    if prefix in ("value", "elem"):
        return record.session
    listed = record.anchors.get(feature)
    if listed is not None and index < len(listed):
        return listed[index]
    if prefix in ("grounded", "shape", "bound", "obj", "len"):
        argument = rest.split(".", 1)[0]
        own = record.features.get(f"value:{argument}")
        if own is not None:
            return token(own)
    return token(record.features.get("value:*"))


def features_value(item: Any) -> Any:
    from sidecar.memory.values import canonical

    return canonical(item)


def _explained(condition: FailureCondition) -> FailureCondition:
    from dataclasses import replace

    return replace(condition, explanation=explain(condition))
