"""The archive as an operator reads and keeps it: the record behind a pointer, the seed's
digest, the archive's status, and its maintenance."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cold_store import RecordNotFound, RecordQuarantined, make_pointer, parse_pointer
from cold_store.delta import DEFAULT_VACUUM_RETENTION, MIN_VACUUM_RETENTION
from cold_store.store import ColdStore
from sidecar import validate
from sidecar.archive import chains
from sidecar.errors import EmptyArchive, Forbidden, NotFound
from sidecar.eviction import Journal
from sidecar.eviction.recovery import Recovery
from sidecar.results import (
    ArchiveMaintenance,
    ArchiveStatus,
    AuditRecord,
    Digest,
    MaintenanceStep,
    QuarantinedView,
)
from sidecar.rules import Rules
from sidecar.rules.standing import source_of
from sidecar.rules.wording import OPERATOR, Viewer
from sidecar.storage.state import State
from sidecar.tools import ToolRecords


class Archive:
    def __init__(
        self,
        cold: ColdStore,
        state: State,
        journal: Journal,
        rules: Rules,
        records: ToolRecords,
        recovery: Recovery,
    ) -> None:
        self._cold = cold
        self._state = state
        self._journal = journal
        self._rules = rules
        self._records = records
        self._recovery = recovery

    def audit(self, pointer: str, viewer: Viewer = OPERATOR) -> AuditRecord:
        """The full cold record behind a chain or tool pointer, JSON columns decoded.
        ``cold://tools/<tool_id>`` names an evicted tool's latest record.  An agent
        (``viewer``) reads the records of its own sessions alone: a chain every session
        of which was its own; tools' records are the operators'."""
        table, key = parse_pointer(pointer)
        if not viewer.operator:
            self._own(table, key, viewer)
        if table == "tools":
            return self._audit_tool(key, pointer)
        try:
            row = self._cold.resolve(pointer)
        except RecordNotFound as exc:
            waiting = self._state.pending.get(key)
            if waiting is None:
                raise NotFound(f"nothing archived at {pointer}") from exc
            view = chains.audit_view(waiting, pointer)
            view["published"] = False  # acknowledged, on its way to the archive
            return AuditRecord(view)
        return AuditRecord(chains.audit_view(row, pointer))

    def _own(self, table: str, key: str, viewer: Viewer) -> None:
        sessions = self._state.sightings.sessions_behind(key) if table == "chains" else []
        sources = {source_of(s) for s in sessions}
        if not self._rules.reading(viewer).owns(sources):
            raise Forbidden(
                f"an agent token reads the archive's records of its own sessions only; "
                f"{viewer.name!r} holds an agent token"
            )

    def _audit_tool(self, key: str, pointer: str) -> AuditRecord:
        """An evicted tool's record, by its move's id or by the tool's id (evicted now, or
        since restored), with its restores and the name variants added since.  When its
        cold file was lost (quarantined), or its move has not reached the cold store yet,
        the journal's intent stands in: it captured the whole hot record before anything
        moved."""
        move: str | None = key
        if not self._cold.tools.contains(key) and self._journal.snapshot(key) is None:
            evicted = self._journal.evicted().get(key)
            move = evicted.move_id if evicted is not None else self._journal.latest_move(key)
        if move is None:
            raise NotFound(f"nothing archived at {pointer}")
        shown = make_pointer("tools", move)
        try:
            view = chains.audit_view(self._cold.tools.get(move), shown)
        except RecordNotFound as exc:
            waiting = self._state.pending.get(move)
            if waiting is not None:
                view = chains.audit_view(waiting, shown)
                view["published"] = False  # acknowledged, on its way to the archive
            else:
                view = self._intent(move, shown, exc, pointer)
        except RecordQuarantined as exc:
            view = self._intent(move, shown, exc, pointer)
        view["restores"] = self._journal.restores(view["tool_id"])
        view["variants_added"] = self._rules.sequences.events(move, "variant_added")
        return AuditRecord(view)

    def _intent(self, move: str, shown: str, exc: Exception, pointer: str) -> dict[str, Any]:
        """The journal's intent of a move, when its cold record cannot be read."""
        intent = self._journal.snapshot(move)
        if intent is None:
            if isinstance(exc, RecordNotFound):
                raise NotFound(f"nothing archived at {pointer}") from exc
            raise exc
        return chains.intent_view(intent, move, shown, str(exc))

    def digest(self) -> Digest:
        # what is acknowledged counts, published or not: pending is read first, so a
        # record published meanwhile is found in the table (and counted once)
        rows = {r["chain_id"]: r for r in self._state.pending.rows("chains")}
        columns = ["chain_id", "topology", "terminal_signature"]
        rows.update((r["chain_id"], r) for r in self._cold.chains.scan(columns))
        entries = [
            chains.digest_entry(r["topology"], r["terminal_signature"]) for r in rows.values()
        ]
        if not entries:
            raise EmptyArchive()
        return Digest(chains.archive_digest(entries), len(entries), self.unreadable_chains())

    def unreadable_chains(self) -> int:
        waiting = self._state.pending.count("chains")  # acknowledged, not unreadable
        return max(0, self._state.sequences.count() - self._cold.chains.count() - waiting)

    def maintain(self, retention_hours: float | None = None) -> ArchiveMaintenance:
        """Compact, checkpoint and vacuum the cold tables, one process at a time across
        every replica (an advisory lock; a second run gets ``Busy``).  Vacuum deletes
        only files no commit names that are older than ``retention_hours`` (default a
        week, never under an hour), so a writer between writing a data file and
        committing it, or a reader still holding a compacted-away file, never loses it."""
        retention: timedelta = validate.retention(
            retention_hours, DEFAULT_VACUUM_RETENTION, MIN_VACUUM_RETENTION
        )
        steps: list[MaintenanceStep] = []
        with self._state.lock("archive", "archive maintenance"):
            for name, run in (
                ("compact", self._cold.compact),
                ("checkpoint", self._cold.checkpoint),
                ("vacuum", lambda: self._cold.vacuum(retention)),
            ):
                steps += [
                    MaintenanceStep(m.table, name, m.files_added, m.files_removed, m.version)
                    for m in run()
                ]
        return ArchiveMaintenance(
            self._cold.backend, tuple(steps), retention.total_seconds() / 3600
        )

    def status(self, verify: bool = False) -> ArchiveStatus:
        """Counts, quarantined and damaged files, and health.  Every cold file's footer
        is read first, so that a torn file is counted as unreadable now rather than when
        one of its records is next read; every file's size is checked against what was
        published, and with ``verify`` its checksum too."""
        self._cold.check_footers()
        return ArchiveStatus(
            chains=self._cold.chains.count(),
            active_constraints=len(self._rules.matcher()),
            evicted_tools=len(self._journal.evicted()),
            quarantined=tuple(
                QuarantinedView(q.name, str(q.path), q.reason) for q in self._cold.quarantined()
            ),
            unreadable_chains=self.unreadable_chains(),
            active_tools=self._records.count(),
            unfinished_moves=len(self._journal.unfinished()),
            degraded=self._recovery.degraded,
            damaged=tuple(
                QuarantinedView(q.name, str(q.path), q.reason) for q in self._cold.verify(verify)
            ),
            call_conditions=self._rules.enforced_count(),
            ignored_contradictions=self._rules.ignored_contradictions(),
            pending_records=self._state.pending.count(),
        )
