"""Intake, step 3: a planned batch committed, all or nothing.

In one transaction (one turn at the state's ``learned`` lock: see
:data:`sidecar.storage.base.CONCERNS`), the memory learns the batch's sessions, the
batch's counters are applied, the chains it archives compiled into rules, and their
cold records kept as pending: once that commits, the batch is durable and in
force, and it is acknowledged.  The records reach the archive through the publisher
(:mod:`sidecar.archive.publish`): at once beside a local folder, in group commits beside
a Delta table.  A crash before the transaction commits leaves no trace (the same batch
sent again counts once: every counter is keyed by session); one after it leaves records
pending, which the next :meth:`Committer.reconcile` publishes, whoever runs it first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from cold_store import ColdStore, ColdStoreError, make_pointer
from sidecar.archive.chains import CallEvidence, cold_row
from sidecar.archive.publish import Publisher
from sidecar.faults import passed
from sidecar.intake.counters import Counters, apply
from sidecar.intake.parse import parse_condition
from sidecar.intake.plan import Archival, Plan
from sidecar.model import CredentialRef, IntakeResult
from sidecar.rules import Rules
from sidecar.storage.base import Connection
from sidecar.storage.sequences import CompiledChain
from sidecar.storage.state import State
from sidecar.tools.records import ToolRecords, tool_from_record

SNAPSHOTS_KEPT = 4_096
"""Tools whose records the committer keeps between batches, at most."""
STALE_STAGED_S = 600.0
"""A staged batch whose chains are still not published after this long never will be
(its process died, or its publish failed): its counters are dropped."""


class Committer:
    def __init__(
        self,
        state: State,
        cold: ColdStore,
        records: ToolRecords,
        rules: Rules,
        publisher: Publisher,
    ) -> None:
        self._state = state
        self._cold = cold
        self._publisher = publisher
        self._records = records
        self._rules = rules
        self._snaps: dict[str, tuple[Any, str | None, list[CredentialRef]]] = {}
        self._snaps_rev = -1

    def commit(self, plan: Plan) -> list[IntakeResult]:
        """The batch's unit of work, step by step in one transaction (one turn at the
        state's ``learned`` lock): the memory learns, the counters are applied, the chains
        compiled, the cold records built (after learning: a record carries the
        conditions its own batch taught) and queued, the source's budget spent."""
        pointers = {
            (a.report.topology[-1], a.calls.normalized_signature): make_pointer(
                "chains", a.chain_id
            )
            for a in plan.archive
            if a.calls is not None
        }
        stamp = datetime.now(UTC)
        chains = [compiled(a, stamp.timestamp()) for a in plan.archive]
        now = time.time()
        rows: list[dict[str, Any]] = []
        book = self._rules.conditions
        with book.writing(self._learning) as tx:
            learned = book.learn(tx, plan.sessions, plan.manual, pointers, plan.source)
            # counted before the new rules are compiled: a completed run of the same
            # batch is then among the runs that came before them
            usage = apply(tx, self._state, self._rules, plan.counters, now)
            if chains:
                self._rules.sequences.compile(tx, chains, now)
                rows = self._rows(plan.archive, stamp)
                self._publisher.queue(tx, rows, now)
            spent = plan.evidence_bytes + learned + usage
            self._state.budgets.spend(tx, plan.source, spent, now)
        passed("after_intake_staged")
        self._rules.sequences.compiled()
        if rows:
            self._publisher.queued()
        self._answer(plan)
        return [r for r in plan.results if r is not None]

    def _learning(self) -> AbstractContextManager[Connection]:
        """A report's transaction: it folds into what the memory and the rules learned,
        so it excludes every other writer of that (the ``learned`` concern), but not
        the group publisher's removal of published records."""
        return self._state.tx("learned")

    @staticmethod
    def _answer(plan: Plan) -> None:
        for a in plan.archive:
            if a.calls is None:
                plan.results[a.position] = IntakeResult(
                    "archived",
                    a.chain_id,
                    make_pointer("chains", a.chain_id),
                    f"deterministic: {a.why}",
                )
        for i, notes in plan.summaries.items():
            plan.results[i] = _session_answer(plan, i, notes)

    def _apply(
        self, chains: Sequence[CompiledChain], staged: str | None, counters: Counters | None
    ) -> None:
        """Compile chains, with the counters of a ``staged`` batch of a home written
        before batches were acknowledged in the state (unless another process applied
        them already), in one transaction."""
        now = time.time()
        with self._learning() as tx:
            if staged is not None:
                taken = self._state.staging.take(tx, staged)
                if taken is not None:
                    apply(tx, self._state, self._rules, counters or Counters.from_json(taken), now)
            self._rules.sequences.compile(tx, chains, now)

    # ---- the cold rows -----------------------------------------------------------------
    def _rows(self, accepted: Sequence[Archival], now: datetime) -> list[dict[str, Any]]:
        tools = sorted({t for a in accepted for t in a.report.topology})
        snapshots, types, credentials = self._snapshots(tools)
        return [
            cold_row(
                cid=a.chain_id,
                report=a.report,
                kind="deterministic",
                classification=a.classification,
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
        """The conditions known for this failure when it is archived (its batch learned
        first, in the same transaction), beside its evidence."""
        if calls is None:
            return None
        known = [
            c.to_dict()
            for c in self._rules.conditions.enforced(tool)
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
        rev = self._state.revisions.revisions()[1]
        # a chain's steps may name any tools (context an agent reported): the cache is
        # kept for the catalog's, not grown by every name it has met
        if rev != self._snaps_rev or len(self._snaps) > SNAPSHOTS_KEPT:
            self._snaps, self._snaps_rev = {}, rev
        wanted = [t for t in dict.fromkeys(tool_ids) if t not in self._snaps]
        records = self._records.get(wanted)
        held = self._state.credentials.of(wanted)
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

    # ---- after a crash -------------------------------------------------------------------
    def reconcile(self) -> list[str]:
        """Publish what was acknowledged and not published (a crash, an unwritable
        store); complete every batch of an earlier sidecar that a crash interrupted
        after its publish (its staged counters), and compile every archived chain the
        rules miss; returns the ids of those compiled."""
        if not self._state.writable:
            return []
        self._publisher.publish()
        repaired = self._complete_staged()
        chains = self._cold.chains
        if chains.count() == self._state.sequences.count():
            return repaired
        known = self._state.sequences.ids()
        for cid in chains.all_keys():
            if cid in known:
                continue
            try:
                row = chains.get(cid)
            except ColdStoreError:
                continue  # quarantined: reported by status, nothing to compile
            self._apply([compiled_row(row)], None, None)
            repaired.append(cid)
        return repaired

    def _complete_staged(self) -> list[str]:
        """Apply the counters of staged batches whose chains are published (applying
        twice counts nothing twice: every counter is keyed by session); forget those
        that never will be."""
        chains = self._cold.chains
        repaired: list[str] = []
        for batch in self._state.staging.staged():
            if all(chains.contains(c) for c in batch.chain_ids):
                rows = []
                for cid in batch.chain_ids:
                    try:
                        rows.append(chains.get(cid))
                    except ColdStoreError:
                        continue  # quarantined since: reported by status
                known = self._state.sequences.ids()
                repaired += [r["chain_id"] for r in rows if r["chain_id"] not in known]
                self._apply([compiled_row(r) for r in rows], batch.batch_id, None)
            elif time.time() - batch.staged_at > STALE_STAGED_S:
                with self._state.tx() as tx:
                    self._state.staging.drop(tx, batch.batch_id)
        return repaired


def compiled(a: Archival, archived_at: float) -> CompiledChain:
    """The rule an archived chain makes, from the batch that archived it."""
    report = a.report
    assert report.failure is not None and report.constraint is not None
    return CompiledChain(
        chain_id=a.chain_id,
        sequence=tuple(report.topology),
        rule=report.constraint.rule,
        signature=report.failure.signature,
        when=tuple(report.constraint.when),
        gapped=report.constraint.gapped,
        pointer=make_pointer("chains", a.chain_id),
        archived_at=archived_at,
        kind="call" if a.calls is not None else "sequence",
    )


def compiled_row(row: Mapping[str, Any]) -> CompiledChain:
    """The rule an archived chain makes, from its cold record."""
    condition = json.loads(row["condition_json"])
    topology = tuple(row["topology"])
    return CompiledChain(
        chain_id=row["chain_id"],
        sequence=topology,
        rule=row["rule"],
        signature=row["terminal_signature"],
        when=tuple(parse_condition(c, i, topology) for i, c in enumerate(condition["when"])),
        gapped=bool(row["gapped"]),
        pointer=make_pointer("chains", row["chain_id"]),
        archived_at=row["archived_at"].timestamp(),
        kind="call" if row.get("source") == "steps" else "sequence",
    )


def _session_answer(plan: Plan, i: int, notes: list[str]) -> IntakeResult:
    archived = [a.chain_id for a in plan.archive if a.position == i and a.calls is not None]
    reason = "; ".join(notes)
    # a replayed session answers as it was first answered: its chain is archived
    last = archived[-1] if archived else plan.replayed.get(i)
    if last is None:
        return IntakeResult("recorded", reason=f"session recorded: {reason}")
    return IntakeResult("archived", last, make_pointer("chains", last), f"session: {reason}")
