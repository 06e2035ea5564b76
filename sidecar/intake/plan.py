"""Intake, step 2: from parsed reports to a plan of what the batch will change.

Every report is checked, redacted and classified before anything is written: the plan
holds the sessions to learn from, the chains to archive (:class:`Archival`), the
counters to apply and, per report, its answer or what its steps did.  No store is
written; the stores are read only for what the batch needs to know (sessions that met a
failure before, chains archived before, what counts as a replay).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cold_store import make_pointer
from sidecar.archive.chains import CallEvidence, chain_id
from sidecar.classify import Classification, classify
from sidecar.errors import InvalidInput
from sidecar.intake.counters import Counters
from sidecar.intake.parse import parse_any, validate_abandoned
from sidecar.intake.sessions import (
    StepPolicy,
    call_chain_id,
    redacted_ids,
    redacted_report,
    session_key,
    usage_key,
)
from sidecar.memory import FailureCondition, Session, Step, normalize_signature
from sidecar.model import ChainReport, ConstraintSpec, Failure, IntakeResult, StepReport
from sidecar.rules import Rules
from sidecar.storage.state import State
from sidecar.storage.uses import Usage
from sidecar.trust.redact import redact_text

ROW_BYTES = 96
"""What one counter row (a sighting, a success, a session's usage) costs the state, about:
its keys and its index entries."""
Failing = tuple[tuple[str, ...], str]
"""A failure as sightings count it: (topology, signature)."""
_Against = Callable[[Sequence[str], Iterable[int]], tuple[str, ...]]
"""The fatal sequences a session's successes contradict (see
:meth:`~sidecar.rules.sequences.FatalIndex.contradictions`)."""


@dataclass(frozen=True)
class Archival:
    """A chain the batch archives: an abandoned chain report's, or a failing call's."""

    position: int
    """The report it comes from, by position in the batch."""
    report: ChainReport
    """Redacted; for a failing call, the chain it ends."""
    chain_id: str
    rule: int
    """The row of the classification table that decided it is deterministic."""
    why: str
    """Why: the classifier's reason, or how many sessions reproduced it."""
    sessions: int
    calls: CallEvidence | None = None

    @property
    def classification(self) -> str:
        return f"rule {self.rule}: {self.why}"


@dataclass(frozen=True)
class Ask:
    """A finished session's request and what it says of the tools (usage for lookups):
    ``served`` completed it; the session was abandoned at ``failed`` (a deterministic
    failure)."""

    session: str
    text: str
    served: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


@dataclass
class Plan:
    """What a batch will change once it is accepted whole."""

    results: list[IntakeResult | None]
    source: str
    counters: Counters = field(default_factory=Counters)
    archive: list[Archival] = field(default_factory=list)
    sessions: list[Session] = field(default_factory=list)
    manual: list[FailureCondition] = field(default_factory=list)
    usage_keys: set[str] = field(default_factory=set)
    """Every usage key of ``counters.usage``."""
    fresh_runs: Counter[tuple[str, ...]] = field(default_factory=Counter)
    """Per topology, how many of the batch's first-time successes ran it."""
    summaries: dict[int, list[str]] = field(default_factory=dict)
    """Per report position, what its steps did (a step report's answer)."""
    sightings: dict[Failing, set[str]] = field(default_factory=dict)
    """The sessions that met each failure, the batch's own included."""
    archived_now: set[str] = field(default_factory=set)
    stored: set[str] = field(default_factory=set)
    """Chains of the batch's abandoned reports that the archive holds already."""
    replayed: dict[int, str] = field(default_factory=dict)
    """Per session report position, the last chain of its failing calls that the state
    holds already (the report was sent before): its answer names it."""
    asks: list[Ask] = field(default_factory=list)
    """The finished sessions with a request (``task_input``), for usage."""
    uncataloged: frozenset[str] = frozenset()
    """Tools in no catalog that the batch's source may not teach of (an untrusted one's):
    a session's steps on them are context only, a chain naming them is rejected."""
    evidence_bytes: int = 0
    """Bytes of evidence the batch stores for its source, but for what the call memory's
    log and the usage rows take in (counted as they are written)."""


@dataclass(frozen=True)
class AbandonedChain:
    """An abandoned chain report, parsed, checked and redacted."""

    report: ChainReport
    chain_id: str

    @property
    def signature(self) -> str:
        assert self.report.failure is not None
        return self.report.failure.signature


