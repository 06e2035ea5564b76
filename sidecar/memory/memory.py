"""The call-level learner: from failing and succeeding calls of the same tool, across
sessions, the conditions under which a tool fails with a given signature.

Sessions arrive one at a time (:meth:`FailureMemory.add_session`).  For every step the
features of the call are computed against the steps before it, and then:

- a *failing* call (a deterministic or unknown failure; transient ones teach nothing)
  is kept as a :class:`~sidecar.memory.candidates.FailureRecord` in its group, (tool,
  normalized signature);
- a session's *succeeding* calls of a tool are folded into the tool's statistics
  (:class:`~sidecar.memory.stats.ToolStats`), once per session.

A group's conditions are derived from its records and the tool's statistics when they
are asked for after a change: each candidate predicate gets its independent support
(situations, :mod:`~sidecar.memory.independence`), its sessions and sources, its
contradictions, how likely chance explains it among the candidates tried, and whether
it still holds up with each of its situations left out (:mod:`~sidecar.memory.chance`).

**Order does not matter.**  Every count is a sum, a set or a minimum over the evidence;
the records a full group keeps and the values a full table keeps are chosen by hash,
not by arrival.  The same sessions, in any order, give the same conditions.

Bounds (:class:`LearnParams`) keep the state a function of derived features only,
never of raw outputs, and finite per tool:

- a group keeps ``max_failures_per_group`` failing calls (those of smallest hash);
- a tool keeps at most ``max_values_per_feature`` distinct values seen succeeding per
  feature (``max_bad_values`` for the remembered-value features), by hash as well;
- a feature's cardinality is counted up to ``max_categorical + 1`` distinct values;
- a group derives conditions from at most ``max_observations_per_group`` (feature,
  value) pairs of its failing calls, chosen by how many calls showed them, before any
  success is looked at.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any

from sidecar.classify import Kind
from sidecar.memory.candidates import (
    FailureRecord,
    Variation,
    message_evidence,
    named_values,
)
from sidecar.memory.conditions import (
    FailureCondition,
)
from sidecar.memory.derivation import Group, Judging, derive_conditions
from sidecar.memory.evidence import Session, Step
from sidecar.memory.families import family_for
from sidecar.memory.features import CallView, describe_call
from sidecar.memory.independence import minhash, text_fingerprint
from sidecar.memory.params import LearnParams
from sidecar.memory.predicate import token
from sidecar.memory.risk import RiskModel, RiskParams, SessionRisk, derive_risk
from sidecar.memory.signature import failure_kind, normalize_signature
from sidecar.memory.stats import (
    SessionSuccesses,
    ToolStats,
    items_of,
    source_bit,
)
from sidecar.memory.thresholds import Accepted
from sidecar.memory.trace import Trace

FORMAT = 4
"""4: the session-risk model's counts (a checkpoint of 3 lacks them: the log is
folded again)."""


def _kept(features: Mapping[str, Any], said: Mapping[str, Any]) -> dict[str, Any]:
    """A failing call's features as its record keeps them: a profiled family's only when
    the family read something in the call's message (what they are aligned with)."""
    out: dict[str, Any] = {}
    for name, value in features.items():
        family = family_for(name)
        if not family.profiled or family.name in said:
            out[name] = value
    return out


def _success(
    successes: dict[str, SessionSuccesses],
    trace: Trace,
    tool: str,
    session: str,
    features: Mapping[str, Any],
    known: bool = True,
) -> None:
    """Fold one successful call into its session's successes of its tool: the tallied
    features' values, and the profiled ones whole (``known``: the session's context is
    known; else it says nothing of what came before the call)."""
    folded = successes.get(tool)
    if folded is None:
        before = frozenset(t for t in trace.succeeded if t != tool)
        folded = successes[tool] = SessionSuccesses(
            prior=before if known else frozenset(), session=session, context=known
        )
    families = {name: family_for(name) for name in features}
    folded.add({k: v for k, v in features.items() if families[k].tallied})
    folded.profile(
        {k: v for k, v in features.items() if families[k].profiled and isinstance(v, float)}
    )


def context_free(view: CallView) -> CallView:
    """A call of a session whose context is unknown (calls nothing could tie together):
    only the features read from the call alone (the families ``context_free``), never
    what an earlier step of the session would have shown."""
    kept = {k: v for k, v in view.features.items() if family_for(k).context_free}
    return view._replace(features=kept)


