"""Report intake: every chain report through the decision boundary, in batches.

A batch is all-or-nothing for what it changes: every report is parsed, redacted and
classified before anything is written; then the archived chains are published to the
cold store as one file, and only after that are the state's counters (completed runs,
sightings, the sessions behind each chain) and the compiled constraints updated, in one
transaction.  A batch that fails before its publish leaves no trace, so sending it
again counts nothing twice.

Sightings are distinct sessions (see :func:`session_key`): the same dead end met by N
sessions counts N, an exact replay counts once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from cold_store import ColdStore, ColdStoreError, make_pointer
from sidecar import archive
from sidecar.classify import classify
from sidecar.errors import InvalidInput
from sidecar.model import ChainReport, ConstraintSpec, Failure, IntakeResult
from sidecar.redact import redact, redact_text
from sidecar.registry import ToolRecords, redacted_tool, tool_from_record
from sidecar.reports import parse_condition, parse_report, validate_abandoned
from sidecar.state import StateStore

SnapshotFn = Callable[[Sequence[str]], tuple[dict[str, Any], dict[str, str]]]


def session_key(report: ChainReport) -> str:
    """Who met the failure: the report id, else the session id, else the report's
    content (two identical anonymous reports are one replay)."""
    if report.report_id:
        return f"report:{report.report_id}"
    if report.session_id:
        return f"session:{report.session_id}"
    failure = report.failure
    payload = json.dumps(
        [
            list(report.topology),
            report.outcome,
            failure.signature if failure else None,
            failure.kind if failure else None,
            dict(failure.error) if failure else None,
            list(report.logs),
            report.reported_at.isoformat() if report.reported_at else None,
        ],
        sort_keys=True,
        default=str,
    )
    return "content:" + hashlib.sha256(payload.encode()).hexdigest()[:32]


@dataclass
class _Plan:
    """What a batch will change once it is accepted whole."""

    results: list[IntakeResult | None]
    completed: list[tuple[str, ...]]
    sighted: list[tuple[tuple[str, ...], str, str]]
    chain_sessions: list[tuple[str, str]]
    archive: list[tuple[int, ChainReport, str, str, int]]
    """(position, redacted report, classification note, chain id, sessions)."""


class Intake:
    def __init__(
        self,
        state: StateStore,
        cold: ColdStore,
        records: ToolRecords,
        reproduce_threshold: int,
        after_archive: Callable[[], str] | None = None,
    ) -> None:
        """``after_archive``: run after a batch archived chains (the eviction, when the
        home evicts on report); returns a note for the answers."""
        self._state = state
        self._cold = cold
        self._records = records
        self._threshold = reproduce_threshold
        self._after_archive = after_archive

    # ---- the batch ---------------------------------------------------------------
    def report_many(
        self, reports: Iterable[ChainReport | Mapping[str, Any]], chunk: int = 1000
    ) -> list[IntakeResult]:
        results: list[IntakeResult] = []
        batch: list[ChainReport | Mapping[str, Any]] = []
        for item in reports:
            batch.append(item)
            if len(batch) == chunk:
                results += self._batch(batch)
                batch = []
        if batch:
            results += self._batch(batch)
        return results

    def _batch(self, reports: Sequence[ChainReport | Mapping[str, Any]]) -> list[IntakeResult]:
        plan = self._plan(reports)
        suffix = ""
        if plan.archive:
            rows = self._rows(plan.archive)
            self._cold.chains.append(rows)
            self.compile(rows, plan)
            if self._after_archive is not None:
                suffix = self._after_archive()
        else:
            self._state.record_intake(plan.completed, plan.sighted, plan.chain_sessions)
        for i, _report, note, cid, _n in plan.archive:
            deterministic = note.split(": ", 1)[1]
            plan.results[i] = IntakeResult(
                "archived",
                cid,
                make_pointer("chains", cid),
                f"deterministic: {deterministic}{suffix}",
            )
        self.reconcile()  # a replay may find a chain whose constraint a crash lost
        return [r for r in plan.results if r is not None]

    def _plan(self, reports: Sequence[ChainReport | Mapping[str, Any]]) -> _Plan:
        plan = _Plan([None] * len(reports), [], [], [], [])
        batch_sessions: dict[tuple[tuple[str, ...], str], set[str]] = {}
        archived_now: set[str] = set()
        for i, raw in enumerate(reports):
            try:
                parsed = raw if isinstance(raw, ChainReport) else parse_report(raw)
                if parsed.outcome == "completed":
                    plan.completed.append(parsed.topology)
                    runs = self._state.completed_runs(parsed.topology) + plan.completed.count(
                        parsed.topology
                    )
                    plan.results[i] = IntakeResult(
                        "recorded",
                        reason=f"completed chain recorded as usage evidence ({runs} run(s))",
                    )
                    continue
                validate_abandoned(parsed)
            except InvalidInput as exc:
                plan.results[i] = IntakeResult("rejected", reason=str(exc))
                continue
            self._plan_abandoned(i, redacted_report(parsed), plan, batch_sessions, archived_now)
        return plan

    def _plan_abandoned(
        self,
        i: int,
        report: ChainReport,
        plan: _Plan,
        batch_sessions: dict[tuple[tuple[str, ...], str], set[str]],
        archived_now: set[str],
    ) -> None:
        assert report.failure is not None
        verdict = classify(report.failure.signature, report.failure.kind, report.failure.error)
        if verdict.kind == "transient":
            plan.results[i] = IntakeResult(
                "not_archived",
                reason=f"transient failure, not archived; the tools stay active ({verdict.reason})",
            )
            return
        who = session_key(report)
        key = (report.topology, report.failure.signature)
        if key not in batch_sessions:
            batch_sessions[key] = self._state.sighting_sessions(*key)
        batch_sessions[key].add(who)
        seen = len(batch_sessions[key])
        plan.sighted.append((report.topology, report.failure.signature, who))
        cid = archive.chain_id(report)
        plan.chain_sessions.append((cid, who))
        if cid in archived_now or self._cold.chains.contains(cid):
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
        plan.archive.append((i, report, f"rule {verdict.rule}: {note}", cid, seen))
        archived_now.add(cid)

    # ---- archiving -----------------------------------------------------------------
    def _rows(
        self, accepted: Sequence[tuple[int, ChainReport, str, str, int]]
    ) -> list[dict[str, Any]]:
        tools = sorted({t for _, report, _, _, _ in accepted for t in report.topology})
        snapshots, types = self._snapshots(tools)
        credentials = self._state.credentials(tools)
        now = datetime.now(UTC)
        return [
            archive.cold_row(
                cid=cid,
                report=report,
                kind="deterministic",
                classification=note,
                tool_types=[types.get(t, "unknown") for t in report.topology],
                snapshots={t: snapshots.get(t) for t in report.topology},
                credentials={t: credentials.get(t, []) for t in report.topology},
                occurrences=seen,
                now=now,
            )
            for _, report, note, cid, seen in accepted
        ]

    def _snapshots(self, tool_ids: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
        """Redacted records of the tools (``None`` for tools not registered) and their
        types, from the state's records (the hot index is not needed)."""
        records = self._records.get(tool_ids)
        snaps: dict[str, Any] = {}
        types: dict[str, str] = {}
        for tool_id in tool_ids:
            rec = records.get(tool_id)
            if rec is None:
                snaps[tool_id] = None
                continue
            tool = redacted_tool(tool_from_record(rec))
            snap = tool.to_dict()
            snap.pop("credentials")
            snaps[tool_id] = snap
            types[tool_id] = tool.tool_type
        return snaps, types

    def compile(self, rows: Sequence[Mapping[str, Any]], plan: _Plan | None = None) -> None:
        """Add archived rows to the constraint table, with the batch's counters, in one
        transaction."""
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
        if plan is None:
            self._state.add_constraints(items)
        else:
            self._state.add_constraints(items, plan.completed, plan.sighted, plan.chain_sessions)

    def reconcile(self) -> list[str]:
        """Compile every archived chain the constraint table misses (a crash between the
        cold append and the constraint insert); returns their ids."""
        chains = self._cold.chains
        if not self._state.writable or chains.count() == self._state.constraint_count():
            return []
        known = self._state.constraint_ids()
        repaired: list[str] = []
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


def redacted_report(report: ChainReport) -> ChainReport:
    assert report.failure is not None and report.constraint is not None
    failure = Failure(
        redact(report.failure.signature), report.failure.kind, redact(dict(report.failure.error))
    )
    when = tuple(
        replace(c, value=redact_text(c.value)) if isinstance(c.value, str) else c
        for c in report.constraint.when
    )
    constraint = ConstraintSpec(redact(report.constraint.rule), when, report.constraint.gapped)
    return replace(
        report,
        failure=failure,
        constraint=constraint,
        logs=tuple(redact(list(report.logs))),
        session_id=redact_text(report.session_id) if report.session_id else report.session_id,
        report_id=redact_text(report.report_id) if report.report_id else report.report_id,
    )