Parsed = AbandonedChain | ChainReport | StepReport | InvalidInput


def parsed(raw: ChainReport | StepReport | Mapping[str, Any]) -> Parsed:
    """A report checked and, for an abandoned chain, redacted; or why it is rejected.
    No store is read."""
    try:
        report = raw if isinstance(raw, ChainReport | StepReport) else parse_any(raw)
        if isinstance(report, StepReport) or report.outcome == "completed":
            return report
        validate_abandoned(report)
    except InvalidInput as exc:
        return exc
    redacted = redacted_report(report)
    return AbandonedChain(redacted, chain_id(redacted))


class Planner:
    def __init__(
        self,
        state: State,
        rules: Rules,
        reproduce_threshold: int,
        steps: StepPolicy,
    ) -> None:
        self._state = state
        self._rules = rules
        self._threshold = reproduce_threshold
        self._steps = steps

    def plan(
        self,
        reports: Sequence[ChainReport | StepReport | Mapping[str, Any]],
        source: str,
        operator: bool,
        uncataloged: frozenset[str] = frozenset(),
    ) -> Plan:
        """``uncataloged``: tools in no catalog that ``source`` may not teach of."""
        plan = Plan([None] * len(reports), source, uncataloged=uncataloged)
        items = [parsed(raw) for raw in reports]
        # what the batch's abandoned chains need from the stores, in two reads
        chains = [p for p in items if isinstance(p, AbandonedChain)]
        plan.sightings = self._state.sightings.sessions_of(
            (c.report.topology, c.signature) for c in chains
        )
        # an archived chain is a compiled rule: the state says so, in one read
        plan.stored = self._state.sequences.known(c.chain_id for c in chains)
        fatal = self._rules.sequences.fatal()
        for i, item in enumerate(items):
            refusal = conditions_refused(item, operator)
            if refusal is not None:
                plan.results[i] = IntakeResult("rejected", reason=refusal)
            elif isinstance(item, InvalidInput):
                plan.results[i] = IntakeResult("rejected", reason=str(item))
            elif uncataloged & set(_topology(item)):
                plan.results[i] = IntakeResult(
                    "rejected", reason=_uncataloged(uncataloged & set(_topology(item)))
                )
            elif isinstance(item, StepReport):
                self._steps_report(i, item, plan, fatal.contradictions)
            elif isinstance(item, AbandonedChain):
                assert item.report.constraint is not None
                plan.manual += item.report.constraint.conditions
                self._abandoned(i, item, plan)
            else:
                plan.results[i] = self._completed(item, plan, fatal.contradictions)
        return plan

    # ---- successes ---------------------------------------------------------------------
    def _completed(self, report: ChainReport, plan: Plan, against: _Against) -> IntakeResult:
        topology = report.topology
        who = session_key(redacted_ids(report), plan.source)
        key = usage_key("chain", who, topology)
        usage = Usage(key, topology, against(topology, range(len(topology))), who)
        fresh = self._count_usage(plan, usage)
        if fresh:
            plan.evidence_bytes += ROW_BYTES + _size(list(topology))
        runs = self._state.uses.completed_runs(topology) + plan.fresh_runs[tuple(topology)]
        if not fresh:
            return IntakeResult(
                "recorded", reason=f"completed chain already recorded (a replay; {runs} run(s))"
            )
        return IntakeResult(
            "recorded", reason=f"completed chain recorded as usage evidence ({runs} run(s))"
        )

    def _count_usage(self, plan: Plan, usage: Usage) -> bool:
        """Add a session's success to the batch; returns whether it is counted for the
        first time (the state counts it once, whatever this answer)."""
        # sets, not a scan of the batch's usage: a batch holds thousands of completions
        fresh = usage.key not in plan.usage_keys and not self._state.uses.seen(usage.key)
        plan.counters.usage.append(usage)
        plan.usage_keys.add(usage.key)
        if fresh and usage.topology is not None:
            plan.fresh_runs[usage.topology] += 1
        return fresh

    # ---- sessions reported as steps ------------------------------------------------------
    def _steps_report(self, i: int, report: StepReport, plan: Plan, against: _Against) -> None:
        steps = self._steps.stored(report)
        context = frozenset(j for j, s in enumerate(steps) if s.tool in plan.uncataloged)
        if len(context) == len(steps):
            plan.summaries[i] = [_context_only(len(steps), whole=True)]
            return
        task_input = redact_text(report.task_input) if report.task_input else None
        who = session_key(redacted_ids(report), plan.source)
        plan.sessions.append(
            Session(
                who, steps, report.outcome, task_input, plan.source,
                context_known=report.context_known, context_only=context,
            )
        )  # fmt: skip
        plan.manual += report.conditions
        tools = [s.tool for s in steps]
        ok = [j for j, s in enumerate(steps) if s.error is None]
        taught = [j for j in ok if j not in context]
        # a completed session is a completed chain of its tools; and a call that returned
        # without error is usage evidence whatever the session's outcome (a tool that
        # succeeds is never evicted for the dead ends of the sessions it served)
        used = (
            tuple(dict.fromkeys(tools[j] for j in taught))
            if taught and report.outcome == "completed"
            else None
        )
        succeeded = list(dict.fromkeys(tools[j] for j in taught))
        plan.counters.succeeded += [(t, who) for t in succeeded]
        usage = Usage(usage_key("steps", who), used, against(tools, ok), who)
        if self._count_usage(plan, usage):
            # the session itself is counted as the memory's log takes it in (its derived
            # features); its steps are kept whole only in the records of failing calls
            plan.evidence_bytes += ROW_BYTES * (2 + len(succeeded))
        if task_input and report.outcome != "unknown":
            own = [s for j, s in enumerate(steps) if j not in context]
            plan.asks.append(_ask(who, task_input, own, report.outcome == "completed"))
        notes = [f"{len(taught)} successful call(s) learned from"]
        if context:
            notes.append(_context_only(len(context), whole=False))
        for j, step in enumerate(steps):
            if step.error is not None and j not in context:
                notes.append(self._failing_call(i, j, steps, who, task_input, plan))
        plan.summaries[i] = notes

    def _failing_call(
        self,
        i: int,
        j: int,
        steps: tuple[Step, ...],
        who: str,
        task_input: str | None,
        plan: Plan,
    ) -> str:
        step = steps[j]
        assert step.error is not None
        verdict = classify(step.error)
        where = f"step {j} ({step.tool})"
        if verdict.kind == "transient":
            return f"{where}: transient, not archived ({verdict.reason})"
        normalized = normalize_signature(step.error)
        seen, _ = self._sight(plan, (step.tool,), normalized, who)
        cid = call_chain_id(who, j, step.tool, step.error)
        plan.counters.chain_sessions.append((cid, who))
        if cid in plan.archived_now or self._state.sequences.known([cid]):
            # the chain is the session's own (its key is in the id): only a replay meets it
            plan.replayed[i] = cid
            return f"{where}: already archived (replayed report) as {make_pointer('chains', cid)}"
        if verdict.kind == "unknown" and seen < self._threshold:
            return (
                f"{where}: unknown failure kind ({verdict.reason}); seen in {seen} of the "
                f"{self._threshold} sessions that make it reproduced"
            )
        chain = ChainReport(
            topology=tuple(s.tool for s in steps[: j + 1]),
            outcome="abandoned",
            failure=Failure(step.error, verdict.kind if verdict.kind != "unknown" else None),
            constraint=ConstraintSpec(f"{step.tool} fails with '{normalized}'"),
            session_id=plan.sessions[-1].session_id,
        )
        stored = [
            s.to_dict() if self._steps.keep_outputs else {**s.to_dict(), "output": None}
            for s in steps[: j + 1]
        ]
        calls = CallEvidence(normalized, stored, task_input)
        why = "deterministic" if verdict.kind == "deterministic" else f"reproduced in {seen}"
        plan.archive.append(Archival(i, chain, cid, verdict.rule, why, seen, calls))
        plan.archived_now.add(cid)
        plan.evidence_bytes += 2 * ROW_BYTES + _size(stored, chain.topology)
        return f"{where}: archived {make_pointer('chains', cid)} ({verdict.reason})"

    # ---- abandoned chains --------------------------------------------------------------------
    def _abandoned(self, i: int, chain: AbandonedChain, plan: Plan) -> None:
        report = chain.report
        assert report.failure is not None and report.constraint is not None
        verdict = classify(report.failure.signature, report.failure.kind, report.failure.error)
        if verdict.kind == "transient":
            plan.results[i] = IntakeResult(
                "not_archived",
                reason=f"transient failure, not archived; the tools stay active ({verdict.reason})",
            )
            return
        who = session_key(report, plan.source)
        seen, fresh = self._sight(plan, report.topology, report.failure.signature, who)
        cid = chain.chain_id
        plan.counters.chain_sessions.append((cid, who))
        if cid in plan.archived_now or cid in plan.stored:
            pointer = make_pointer("chains", cid)
            # another session meeting the archived failure is a new sighting, counted as
            # such: only the same session again is a replay
            why = (
                f"already archived as {pointer}; this session counted: {_sessions(seen)} so far"
                if fresh
                else "already archived (replayed report)"
            )
            plan.results[i] = IntakeResult("archived", cid, pointer, why)
            return
        if verdict.kind == "unknown" and seen < self._threshold:
            plan.results[i] = IntakeResult(
                "not_archived",
                reason=f"unknown failure kind ({verdict.reason}); seen in {seen} of the "
                f"{self._threshold} sessions that make it reproduced",
            )
            return
        plan.archive.append(Archival(i, report, cid, verdict.rule, _why(verdict, seen), seen))
        plan.archived_now.add(cid)
        plan.evidence_bytes += 2 * ROW_BYTES + _size(
            report.topology, report.failure.signature, report.constraint.rule, report.logs
        )

    def _sight(
        self, plan: Plan, topology: tuple[str, ...], signature: str, who: str
    ) -> tuple[int, bool]:
        """A session met a failure: counted in the batch; returns how many distinct
        sessions have met it, this batch's included, and whether this session is new
        among them (else its report is a replay)."""
        key = (topology, signature)
        if key not in plan.sightings:
            plan.sightings[key] = self._state.sightings.sessions(topology, signature)
        fresh = who not in plan.sightings[key]
        plan.sightings[key].add(who)
        plan.counters.sighted.append((topology, signature, who))
        return len(plan.sightings[key]), fresh


