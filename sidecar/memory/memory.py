"""The call-level learner: from failing and succeeding calls of the same tool, across
sessions, the conditions under which a tool fails with a given signature.

Sessions arrive one at a time (:meth:`FailureMemory.add_session`).  For every step the
features of the call are computed against the steps before it, and then:

- a *failing* call (a deterministic or unknown failure; transient ones teach nothing)
  is kept as a :class:`~sidecar.memory.candidates.FailureRecord` in its group, (tool,
  normalized signature);
- a *succeeding* call only updates the tool's statistics
  (:class:`~sidecar.memory.stats.ToolStats`).

A group's conditions are re-derived from its records and the tool's statistics when
they are asked for after a change (one pass over the group's records): each candidate
predicate (:func:`~sidecar.memory.candidates.candidates`) gets its support, its
contradictions and a confidence; those under ``min_confidence_kept`` are dropped.

Bounds (:class:`LearnParams`) keep the state a function of derived features only,
never of raw outputs, and finite per tool:

- a group keeps its ``max_failures_per_group`` most recent failing calls;
- a tool keeps at most ``max_values_per_feature`` distinct values seen succeeding per
  feature (``max_bad_values`` for the remembered-value features; a value that has failed
  is always recorded when it succeeds);
- a feature's cardinality is counted up to ``max_categorical + 1`` distinct values;
- a group derives conditions from at most ``max_observations_per_group`` (feature,
  value) pairs of its failing calls, chosen by support before any success is looked at.

Adding a successful session (after the others) never makes a verdict more severe: a
success only raises contradiction counts, cardinalities and the sets of values seen
succeeding, forgets remembered values that succeed after failing, or is not recorded at
all (a full table); and failures before a feature first succeeded are no evidence for a
"never seen to succeed" predicate, so the first success of a feature creates none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sidecar.classify import Kind
from sidecar.memory.candidates import (
    Evidence,
    FailureRecord,
    Rules,
    candidates,
    named_values,
    observe,
)
from sidecar.memory.conditions import (
    MAX_EXAMPLE_SESSIONS,
    FailureCondition,
    Predicate,
    confidence,
    explain,
    token,
)
from sidecar.memory.evidence import Session
from sidecar.memory.features import FeatureValue, family_of, features_and_anchors
from sidecar.memory.signature import failure_kind, normalize_signature
from sidecar.memory.stats import ToolStats, items_of
from sidecar.memory.trace import Trace

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
    min_confidence_kept: float = 0.3
    count_objects_once: bool = True
    """Sessions that show the same object (the same invoice, the same account) are one piece
    of evidence for a condition about it; ``False`` counts every session."""


@dataclass
class _Group:
    tool: str
    signature: str
    kind: Kind
    failures: list[FailureRecord] = field(default_factory=list)


class FailureMemory:
    """Learned failure conditions, per tool, from sessions added one at a time."""

    def __init__(self, params: LearnParams | None = None) -> None:
        self.params = params or LearnParams()
        self._rules = Rules(self.params.max_categorical, self.params.max_not_in)
        self._tick = 0
        self._sessions = 0
        self._groups: dict[tuple[str, str], _Group] = {}
        self._tools: dict[str, ToolStats] = {}
        self._cardinality: dict[str, set[str]] = {}
        self._manual: list[FailureCondition] = []
        self._cache: dict[str, list[FailureCondition]] = {}

    # ---- intake ---------------------------------------------------------------------
    def add_session(self, session: Session, start: int = 0) -> None:
        """Learn ``session``'s steps from ``start`` on; the steps before it (learned when
        the session was sent shorter) are its context, not evidence again."""
        trace = Trace(task_input=session.task_input)
        self._sessions += start == 0
        for i, step in enumerate(session.steps):
            if i < start:
                trace.add(step)
                continue
            self._tick += 1
            features, anchors = features_and_anchors(
                trace, step.tool, step.arguments, session.task_input
            )
            self._count_cardinality(features)
            if step.error is None:
                self._stats(step.tool).record_success(
                    features,
                    self._tick,
                    self.params.max_values_per_feature,
                    self.params.max_bad_values,
                )
                self._cache.pop(step.tool, None)
            else:
                kind = failure_kind(step.error)
                if kind != "transient":
                    named = named_values(features, step.arguments, step.error)
                    record = FailureRecord(session.session_id, self._tick, features, named, anchors)
                    self._failure(step.tool, step.error, kind, record)
            trace.add(step)

    def add_condition(self, condition: FailureCondition) -> None:
        """A hand-written condition (kept as given; never re-derived)."""
        self._manual.append(condition)
        self._cache.pop(condition.tool, None)

    def _stats(self, tool: str) -> ToolStats:
        found = self._tools.get(tool)
        if found is None:
            found = self._tools[tool] = ToolStats()
        return found

    def _count_cardinality(self, features: Mapping[str, FeatureValue]) -> None:
        cap = self.params.max_categorical + 1
        for name, value in features.items():
            if name.startswith("obj:"):
                seen = self._cardinality.setdefault(name, set())
                for item in items_of(value):
                    if len(seen) >= cap:
                        break
                    seen.add(token(item))

    def _failure(self, tool: str, error: str, kind: Kind, record: FailureRecord) -> None:
        signature = normalize_signature(error)
        group = self._groups.get((tool, signature))
        if group is None:
            group = self._groups[(tool, signature)] = _Group(tool, signature, kind)
        group.failures.append(record)
        del group.failures[: -self.params.max_failures_per_group]
        self._stats(tool).record_failure(record.features)
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
        stats = self._tools.get(group.tool) or ToolStats()
        named = {n for record in group.failures for n in record.named}
        evidence: dict[tuple[str, str, str], tuple[Predicate, Evidence]] = {}
        limit = self.params.max_observations_per_group
        for name, seen in observe(group.failures, limit, self.params.count_objects_once):
            for predicate in candidates(name, seen.value, stats, self._cardinality, self._rules):
                part: Evidence | None = seen
                if predicate.op != "==":
                    # novelty: only failures after the feature first succeeded count
                    part = seen.after(stats.since.get(name, self._tick + 1))
                if part is None:
                    continue
                key = (predicate.feature, str(predicate.op), token(predicate.value))
                if key in evidence:
                    evidence[key][1].events.extend(part.events)
                else:
                    evidence[key] = (predicate, Evidence(part.value, list(part.events)))
        out: list[FailureCondition] = []
        for predicate, seen in evidence.values():
            condition = self._condition(group, predicate, seen, stats, named)
            if condition is not None:
                out.append(condition)
        return out

    def _condition(
        self,
        group: _Group,
        predicate: Predicate,
        seen: Evidence,
        stats: ToolStats,
        named: set[str],
    ) -> FailureCondition | None:
        family = family_of(predicate.feature)
        warn_only = False
        if family == "bad_value":
            if stats.succeeded_after(predicate.feature, predicate.value, seen.last_tick):
                return None  # it has succeeded since it failed
            # a value is the cause only when it is the whole call or the error names it
            tagged = f"{predicate.feature}\x1f{token(predicate.value)}"
            warn_only = predicate.feature != "value:*" and tagged not in named
        support = seen.support()
        contradictions = stats.contradictions(predicate)
        conf = confidence(support, contradictions)
        if conf < self.params.min_confidence_kept:
            return None
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
            sessions=tuple(sorted(seen.sessions))[:MAX_EXAMPLE_SESSIONS],
        )
        return replace(condition, explanation=explain(condition))

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
            "tools": {tool: s.to_dict() for tool, s in self._tools.items()},
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
            group.failures = [FailureRecord(**f) for f in raw["failures"]]
            memory._groups[(group.tool, group.signature)] = group
        memory._tools = {t: ToolStats.from_dict(s) for t, s in data["tools"].items()}
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
