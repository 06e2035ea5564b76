"""Moving tools between the stores, safely: the eviction engine's runs, recovery and
restores.

Moves are journaled (:mod:`sidecar.eviction.journal`) in batches under the eviction lock:
intent -> cold append -> mandates -> verified hot delete -> done.  A crash at any step is
finished by :meth:`Evictor.recover` (run on the next eviction, or by ``sidecar evict
--recover``): every tool ends in exactly one store, no cold row is written twice, every
mandate exists once.  What moves is decided by :mod:`sidecar.eviction.decision`; the
steps, in as few round trips as the stores allow, are :mod:`sidecar.eviction.steps`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from cold_store import ColdStoreError, ColdTable, make_pointer
from indexes import ID_KEY, ActiveIndex, IndexRecord
from sidecar.archive.publish import Publisher
from sidecar.errors import NotFound
from sidecar.eviction.decision import (
    LATE_USE,
    EvictionReport,
    Policy,
    RestoreResult,
    ToolDecision,
    decide,
)
from sidecar.eviction.journal import Journal, move_id
from sidecar.eviction.steps import MoveSteps
from sidecar.faults import CRASH_POINTS, passed
from sidecar.model import ArchivedConstraint, CredentialRef
from sidecar.rules import Rules
from sidecar.rules.standing import source_of
from sidecar.storage import Lock
from sidecar.storage.moves import Move
from sidecar.storage.state import State
from sidecar.tools.records import ToolRecords

EVICTION_RECORD_VERSION = 1
"""The layout of an evicted tool's cold record (an archived chain's is
:data:`~sidecar.archive.chains.CHAIN_RECORD_VERSION`)."""


class Evictor:
    """Decisions and journaled moves between the hot index and the cold ``tools``
    table, under the home's eviction lock."""

    def __init__(
        self,
        *,
        index: Callable[[], ActiveIndex],
        records: ToolRecords,
        state: State,
        rules: Rules,
        journal: Journal,
        cold_tools: ColdTable,
        lock: Callable[[], Lock],
        hot_write: Callable[[], AbstractContextManager[None]],
        policy: Policy,
        count_tokens: Callable[[], tuple[str, Callable[[str], int]]],
        publisher: Publisher,
        crash_hook: Callable[[str], None] | None = None,
    ) -> None:
        """``index`` opens the hot index on first use; ``lock`` makes the eviction
        lock; ``hot_write`` wraps every write to the hot index; ``count_tokens`` gives
        the tokenizer's name and counter for the reclaimed-context figures."""
        self._index = index
        self._records = records
        self._state = state
        self._rules = rules
        self._journal = journal
        self._cold = cold_tools
        self._lock = lock
        self._hot_write = hot_write
        self._policy = policy
        self._count_tokens = count_tokens
        self._crash_hook = crash_hook
        self._steps = MoveSteps(
            state=state,
            journal=journal,
            index=index,
            cold_tools=cold_tools,
            publisher=publisher,
            crash=self._crash,
        )
        self._set_aside: dict[str, set[str]] = {}
        """The last decision's runs that are no use of their tools (see
        :meth:`_runs_set_aside`), applied again when usage is re-read before a move."""
        self._backed: set[str] = set()
        """The last decision's tools whose uses count only from trusted sources
        (:meth:`_uses`), likewise."""

    def lock(self) -> Lock:
        """The lock one eviction, restore or recovery at a time holds."""
        return self._lock()

    def running(self) -> bool:
        """Whether an eviction, restore or recovery holds the lock now."""
        return self._lock().holder() is not None

    # ---- decision -----------------------------------------------------------------
    def decide(self, min_chains: int | None = None) -> list[ToolDecision]:
        """The decision for every prefix tool that is active; ``min_chains`` overrides
        the policy for this call."""
        # the dead ends: fatal sequences in force, and failing calls reported with their
        # steps; a retired or lifted one no longer drives anything
        constraints = self._rules.sequences.in_force(("sequence", "call"))
        candidates = {t for c in constraints for t in c.prefix}
        records = self._records.get(candidates) if candidates else {}
        pinned = {i for i, r in records.items() if r.metadata.get("pinned")}
        return self._decide(constraints, set(records), pinned, min_chains)

    def _decide(
        self,
        constraints: list[ArchivedConstraint],
        tools: set[str],
        pinned: set[str],
        min_chains: int | None,
    ) -> list[ToolDecision]:
        sessions = self._state.sightings.chain_sessions()
        self._set_aside = self._runs_set_aside(constraints)
        self._backed = self._trusted_backed(constraints)
        return decide(
            constraints,
            tools,
            pinned,
            self._uses(list(tools)),
            self._journal.restored_at(),
            self._policy.min_chains if min_chains is None else min_chains,
            {cid: [(source_of(k), at) for k, at in met] for cid, met in sessions.items()},
            self._rules.standing.independent,
        )

    def _trusted_backed(self, constraints: Sequence[ArchivedConstraint]) -> set[str]:
        """The prefix tools of rules a trusted source stands behind."""
        standing = self._rules.standing
        return {
            t
            for c in constraints
            if any(standing.is_trusted(s) for s in c.sources or ("local",))
            for t in c.prefix
        }

    def _uses(self, tool_ids: list[str], db: Any = None) -> dict[str, int]:
        """The uses that may keep each tool from an eviction (read in ``db``'s
        transaction when given): against a rule a trusted source stands behind (an
        operator's dead end), only a trusted source's runs count, as only its
        contradictions would; an untrusted agent's completed runs, runs of unknown
        outcome and successes inside abandoned sessions keep nothing.  Against rules of
        untrusted sources alone every use counts: eviction is the drastic step, and one
        honest agent's success is reason enough to wait."""
        uses = self._state.uses.tool_uses(tool_ids, db, self._set_aside)
        standing = self._rules.standing
        for tool, n in uses.items():
            if n and tool in self._backed:
                uses[tool] = self._state.uses.uses_by_sessions(
                    tool, lambda key: standing.is_trusted(source_of(key)), db
                )
        return uses

    def _runs_set_aside(self, constraints: Sequence[ArchivedConstraint]) -> dict[str, set[str]]:
        """Per tool, the successful sessions that are no use of it: those whose
        contradiction of a rule driving it was ignored (no standing to contest the
        rule), so that a run which may not retire a rule cannot keep its tools from the
        eviction that rule drives either."""
        ignoring = [c for c in constraints if c.ignored_sources]
        if not ignoring:
            return {}
        against = self._state.uses.contradictions()
        out: dict[str, set[str]] = {}
        for c in ignoring:
            who = set(c.ignored_sources)
            runs = {k for k, _ in against.get(c.chain_id, ()) if source_of(k) in who}
            for tool in c.prefix:
                if tool != c.terminal and runs:
                    out.setdefault(tool, set()).update(runs)
        return out

    def unfounded(self) -> list[str]:
        """Evicted tools whose eviction the evidence no longer carries (its sessions
        forgotten, its rules lifted or retired): the decision, made again over them,
        keeps them."""
        evicted = set(self._journal.evicted())
        if not evicted:
            return []
        constraints = self._rules.sequences.in_force(("sequence", "call"))
        decisions = self._decide(constraints, evicted, set(), None)
        return sorted(evicted - {d.tool_id for d in decisions if d.action == "evict"})

    # ---- runs ---------------------------------------------------------------------
    def run(
        self,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        min_chains: int | None = None,
    ) -> EvictionReport:
        started = time.perf_counter()
        with self._lock():
            recovered = 0 if dry_run else self._recover_locked()
            decisions = self.decide(min_chains)
            evict = [d for d in decisions if d.action == "evict"]
            kept = tuple(d for d in decisions if d.action == "keep")
            tokenizer, count = self._count_tokens()
            reclaimed: dict[str, Any] = {"tools": 0, "schema_bytes": 0, "schema_tokens": 0}
            pointers: dict[str, str] = {}
            mandates = 0
            done = 0
            late: list[ToolDecision] = []
            if dry_run:
                mandates = self._mandates_for([d.tool_id for d in evict])
            for start in range(0, len(evict), self._policy.batch_size):
                batch = evict[start : start + self._policy.batch_size]
                moves = self._intents(batch)
                rows = [self._cold_row(m, count) for m in moves]
                if not dry_run:
                    written, new_mandates = self._steps.move(moves, rows, self._still_unused)
                    mandates += new_mandates
                    if len(written) < len(moves):
                        # usage committed since the decision: those tools stay
                        moved = {m.move_id for m in written}
                        rows = [r for r, m in zip(rows, moves, strict=True) if m.move_id in moved]
                        stay = {m.tool_id for m in moves if m.move_id not in moved}
                        late += [replace(d, action="keep", reason=LATE_USE)
                                 for d in batch if d.tool_id in stay]  # fmt: skip
                        moves = written
                    pointers.update({m.tool_id: make_pointer("tools", m.move_id) for m in moves})
                for row in rows:
                    reclaimed["tools"] += 1
                    reclaimed["schema_bytes"] += row["schema_bytes"]
                    reclaimed["schema_tokens"] += row["schema_tokens"]
                done += len(batch)
                if progress is not None:
                    progress(done, len(evict))
        reclaimed["tokenizer"] = tokenizer
        if late:
            stayed = {d.tool_id for d in late}
            evict = [d for d in evict if d.tool_id not in stayed]
            kept = (*kept, *late)
        return EvictionReport(
            dry_run,
            tuple(evict),
            kept,
            mandates,
            reclaimed,
            recovered,
            time.perf_counter() - started,
            pointers,
        )

    def _mandates_for(self, tool_ids: list[str]) -> int:
        """The mandates moving ``tool_ids`` writes, as a dry run counts them: one per
        credential reference they hold that no tool staying active holds (whichever
        batch releases it last: :meth:`~sidecar.eviction.journal.Journal.release`)."""
        refs = {c.ref for creds in self._state.credentials.of(tool_ids).values() for c in creds}
        if not refs:
            return 0
        return len(refs - self._state.credentials.held_beyond(refs, tool_ids))

    def _still_unused(self, db: Any, tool_ids: list[str]) -> set[str]:
        uses = self._uses(tool_ids, db)
        return {t for t in tool_ids if not uses.get(t)}

    def recover(self) -> int:
        """Finish every journaled move a crash interrupted; returns how many."""
        with self._lock():
            return self._recover_locked()

    def _recover_locked(self) -> int:
        moves = self._journal.unfinished()
        if moves:
            _, count = self._count_tokens()
            self._steps.complete(moves, [self._cold_row(m, count) for m in moves])
        return len(moves)

    # ---- the move protocol --------------------------------------------------------
    def _intents(self, batch: Sequence[ToolDecision]) -> list[Move]:
        ids = [d.tool_id for d in batch]
        records = self._records.get(ids)
        creds = self._state.credentials.of(ids)
        generations = self._journal.generations(ids)
        moves = []
        for d in batch:
            rec = records.get(d.tool_id)
            if rec is None:
                continue  # gone since the decision; nothing to move
            snapshot = {
                "document": rec.document,
                "metadata": dict(rec.metadata),
                "credentials": [c.to_dict() for c in creds.get(d.tool_id, [])],
                "decision": d.to_dict(),
            }
            mid = move_id(d.tool_id, d.chains, generations[d.tool_id])
            moves.append(Move(mid, d.tool_id, "intent", snapshot, d.chains))
        return moves

    def _cold_row(self, move: Move, count_tokens: Callable[[str], int]) -> dict[str, Any]:
        snap = move.snapshot
        meta = dict(snap["metadata"])
        schema = json.loads(str(meta.get("input_schema", "{}")))
        shown = json.dumps(
            {
                "name": move.tool_id,
                "description": meta.get("description", ""),
                "inputSchema": schema,
            }
        )
        now = datetime.now(UTC)
        return {
            "record_id": move.move_id,
            "archive_date": now.date().isoformat(),
            "evicted_at": now,
            "tool_id": move.tool_id,
            "tool_type": str(meta.get("tool_type", "unspecified")),
            "description": str(meta.get("description", "")),
            "document": snap["document"],
            "input_schema_json": json.dumps(schema, sort_keys=True),
            "metadata_json": json.dumps(meta, sort_keys=True),
            "credentials_json": json.dumps(snap["credentials"], sort_keys=True),
            "chain_ids": list(move.chain_ids),
            "decision_json": json.dumps(snap["decision"], sort_keys=True),
            "schema_bytes": len(shown.encode("utf-8")),
            "schema_tokens": int(count_tokens(shown)),
            "record_version": EVICTION_RECORD_VERSION,
        }

    # ---- restore: the move back ----------------------------------------------------
    def restore(
        self,
        tool_id: str,
        reason: str,
        lift: Callable[[Sequence[str]], list[str]],
    ) -> RestoreResult:
        """Bring an evicted tool back from its cold record into the hot index.

        ``lift`` stops enforcing the given chains and returns those it lifted (empty
        when the operator did not ask for it)."""
        with self._lock():
            evicted = self._journal.evicted().get(tool_id)
            if evicted is None:
                raise NotFound(f"{tool_id!r} is not an evicted tool")
            try:
                row = self._cold.get(evicted.move_id)
            except ColdStoreError:
                row = self._journal_record(evicted.move_id)
            metadata = json.loads(row["metadata_json"])
            metadata.pop(ID_KEY, None)
            record = IndexRecord(tool_id, row["document"], metadata)
            with self._hot_write():
                self._index().upsert([record])
                self._records.put([record])
            creds = [
                CredentialRef(c["ref"], tuple(c.get("scopes", ())), c.get("provider"),
                              c.get("revocation_endpoint"))
                for c in json.loads(row["credentials_json"])
            ]  # fmt: skip
            lifted = lift(list(row["chain_ids"]))
            self._journal.record_restore(evicted, reason, lifted, creds)
        return RestoreResult(tool_id, evicted.pointer, tuple(lifted))

    def _journal_record(self, move: str) -> dict[str, Any]:
        """The cold record of a move rebuilt from the journal's intent, when the cold
        file that held it was lost (quarantined): the intent captured the whole hot
        record before anything moved."""
        snap = self._journal.snapshot(move)
        if snap is None:
            raise NotFound(f"no record of move {move!r} in the cold store or the journal")
        return {
            "metadata_json": json.dumps(snap["snapshot"]["metadata"]),
            "document": snap["snapshot"]["document"],
            "credentials_json": json.dumps(snap["snapshot"]["credentials"]),
            "chain_ids": list(snap["chain_ids"]),
        }

    def _crash(self, point: str) -> None:
        assert point in CRASH_POINTS
        if self._crash_hook is not None:
            self._crash_hook(point)
        passed(point)