class FailureMemory:
    """Learned failure conditions, per tool, from sessions added one at a time."""

    def __init__(self, params: LearnParams | None = None, risk: RiskParams | None = None) -> None:
        self.params = params or LearnParams()
        self.risk_model = RiskModel(risk)
        """The session's risk of ending abandoned, from its prefix (:meth:`risk`)."""
        self._rules = Variation(self.params.max_categorical, self.params.max_not_in)
        self._sessions = 0
        self._calls = 0
        self._groups: dict[tuple[str, str], Group] = {}
        self._failing: set[str] = set()
        """The tools of the groups."""
        self._tools: dict[str, ToolStats] = {}
        self._cardinality: dict[str, set[str]] = {}
        self._manual: list[FailureCondition] = []
        self._sources: list[str] = []
        self._cache: dict[str, list[FailureCondition]] = {}
        self._trusted: frozenset[str] = frozenset()

    def judged_by(self, trusted: frozenset[str]) -> FailureMemory:
        """Derive conditions knowing which sources are trusted: against a condition a
        trusted source stands behind, successes only untrusted sources reported are
        recorded (``ignored``), not counted.  Returns the memory itself."""
        if trusted != self._trusted:
            self._trusted = trusted
            self._cache.clear()
        return self

    # ---- intake ---------------------------------------------------------------------
    def add_session(self, session: Session, start: int = 0) -> None:
        """Learn from a session (its steps from ``start``).  Its outcome teaches the
        risk model with its first part only: a session ends once (the learner keeps
        one outcome per session, whichever part or resend carries it first)."""
        self.fold(self.derive(session, start))
        if not start:
            self.learn_outcome(self.derive_outcome(session))

    def derive_outcome(self, session: Session) -> dict[str, Any] | None:
        """What the session's outcome teaches the risk model, as JSON (the keys every
        prefix of its steps reached); ``None`` when its outcome is unknown."""
        return derive_risk(self.risk_model.params, session)

    def learn_outcome(self, derived: Mapping[str, Any] | None) -> None:
        """Take in what :meth:`derive_outcome` gave."""
        self.risk_model.fold(derived)

    def derive(self, session: Session, start: int = 0) -> dict[str, Any]:
        """What the memory keeps of a session, as JSON: its failing calls' records, its
        successes per tool, the object fields it showed (its outcome is apart:
        :meth:`derive_outcome`).  Only
        derived features; :meth:`fold` takes it in, in any order.  The steps before
        ``start`` (learned when it was sent shorter) are context, not evidence again."""
        trace = Trace(task_input=session.task_input)
        independent = self.params.independence == "situation"
        signature = minhash(session.task_input) if independent else None
        failures: list[dict[str, Any]] = []
        successes: dict[str, SessionSuccesses] = {}
        cardinality: dict[str, set[str]] = {}
        calls = 0
        for position, step in enumerate(session.steps):
            if position in session.context_only:
                trace.add(step, own=False)
                continue
            if position < start:
                trace.add(step)
                continue
            calls += 1
            view = describe_call(trace, step.tool, step.arguments, session.task_input)
            if not session.context_known:
                view = context_free(view)
            for name, value in view.features.items():
                if name.startswith(("obj:", "entry:")):
                    cardinality.setdefault(name, set()).update(token(v) for v in items_of(value))
            if step.error is None:
                _success(
                    successes, trace, step.tool, session.session_id, view.features,
                    session.context_known,
                )  # fmt: skip
            else:
                kind = failure_kind(step.error)
                if kind != "transient":
                    said = message_evidence(step.error)
                    record = FailureRecord(
                        session=session.session_id,
                        position=position,
                        features=_kept(view.features, said),
                        named=named_values(view.features, step.arguments, step.error, view.amounts),
                        said=said,
                        marks=view.marks if independent else [],
                        text=list(signature) if signature else None,
                        source=session.source,
                    )
                    failures.append(
                        {"tool": step.tool, "signature": normalize_signature(step.error),
                         "kind": kind, "record": asdict(record)}
                    )  # fmt: skip
            trace.add(step)
        return {
            "session": session.session_id,
            "source": session.source,
            "text": text_fingerprint(session.task_input) if independent else None,
            "calls": calls,
            "failures": failures,
            "successes": {t: s.to_dict() for t, s in successes.items()},
            "cardinality": {k: sorted(v) for k, v in cardinality.items()},
        }

    def fold(self, derived: Mapping[str, Any]) -> None:
        """Take in a session as :meth:`derive` gave it."""
        self._sessions += 1
        self._calls += int(derived["calls"])
        # a row logged when a session's row carried its outcome ("risk") still teaches
        # it; rows logged before the risk model have none
        self.learn_outcome(derived.get("risk"))
        cap = self.params.max_categorical + 1
        for name, tokens in derived["cardinality"].items():
            seen = self._cardinality.setdefault(name, set())
            for item in tokens:
                if len(seen) >= cap:
                    break
                seen.add(item)
        for failure in derived["failures"]:
            record = FailureRecord(**failure["record"])
            self._failure(failure["tool"], failure["signature"], failure["kind"], record)
        bit = source_bit(self._source_index(str(derived["source"])))
        for tool, raw in derived["successes"].items():
            self._stats(tool).record(
                SessionSuccesses.from_dict(raw),
                derived["text"],
                bit,
                self._cap,
            )
            self._cache.pop(tool, None)

    def add_condition(self, condition: FailureCondition) -> None:
        """A hand-written condition (kept as given; never re-derived)."""
        self._manual.append(condition)
        self._cache.pop(condition.tool, None)

    def _cap(self, feature: str) -> int:
        """How many values seen succeeding a tool's table of ``feature`` keeps."""
        if family_for(feature).remembered_values:
            return self.params.max_bad_values
        return self.params.max_values_per_feature

    def _source_index(self, source: str) -> int:
        try:
            return self._sources.index(source)
        except ValueError:
            self._sources.append(source)
            return len(self._sources) - 1

    def _stats(self, tool: str) -> ToolStats:
        found = self._tools.get(tool)
        if found is None:
            found = self._tools[tool] = ToolStats()
        return found

    def _failure(self, tool: str, signature: str, kind: Kind, record: FailureRecord) -> None:
        group = self._groups.get((tool, signature))
        if group is None:
            group = self._groups[(tool, signature)] = Group(tool, signature, kind)
            self._failing.add(tool)
        if any(r.identity == record.identity for r in group.failures):
            return  # the same call of the same session: a replay
        group.failures.append(record)
        if len(group.failures) > self.params.max_failures_per_group:
            # keep the calls of smallest hash: which ones stay does not depend on order
            group.failures.sort(key=lambda r: (zlib.crc32(r.identity.encode()), r.identity))
            del group.failures[self.params.max_failures_per_group :]
        self._cache.pop(tool, None)

    # ---- conditions -----------------------------------------------------------------
    def knows(self, tool: str) -> bool:
        """Whether any session or hand-written condition taught the memory of ``tool``."""
        return (
            tool in self._tools
            or tool in self._failing
            or any(c.tool == tool for c in self._manual)
        )

    def tools(self) -> list[str]:
        return sorted({g.tool for g in self._groups.values()} | {c.tool for c in self._manual})

    def conditions(self, tool: str | None = None) -> list[FailureCondition]:
        """The current conditions of ``tool`` (of every tool when ``None``)."""
        if tool is None:
            return [c for t in self.tools() for c in self.conditions(t)]
        found = self._cache.get(tool)
        if found is None:
            found = [c for c in self._manual if c.tool == tool]
            for key in sorted(self._groups):
                group = self._groups[key]
                if group.tool == tool and group.kind != "transient":
                    found += derive_conditions(group, self._judging(group.tool))
            self._cache[tool] = found
        return found

    def _judging(self, tool: str) -> Judging:
        return Judging(
            self._tools.get(tool) or ToolStats(),
            self._cardinality,
            self._rules,
            self.params,
            self._sources,
            self._trusted,
        )

    # ---- persistence ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "params": asdict(self.params),
            "sessions": self._sessions,
            "calls": self._calls,
            "sources": self._sources,
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
            "risk": self.risk_model.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FailureMemory:
        if data.get("format") != FORMAT:
            raise ValueError(f"unknown failure-memory format {data.get('format')!r}")
        known = {f.name for f in fields(LearnParams)}
        params = {k: v for k, v in data.get("params", {}).items() if k in known}
        memory = cls(LearnParams(**params))
        memory._sessions = int(data["sessions"])
        memory._calls = int(data["calls"])
        memory._sources = list(data["sources"])
        for raw in data["groups"]:
            group = Group(raw["tool"], raw["signature"], raw["kind"])
            group.failures = [FailureRecord(**f) for f in raw["failures"]]
            memory._groups[(group.tool, group.signature)] = group
            memory._failing.add(group.tool)
        memory._tools = {t: ToolStats.from_dict(s) for t, s in data["tools"].items()}
        memory._cardinality = {k: set(v) for k, v in data["cardinality"].items()}
        memory._manual = [FailureCondition.from_dict(c) for c in data["manual"]]
        memory.risk_model = RiskModel.from_dict(data["risk"])
        return memory

    def accepted(self, tool: str) -> Accepted:
        """The argument values ``tool`` accepted in the successes learned, for a check
        (:class:`~sidecar.memory.thresholds.Accepted`)."""
        judging = self._judging(tool)
        return Accepted(judging.stats.values, judging.trusted_mask(), self._trusted)

    # ---- session risk -----------------------------------------------------------------
    def risk(self, steps: Sequence[Step] | Trace) -> SessionRisk:
        """How likely a session with these steps so far ends abandoned, learned from the
        outcomes of the sessions reported (:mod:`~sidecar.memory.risk`)."""
        return self.risk_model.risk(steps.steps if isinstance(steps, Trace) else steps)

    # ---- introspection --------------------------------------------------------------
    def summary(self) -> dict[str, int]:
        return {
            "sessions": self._sessions,
            "calls": self._calls,
            "groups": len(self._groups),
            "failing_calls_kept": sum(len(g.failures) for g in self._groups.values()),
            "success_values_kept": sum(
                len(t) for s in self._tools.values() for t in s.values.values()
            ),
        }
