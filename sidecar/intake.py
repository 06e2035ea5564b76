"""Report intake: every chain report through the decision boundary, in batches.

A batch is all-or-nothing for what it changes: every report is parsed, redacted and
classified before anything is written; then the batch's counters (completed runs and
the constraints they contradict, sightings, the sessions behind each chain) are staged
in the state, the archived chains are published to the cold store as one file, and only
after that are the counters and the compiled constraints applied, in one transaction.
A batch that fails before its publish leaves no trace; one interrupted after it (a
crash) is completed from its staged counters by the next :meth:`Intake.reconcile`.

Everything a batch counts is keyed by session (see :func:`session_key`), so sending a
batch again, whole or after a failure part-way, counts nothing twice: the same dead end
met by N sessions counts N, an exact replay counts once, and a completed run replayed
neither counts again nor contradicts a constraint again.

A session reported as its ``steps`` (:class:`~sidecar.model.StepReport`) teaches the
call-level memory (:mod:`sidecar.callmemory`, once per session); each of its failing
calls that is deterministic (or reproduced by enough sessions) is archived as a chain of
kind ``call`` (its prefix and the failing call: evidence for eviction and audit, not a
fatal sequence to match); its successful calls are usage evidence; and a successful
call that completes a fatal sequence contradicts that constraint.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cold_store import ColdStore, ColdStoreError, CommitFailed, SchemaError, make_pointer
from sidecar import archive
from sidecar.archive import CallEvidence
from sidecar.callmemory import CallMemory
from sidecar.classify import classify
from sidecar.errors import InvalidInput
from sidecar.limits import INTAKE_CHUNK
from sidecar.memory import FailureCondition, Session, Step, normalize_signature
from sidecar.model import (
    ChainReport,
    ConstraintSpec,
    CredentialRef,
    Failure,
    IntakeResult,
    StepReport,
)
from sidecar.neutralize import neutralize
from sidecar.redact import redact, redact_text
from sidecar.registry import ToolRecords, tool_from_record
from sidecar.reports import parse_any, parse_condition, validate_abandoned
from sidecar.state import Counters, StateStore, Usage, topology_key

STALE_STAGED_S = 600.0
"""A staged batch whose chains are still not published after this long never will be
(its process died, or its publish failed): its counters are dropped."""


LOCAL = "local"
"""The source of evidence a process reports through the library itself."""


def session_key(report: ChainReport | StepReport, source: str = LOCAL) -> str:
    """Who met the failure: the report id, else the session id, else the report's
    content (two identical anonymous reports are one replay), within the source that
    reported it (``src:alice/session:s1``; the local source's keys carry no prefix): no
    source can replay, pre-empt or forget another's sessions."""
    key = _bare_key(report)
    return key if source == LOCAL else f"{SOURCE_PREFIX}{source}/{key}"


SOURCE_PREFIX = "src:"


def source_of(key: str) -> str:
    """The source a session key belongs to (see :func:`session_key`)."""
    if key.startswith(SOURCE_PREFIX):
        return key[len(SOURCE_PREFIX) :].split("/", 1)[0]
    return LOCAL


def _bare_key(report: ChainReport | StepReport) -> str:
    if report.report_id:
        return f"report:{report.report_id}"
    if report.session_id:
        return f"session:{report.session_id}"
    if isinstance(report, StepReport):
        content: Any = [[s.to_dict() for s in report.steps], report.outcome, report.task_input]
    else:
        failure = report.failure
        content = [
            list(report.topology),
            report.outcome,
            failure.signature if failure else None,
            failure.kind if failure else None,
            dict(failure.error) if failure else None,
            list(report.logs),
        ]
    stamp = report.reported_at.isoformat() if report.reported_at else None
    payload = json.dumps([content, stamp], sort_keys=True, default=str)
    return "content:" + hashlib.sha256(payload.encode()).hexdigest()[:32]


@dataclass
class _Archived:
    position: int
    report: ChainReport
    """Redacted; for a failing call, the chain it ends."""
    note: str
    chain_id: str
    sessions: int
    calls: CallEvidence | None = None


@dataclass
class _Plan:
    """What a batch will change once it is accepted whole."""

    results: list[IntakeResult | None]
    counters: Counters = field(default_factory=Counters)
    archive: list[_Archived] = field(default_factory=list)
    sessions: list[Session] = field(default_factory=list)
    manual: list[FailureCondition] = field(default_factory=list)
    fresh_usage: set[str] = field(default_factory=set)
    """Usage keys this batch counts for the first time."""
    usage_keys: set[str] = field(default_factory=set)
    """Every usage key of ``counters.usage``."""
    fresh_runs: Counter[tuple[str, ...]] = field(default_factory=Counter)
    """Per topology, how many of ``fresh_usage`` ran it."""
    summaries: dict[int, list[str]] = field(default_factory=dict)
    """Per report position, what its steps did (a step report's answer)."""
    source: str = "local"


@dataclass(frozen=True)
class SourceForgotten:
    sessions: frozenset[str]
    constraints: int


@dataclass(frozen=True)
class StepPolicy:
    max_step_bytes: int = 65_536
    """Largest stored output or arguments of one step, as JSON; larger ones are cut."""
    keep_outputs: bool = True
    """Keep steps' outputs in the cold record; off, only derived features are kept."""


class Intake:
    def __init__(
        self,
        state: StateStore,
        cold: ColdStore,
        records: ToolRecords,
        reproduce_threshold: int,
        calls: CallMemory,
        retire_after: int,
        steps: StepPolicy = StepPolicy(),
        after_archive: Callable[[], str] | None = None,
        crash_at: str | None = None,
    ) -> None:
        """``after_archive``: run after a batch archived chains (the eviction, when the
        home evicts on report), returns a note for the answers."""
        self._state = state
        self._crash_at = crash_at
        self._cold = cold
        self._records = records
        self._threshold = reproduce_threshold
        self._calls = calls
        self._fatal = _FatalSequences()
        self._stored: set[str] = set()
        self._snaps: dict[str, tuple[Any, str | None, list[CredentialRef]]] = {}
        self._snaps_rev = -1
        self._retire_after = retire_after
        self._steps = steps
        self._after_archive = after_archive

    # ---- the batch ---------------------------------------------------------------
    def report_many(
        self,
        reports: Iterable[ChainReport | StepReport | Mapping[str, Any]],
        chunk: int = INTAKE_CHUNK,
        source: str = LOCAL,
        operator: bool = True,
    ) -> list[IntakeResult]:
        """``source``: who reports (a token's name, ``gateway``, ``otlp``); hand-written
        conditions are taken only from an ``operator``."""
        results: list[IntakeResult] = []
        batch: list[ChainReport | StepReport | Mapping[str, Any]] = []
        for item in reports:
            batch.append(item)
            if len(batch) == chunk:
                results += self._batch(batch, source, operator)
                batch = []
        if batch:
            results += self._batch(batch, source, operator)
        return results

    def _batch(
        self,
        reports: Sequence[ChainReport | StepReport | Mapping[str, Any]],
        source: str,
        operator: bool,
    ) -> list[IntakeResult]:
        plan = self._plan(reports, source, operator)
        # learning first: it is idempotent per session, so a batch sent again after a
        # failure further on teaches nothing twice
        pointers = {
            (a.report.topology[-1], a.calls.normalized_signature): make_pointer(
                "chains", a.chain_id
            )
            for a in plan.archive
            if a.calls is not None
        }
        self._calls.learn(plan.sessions, plan.manual, pointers, source)
        suffix = ""
        if plan.archive:
            rows = self._rows(plan.archive)
            staged = uuid.uuid4().hex
            self._state.stage_intake(staged, [r["chain_id"] for r in rows], plan.counters)
            if self._crash_at == "after_intake_staged":
                os.kill(os.getpid(), signal.SIGKILL)  # testing only (SIDECAR_CRASH_AT)
            try:
                self._cold.chains.append(rows, batch=f"intake-{staged}")
            except (CommitFailed, SchemaError):
                self._state.drop_staged(staged)  # nothing was published
                raise
            self.compile(rows, staged)
            if self._after_archive is not None:
                suffix = self._after_archive()
        else:
            self._state.record_intake(plan.counters, self._retire_after)
        for a in plan.archive:
            if a.calls is not None:
                continue
            deterministic = a.note.split(": ", 1)[1]
            plan.results[a.position] = IntakeResult(
                "archived",
                a.chain_id,
                make_pointer("chains", a.chain_id),
                f"deterministic: {deterministic}{suffix}",
            )
        for i, notes in plan.summaries.items():
            plan.results[i] = _session_answer(plan, i, notes, suffix)
        self.reconcile()  # a replay may find a chain whose constraint a crash lost
        self._fatal.written(self._state.revision())
        return [r for r in plan.results if r is not None]

    def _plan(
        self,
        reports: Sequence[ChainReport | StepReport | Mapping[str, Any]],
        source: str,
        operator: bool,
    ) -> _Plan:
        plan = _Plan([None] * len(reports), source=source)
        archived_now: set[str] = set()
        parsed = [_parsed(raw) for raw in reports]
        # what the batch's abandoned chains need from the stores, in two reads
        chains = [p for p in parsed if isinstance(p, _Chain)]
        batch_sessions = self._state.sighting_sessions_of(
            (c.report.topology, c.signature) for c in chains
        )
        self._stored = self._cold.chains.contains_many(c.chain_id for c in chains)
        self._fatal.refresh(self._state)
        for i, item in enumerate(parsed):
            refusal = _conditions_refused(item, operator)
            if refusal is not None:
                plan.results[i] = IntakeResult("rejected", reason=refusal)
            elif isinstance(item, InvalidInput):
                plan.results[i] = IntakeResult("rejected", reason=str(item))
            elif isinstance(item, StepReport):
                steps = self._redacted_steps(item)
                self._plan_steps(i, item, steps, plan, batch_sessions, archived_now)
            elif isinstance(item, _Chain):
                assert item.report.constraint is not None
                plan.manual += item.report.constraint.conditions
                self._plan_abandoned(i, item, plan, batch_sessions, archived_now)
            else:
                plan.results[i] = self._plan_completed(item, plan)
        return plan

    def _plan_completed(self, report: ChainReport, plan: _Plan) -> IntakeResult:
        topology = report.topology
        who = session_key(redacted_ids(report), plan.source)
        key = usage_key("chain", who, topology)
        fresh = self._count_usage(
            plan,
            Usage(key, topology, self._contradictions(topology, range(len(topology))), who),
        )
        runs = self._state.completed_runs(topology) + plan.fresh_runs[tuple(topology)]
        if not fresh:
            return IntakeResult(
                "recorded", reason=f"completed chain already recorded (a replay; {runs} run(s))"
            )
        return IntakeResult(
            "recorded", reason=f"completed chain recorded as usage evidence ({runs} run(s))"
        )

    def _count_usage(self, plan: _Plan, usage: Usage) -> bool:
        """Add a session's success to the batch; returns whether it is counted for the
        first time (the state counts it once, whatever this answer)."""
        # sets, not a scan of the batch's usage: a batch holds thousands of completions
        fresh = usage.key not in plan.usage_keys and not self._state.usage_seen(usage.key)
        plan.counters.usage.append(usage)
        plan.usage_keys.add(usage.key)
        if fresh:
            plan.fresh_usage.add(usage.key)
            if usage.topology is not None:
                plan.fresh_runs[usage.topology] += 1
        return fresh

    def _contradictions(self, tools: Sequence[str], succeeded: Iterable[int]) -> tuple[str, ...]:
        """A tool that completed after ``tools[:j]`` contradicts every unconditional
        fatal sequence it completes there (one chain id per contradiction)."""
        return tuple(cid for j in succeeded for cid in self._fatal.completed_at(tools, j))

    # ---- sessions reported as steps ---------------------------------------------------
    def _redacted_steps(self, report: StepReport) -> tuple[Step, ...]:
        """Secrets masked in every argument, output and error; oversize parts cut."""
        cap = self._steps.max_step_bytes
        return tuple(
            Step(
                s.tool,
                _capped(redact(dict(s.arguments)), cap),
                _capped(redact(s.output), cap),
                redact_text(s.error) if s.error is not None else None,
            )
            for s in report.steps
        )

    def _plan_steps(
        self,
        i: int,
        report: StepReport,
        steps: tuple[Step, ...],
        plan: _Plan,
        batch_sessions: dict[tuple[tuple[str, ...], str], set[str]],
        archived_now: set[str],
    ) -> None:
        task_input = redact_text(report.task_input) if report.task_input else None
        redacted = replace(
            report,
            session_id=redact_text(report.session_id) if report.session_id else None,
            report_id=redact_text(report.report_id) if report.report_id else None,
        )
        who = session_key(redacted, plan.source)
        plan.sessions.append(Session(who, steps, report.outcome, task_input, plan.source))
        plan.manual += report.conditions
        tools = [s.tool for s in steps]
        ok = [j for j, s in enumerate(steps) if s.error is None]
        # a completed session is a completed chain of its tools; and a call that returned
        # without error is usage evidence whatever the session's outcome (a tool that
        # succeeds is never evicted for the dead ends of the sessions it served)
        used = (
            tuple(dict.fromkeys(tools[j] for j in ok))
            if ok and report.outcome == "completed"
            else None
        )
        plan.counters.succeeded += [(t, who) for t in dict.fromkeys(tools[j] for j in ok)]
        self._count_usage(
            plan, Usage(usage_key("steps", who), used, self._contradictions(tools, ok), who)
        )
        notes = [f"{len(ok)} successful call(s) learned from"]
        for j, step in enumerate(steps):
            if step.error is not None:
                notes.append(
                    self._plan_failing_call(
                        i, j, steps, who, task_input, plan, batch_sessions, archived_now
                    )
                )
        plan.summaries[i] = notes

    def _plan_failing_call(
        self,
        i: int,
        j: int,
        steps: tuple[Step, ...],
        who: str,
        task_input: str | None,
        plan: _Plan,
        batch_sessions: dict[tuple[tuple[str, ...], str], set[str]],
        archived_now: set[str],
    ) -> str:
        step = steps[j]
        assert step.error is not None
        verdict = classify(step.error)
        where = f"step {j} ({step.tool})"
        if verdict.kind == "transient":
            return f"{where}: transient, not archived ({verdict.reason})"
        normalized = normalize_signature(step.error)
        key = ((step.tool,), normalized)
        if key not in batch_sessions:
            batch_sessions[key] = self._state.sighting_sessions(*key)
        batch_sessions[key].add(who)
        seen = len(batch_sessions[key])
        plan.counters.sighted.append((key[0], normalized, who))
        topology = tuple(s.tool for s in steps[: j + 1])
        cid = call_chain_id(who, j, step.tool, step.error)
        plan.counters.chain_sessions.append((cid, who))
        if cid in archived_now or self._cold.chains.contains(cid):
            return f"{where}: already archived (replayed report) as {make_pointer('chains', cid)}"
        if verdict.kind == "unknown" and seen < self._threshold:
            return (
                f"{where}: unknown failure kind ({verdict.reason}); seen in {seen} of the "
                f"{self._threshold} sessions that make it reproduced"
            )
        chain = ChainReport(
            topology=topology,
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
        note = "deterministic" if verdict.kind == "deterministic" else f"reproduced in {seen}"
        plan.archive.append(_Archived(i, chain, f"rule {verdict.rule}: {note}", cid, seen, calls))
        archived_now.add(cid)
        return f"{where}: archived {make_pointer('chains', cid)} ({verdict.reason})"

    def _plan_abandoned(
        self,
        i: int,
        chain: _Chain,
        plan: _Plan,
        batch_sessions: dict[tuple[tuple[str, ...], str], set[str]],
        archived_now: set[str],
    ) -> None:
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
        key = (report.topology, report.failure.signature)
        if key not in batch_sessions:
            batch_sessions[key] = self._state.sighting_sessions(*key)
        batch_sessions[key].add(who)
        seen = len(batch_sessions[key])
        plan.counters.sighted.append((report.topology, report.failure.signature, who))
        cid = chain.chain_id
        plan.counters.chain_sessions.append((cid, who))
        if cid in archived_now or cid in self._stored:
            plan.results[i] = IntakeResult(
                "archived", cid, make_pointer("chains", cid), "already archived (replayed report)"
            )
            return
        if verdict.kind == "unknown" and seen < self._threshold:
            plan.results[i] = IntakeResult(
                "not_archived",
                reason=f"unknown failure kind ({verdict.reason}); seen in {seen} of the "
                f"{self._threshold} sessions that make it reproduced",
            )
            return
        note = (
            verdict.reason
            if verdict.kind == "deterministic"
            else f"reproduced in {seen} sessions ({verdict.reason})"
        )
        plan.archive.append(_Archived(i, report, f"rule {verdict.rule}: {note}", cid, seen))
        archived_now.add(cid)

    # ---- forgetting ----------------------------------------------------------------
    def forget(self, source: str, since: float | None) -> SourceForgotten:
        """Stop counting ``source``'s sessions (sightings, dead ends, completed runs and
        the contradictions they brought); an archived chain that no other session
        supports is lifted (it stays in the archive, for audit)."""
        prefix = None if source == LOCAL else f"{SOURCE_PREFIX}{source}/"
        sessions, unsupported = self._state.forget_sessions(prefix, since)
        lifted = 0
        for cid in unsupported:
            lifted += self._state.set_constraint_status(
                cid, "lifted", f"forgotten: every session behind it came from {source}", False
            )
        self._fatal = _FatalSequences()
        return SourceForgotten(frozenset(sessions), lifted)

    # ---- archiving -----------------------------------------------------------------
    def _rows(self, accepted: Sequence[_Archived]) -> list[dict[str, Any]]:
        tools = sorted({t for a in accepted for t in a.report.topology})
        snapshots, types, credentials = self._snapshots(tools)
        now = datetime.now(UTC)
        return [
            archive.cold_row(
                cid=a.chain_id,
                report=a.report,
                kind="deterministic",
                classification=a.note,
                tool_types=[types.get(t, "unknown") for t in a.report.topology],
                snapshots={t: snapshots.get(t) for t in a.report.topology},
                credentials={t: credentials.get(t, []) for t in a.report.topology},
                occurrences=a.sessions,
                now=now,
                calls=self._with_conditions(a.calls, a.report.topology[-1]),
            )
            for a in accepted
        ]

    def _with_conditions(self, calls: CallEvidence | None, tool: str) -> CallEvidence | None:
        """The conditions known for this failure when it is archived (learning ran
        first), beside its evidence."""
        if calls is None:
            return None
        known = [
            c.to_dict()
            for c in self._calls.enforced(tool)
            if c.signature == calls.normalized_signature
        ]
        return replace(calls, conditions=tuple(known))

    def _snapshots(
        self, tool_ids: Sequence[str]
    ) -> tuple[dict[str, Any], dict[str, str], dict[str, list[CredentialRef]]]:
        """Redacted records of the tools (``None`` for tools not registered), their
        types and credentials, from the state (the hot index is not needed).  Kept from
        batch to batch until the hot-index revision moves (a tool added, changed or
        moved)."""
        rev = self._state.revisions()[1]
        if rev != self._snaps_rev:
            self._snaps, self._snaps_rev = {}, rev
        wanted = [t for t in dict.fromkeys(tool_ids) if t not in self._snaps]
        records = self._records.get(wanted)
        held = self._state.credentials(wanted)
        for tool_id in wanted:
            rec = records.get(tool_id)
            if rec is None:
                self._snaps[tool_id] = (None, None, held.get(tool_id, []))
                continue
            tool = tool_from_record(rec)  # records are stored redacted
            snap = tool.to_dict()
            snap.pop("credentials")
            self._snaps[tool_id] = (snap, tool.tool_type, held.get(tool_id, []))
        snaps: dict[str, Any] = {}
        types: dict[str, str] = {}
        creds: dict[str, list[CredentialRef]] = {}
        for tool_id in tool_ids:
            snap, tool_type, refs = self._snaps[tool_id]
            snaps[tool_id] = snap
            creds[tool_id] = refs
            if tool_type is not None:
                types[tool_id] = tool_type
        return snaps, types, creds

    def compile(self, rows: Sequence[Mapping[str, Any]], staged: str | None = None) -> None:
        """Add archived rows to the constraint table, with the counters of the
        ``staged`` batch (unless they were applied already), in one transaction."""
        items = []
        for row in rows:
            condition = json.loads(row["condition_json"])
            topology = tuple(row["topology"])
            when = tuple(parse_condition(c, i, topology) for i, c in enumerate(condition["when"]))
            items.append(
                (
                    row["chain_id"],
                    topology,
                    row["rule"],
                    row["terminal_signature"],
                    when,
                    bool(row["gapped"]),
                    make_pointer("chains", row["chain_id"]),
                    row["archived_at"].timestamp(),
                )
            )
        kinds = {r["chain_id"]: "call" for r in rows if r.get("source") == "steps"}
        self._state.add_constraints(items, kinds, staged, self._retire_after)
        self._fatal.extend(
            (item[1], item[0])
            for item in items
            if kinds.get(item[0], "sequence") == "sequence" and not item[4] and not item[5]
        )

    def reconcile(self) -> list[str]:
        """Complete every batch a crash interrupted after its publish (its staged
        counters), and compile every archived chain the constraint table misses (a crash
        between the cold append and the constraint insert); returns their ids."""
        if not self._state.writable:
            return []
        repaired = self._complete_staged()
        chains = self._cold.chains
        if chains.count() == self._state.constraint_count():
            return repaired
        known = self._state.constraint_ids()
        for cid in chains.all_keys():
            if cid in known:
                continue
            try:
                row = chains.get(cid)
            except ColdStoreError:
                continue  # quarantined: reported by status, nothing to compile
            self.compile([row])
            repaired.append(cid)
        return repaired

    def _complete_staged(self) -> list[str]:
        """Apply the counters of staged batches whose chains are published (applying
        twice counts nothing twice: every counter is keyed by session); forget those
        that never will be."""
        chains = self._cold.chains
        repaired: list[str] = []
        for batch, chain_ids, _counters, staged_at in self._state.staged_intakes():
            if all(chains.contains(c) for c in chain_ids):
                rows = []
                for cid in chain_ids:
                    try:
                        rows.append(chains.get(cid))
                    except ColdStoreError:
                        continue  # quarantined since: reported by status
                known = self._state.constraint_ids()
                repaired += [r["chain_id"] for r in rows if r["chain_id"] not in known]
                self.compile(rows, batch)
            elif time.time() - staged_at > STALE_STAGED_S:
                self._state.drop_staged(batch)
        return repaired


def _conditions_refused(item: Any, operator: bool) -> str | None:
    """Why a report's hand-written conditions are refused, or ``None``: they need the
    operator role, and never ride in a report of a success (a success can only contest
    a rule, never make one)."""
    if isinstance(item, StepReport):
        conditions, completed = item.conditions, item.outcome == "completed"
    elif isinstance(item, _Chain):
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


def usage_key(kind: str, session: str, topology: Sequence[str] = ()) -> str:
    """Who succeeded at what: a replayed report names the same usage."""
    payload = json.dumps([kind, session, topology_key(topology)], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def redacted_ids(report: ChainReport) -> ChainReport:
    """The report with its ids redacted, as they are stored (so that its session key is
    the one an abandoned report of the same session gets)."""
    return replace(
        report,
        session_id=redact_text(report.session_id) if report.session_id else report.session_id,
        report_id=redact_text(report.report_id) if report.report_id else report.report_id,
    )


@dataclass(frozen=True)
class _Chain:
    """An abandoned chain report, parsed, checked and redacted."""

    report: ChainReport
    chain_id: str

    @property
    def signature(self) -> str:
        assert self.report.failure is not None
        return self.report.failure.signature


def _parsed(
    raw: ChainReport | StepReport | Mapping[str, Any],
) -> _Chain | ChainReport | StepReport | InvalidInput:
    """A report checked and, for an abandoned chain, redacted: a ``_Chain``; a step
    report or a completed chain as parsed; or why it is rejected.  No store is read."""
    try:
        report = raw if isinstance(raw, ChainReport | StepReport) else parse_any(raw)
        if isinstance(report, StepReport) or report.outcome == "completed":
            return report
        validate_abandoned(report)
    except InvalidInput as exc:
        return exc
    redacted = redacted_report(report)
    return _Chain(redacted, archive.chain_id(redacted))


class _FatalSequences:
    """The unconditional, contiguous fatal sequences by terminal tool: what a completed
    call is checked against for contradictions.  Read from the state when the
    constraints revision moved, then kept up to date with this process's own archiving
    (a chain another process archived is seen when the revision next moves)."""

    def __init__(self) -> None:
        self._by_terminal: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        self._rev = -1

    def refresh(self, state: StateStore) -> None:
        rev = state.revision()
        if rev == self._rev:
            return
        self._by_terminal = {}
        self.extend((c.sequence, c.chain_id) for c in state.active_constraints() if not c.when)
        self._rev = rev

    def extend(self, items: Iterable[tuple[Sequence[str], str]]) -> None:
        for sequence, cid in items:
            seq = tuple(sequence)
            self._by_terminal.setdefault(seq[-1], []).append((seq, cid))

    def written(self, revision: int) -> None:
        """The constraints revision after this process's own batch: nothing to re-read
        (had it been read before)."""
        if self._rev >= 0:
            self._rev = revision

    def completed_at(self, tools: Sequence[str], j: int) -> list[str]:
        """The sequences ``tools[: j + 1]`` ends with."""
        return [
            cid
            for seq, cid in self._by_terminal.get(tools[j], ())
            if len(seq) <= j + 1 and tuple(tools[j + 1 - len(seq) : j + 1]) == seq
        ]


def call_chain_id(session: str, position: int, tool: str, error: str) -> str:
    """The chain of one failing call of one session: the same report replayed names the
    same chain, another session's identical failure another chain."""
    payload = json.dumps([session, position, tool, error], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def _capped(value: Any, cap: int) -> Any:
    """``value`` when its JSON is at most ``cap`` bytes, else a marker with its head."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text.encode()) <= cap:
        return value
    return {"_truncated": True, "bytes": len(text.encode()), "head": text[: min(cap, 1024)]}


def _session_answer(plan: _Plan, i: int, notes: list[str], suffix: str) -> IntakeResult:
    archived = [a for a in plan.archive if a.position == i and a.calls is not None]
    reason = "; ".join(notes) + suffix
    if not archived:
        return IntakeResult("recorded", reason=f"session recorded: {reason}")
    last = archived[-1]
    return IntakeResult(
        "archived", last.chain_id, make_pointer("chains", last.chain_id), f"session: {reason}"
    )


def redacted_report(report: ChainReport) -> ChainReport:
    assert report.failure is not None and report.constraint is not None
    failure = Failure(
        neutralize(redact(report.failure.signature)),
        report.failure.kind,
        redact(dict(report.failure.error)),
    )
    when = tuple(
        replace(c, value=redact_text(c.value)) if isinstance(c.value, str) else c
        for c in report.constraint.when
    )
    constraint = ConstraintSpec(
        neutralize(redact(report.constraint.rule)),
        when,
        report.constraint.gapped,
        report.constraint.conditions,
    )
    return replace(
        report,
        failure=failure,
        constraint=constraint,
        logs=tuple(redact(list(report.logs))),
        session_id=redact_text(report.session_id) if report.session_id else report.session_id,
        report_id=redact_text(report.report_id) if report.report_id else report.report_id,
    )