def _ask(who: str, text: str, steps: Sequence[Step], completed: bool) -> Ask:
    """What a finished session with a request says of its tools: the ones that returned
    without error served a completed one; an abandoned one failed at its last failing
    call, when that failure was deterministic (the session was abandoned there; the
    failures before it were got past, and a session listing many failing calls must not
    lower every tool it names)."""
    if completed:
        return Ask(who, text, served=tuple(dict.fromkeys(s.tool for s in steps if s.error is None)))
    last = next((s for s in reversed(steps) if s.error is not None), None)
    if last is None or last.error is None or classify(last.error).kind != "deterministic":
        return Ask(who, text)
    return Ask(who, text, failed=(last.tool,))


def _topology(item: Parsed) -> tuple[str, ...]:
    if isinstance(item, AbandonedChain):
        return item.report.topology
    return item.topology if isinstance(item, ChainReport) else ()


def _uncataloged(tools: Collection[str]) -> str:
    named = ", ".join(sorted(tools)[:5]) + (", ..." if len(tools) > 5 else "")
    return (
        f"names tools in no catalog ({named}): an untrusted source's reports teach only of "
        "tools the catalog holds or trusted evidence named"
    )


def _context_only(steps: int, whole: bool) -> str:
    which = "every step" if whole else f"{steps} step(s)"
    return (
        f"{which} on tools in no catalog: context only, nothing learned of those tools "
        "(an untrusted source teaches only of tools the catalog holds or trusted evidence "
        "named)"
    )


