"""The call-level learner: from failing and succeeding calls of the same tool, across
sessions, the conditions under which a tool fails with a given signature.

Sessions arrive one at a time (:meth:`FailureMemory.add_session`).  For every step the
features of the call are computed against the steps before it (:func:`call_features`),
and then:

- a *failing* call (a deterministic or unknown failure; transient ones teach nothing)
  is kept as a record (session, features, the argument values its error text names) in
  its group, (tool, normalized signature);
- a *succeeding* call only updates per-tool value statistics: for each feature, each
  value seen succeeding, how many calls, in which sessions (two at most: enough to know
  whether a value was seen in a session other than a given one) and when last.

Conditions are re-derived per group from those records and statistics when they are
asked for after a change (cheap: one pass over the group's records).  Candidates are
the predicates a failing call satisfies (see :func:`_candidates`); each gets its
support (failing sessions), its contradictions (succeeding calls it matches, counted
leave-one-session-out for novelty predicates) and a confidence.

Bounds (all in :class:`LearnParams`), which keep the state a function of derived
features only, never of raw outputs:

- a group keeps its ``max_failures_per_group`` most recent failing calls;
- a tool keeps at most ``max_values_per_feature`` distinct succeeding values per feature
  (``max_bad_values`` for the remembered-value features); a value that arrives when
  the table is full is not recorded, except a value that has failed before (so that
  "failed and not succeeded since" stays exact);
- a feature's cardinality is counted up to ``max_categorical + 1`` distinct values;
- a group emits at most ``max_candidates_per_group`` conditions, chosen by support
  before any success is looked at.

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
from sidecar.memory.features import FAMILIES, FeatureValue, call_features, family_of
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
    max_candidates_per_group: int = 400
    min_confidence_kept: float = 0.3


@dataclass
class _Failure:
    session: str
    tick: int
    features: dict[str, FeatureValue]
    named: list[str] = field(default_factory=list)
    """``feature\\x1ftoken`` of the remembered values the error text names."""


@dataclass
class _Group:
    tool: str
    signature: str
    kind: Kind
    failures: list[_Failure] = field(default_factory=list)


@dataclass
class _ToolStats:
    successes: int = 0
    values: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    """feature -> token -> [calls, sessions (at most 2), last tick]"""
    failed: set[str] = field(default_factory=set)
    """``feature\\x1ftoken`` of remembered values that have failed."""


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
            features = call_features(trace, step.tool, step.arguments, session.task_input)
            self._count_cardinality(features)
            if step.error is None:
                self._success(step.tool, features, session.session_id)
            else:
                kind = failure_kind(step.error)
                if kind != "transient":
                    named = _named(features, step.arguments, step.error)
                    self._failure(step.tool, step.error, kind, features, named, session.session_id)
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

    def _success(self, tool: str, features: Mapping[str, FeatureValue], session: str) -> None:
        stats = self._tools.setdefault(tool, _ToolStats())
        stats.successes += 1
        for name, value in features.items():
            bad_value = family_of(name) == "bad_value"
            cap = self.params.max_bad_values if bad_value else self.params.max_values_per_feature
            table = stats.values.setdefault(name, {})
            items = value if isinstance(value, list) else [value]
            for key in {token(v) for v in items}:
                entry = table.get(key)
                if entry is None:
                    if len(table) >= cap and f"{name}\x1f{key}" not in stats.failed:
                        continue
                    entry = table[key] = [0, [], 0]
                entry[0] += 1
                if session not in entry[1] and len(entry[1]) < 2:
                    entry[1].append(session)
                entry[2] = self._tick
        self._cache.pop(tool, None)

    def _failure(
        self,
        tool: str,
        error: str,
        kind: Kind,
        features: dict[str, FeatureValue],
        named: list[str],
        session: str,
    ) -> None:
        signature = normalize_signature(error)
        group = self._groups.get((tool, signature))
        if group is None:
            group = self._groups[(tool, signature)] = _Group(tool, signature, kind)
        group.failures.append(_Failure(session, self._tick, features, named))
        del group.failures[: -self.params.max_failures_per_group]
        stats = self._tools.setdefault(tool, _ToolStats())
        for name, value in features.items():
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
        support: dict[tuple[str, str, str], set[str]] = {}
        predicates: dict[tuple[str, str, str], Predicate] = {}
        last_failed: dict[tuple[str, str, str], int] = {}
        named: set[str] = set()
        for record in group.failures:
            named.update(record.named)
            for name, value in record.features.items():
                for predicate in self._candidates(name, value, stats):
                    key = (predicate.feature, predicate.op, token(predicate.value))
                    predicates[key] = predicate
                    support.setdefault(key, set()).add(record.session)
                    last_failed[key] = max(last_failed.get(key, 0), record.tick)
        ranked = sorted(
            predicates,
            key=lambda k: (
                -len(support[k]),
                FAMILIES.index(family_of(k[0])),
                k,
            ),
        )[: self.params.max_candidates_per_group]
        out: list[FailureCondition] = []
        for key in ranked:
            predicate = predicates[key]
            family = family_of(predicate.feature)
            table = stats.values.get(predicate.feature, {})
            if family == "bad_value":
                entry = table.get(key[2])
                if entry is not None and entry[2] > last_failed[key]:
                    continue  # it has succeeded since it failed
                warn_only = predicate.feature != "value:*" and f"{key[0]}\x1f{key[2]}" not in named
            else:
                warn_only = False
            contradictions = _contradictions(predicate, table)
            sessions = support[key]
            conf = confidence(len(sessions), contradictions)
            if conf < self.params.min_confidence_kept:
                continue
            condition = FailureCondition(
                tool=group.tool,
                signature=group.signature,
                predicate=predicate,
                kind=group.kind,
                family=family,
                support=len(sessions),
                contradictions=contradictions,
                confidence=conf,
                warn_only=warn_only,
                sessions=tuple(sorted(sessions))[:MAX_EXAMPLE_SESSIONS],
            )
            out.append(_explained(condition))
        return out

    def _candidates(
        self, name: str, value: FeatureValue, stats: _ToolStats
    ) -> Iterable[Predicate]:
        """The predicates a failing call's feature satisfies (see the module docstring
        of :mod:`sidecar.memory.features` for the families)."""
        family = family_of(name)
        items = value if isinstance(value, list) else [value]
        if family == "bad_value":
            for item in items:
                yield Predicate(name, "==", item)
            return
        if isinstance(value, bool) or (not isinstance(value, list) and value is None):
            if name.startswith(("grounded:", "bound:")) and value is not False:
                return  # a grounded, bound value explains nothing
            yield Predicate(name, "==", value)
            return
        table = stats.values.get(name, {})
        succeeded = [json.loads(k) for k in table]
        if family == "value_shape":
            yield from self._novel(name, items, succeeded)
            return
        categorical = not name.startswith("obj:") or (
            len(self._cardinality.get(name, ())) <= self.params.max_categorical
        )
        numbers = [v for v in succeeded if _is_number(v)]
        for item in items:
            if _is_number(item):
                if numbers and item > max(numbers):
                    yield Predicate(name, ">", max(numbers))
                if numbers and item < min(numbers):
                    yield Predicate(name, "<", min(numbers))
                if isinstance(item, int) and categorical:
                    yield Predicate(name, "==", item)
            elif categorical:
                yield Predicate(name, "==", item)
        if categorical:
            yield from self._novel(name, items, succeeded)

    def _novel(self, name: str, items: list[Any], succeeded: list[Any]) -> Iterable[Predicate]:
        if not succeeded or len(succeeded) > self.params.max_not_in:
            return
        keys = {token(v) for v in succeeded}
        if any(token(item) not in keys for item in items):
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
            memory._tools[tool] = _ToolStats(raw["successes"], raw["values"], set(raw["failed"]))
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


def _contradictions(predicate: Predicate, table: Mapping[str, list[Any]]) -> int:
    """Succeeding calls the predicate matches.  Novelty and threshold predicates are
    built from the successes themselves, so they are counted leave-one-session-out: a
    success counts when its value was seen succeeding in its own session only (for a
    threshold: when it is that extreme value)."""
    if predicate.op == "==":
        entry = table.get(token(predicate.value))
        return int(entry[0]) if entry else 0
    if predicate.op == "not_in":
        return sum(int(e[0]) for e in table.values() if len(e[1]) == 1)
    entry = table.get(token(predicate.value))
    return int(entry[0]) if entry and len(entry[1]) == 1 else 0


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


def features_value(item: Any) -> Any:
    from sidecar.memory.values import canonical

    return canonical(item)


def _explained(condition: FailureCondition) -> FailureCondition:
    from dataclasses import replace

    return replace(condition, explanation=explain(condition))