def _sessions(n: int) -> str:
    return f"{n} session{'' if n == 1 else 's'}"


def _size(*parts: Any) -> int:
    """Bytes of ``parts`` as the state keeps them (JSON)."""
    return len(json.dumps(parts, default=str, separators=(",", ":")))


def _why(verdict: Classification, seen: int) -> str:
    if verdict.kind == "deterministic":
        return verdict.reason
    return f"reproduced in {seen} sessions ({verdict.reason})"


def conditions_refused(item: Parsed, operator: bool) -> str | None:
    """Why a report's hand-written conditions are refused, or ``None``: they need the
    operator role, and never ride in a report of a success (a success can only contest
    a rule, never make one)."""
    if isinstance(item, StepReport):
        conditions, completed = item.conditions, item.outcome == "completed"
    elif isinstance(item, AbandonedChain):
        assert item.report.constraint is not None
        conditions, completed = item.report.constraint.conditions, False
    elif isinstance(item, ChainReport):
        constraint = item.constraint
        conditions = constraint.conditions if constraint is not None else ()
        completed = item.outcome == "completed"
    else:
        return None
    if not conditions:
        return None
    if completed:
        return "a report of a completed session cannot carry hand-written conditions"
    if not operator:
        return "hand-written conditions need the operator role"
    return None
