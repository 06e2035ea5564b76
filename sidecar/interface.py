"""The one interface a sidecar offers, in this process (:class:`~sidecar.core.Sidecar`) or
over HTTP (:class:`~sidecar.shells.client.RemoteSidecar`): what a caller may write
against either.  Each implementation may take more (a local home's ``source`` and
``role``, a revoker), never less; mypy holds both to it (``_implementations``) and
``tests/sidecar/test_interface.py`` runs the same calls against both.  Each method is an
operation declared in :mod:`sidecar.shells.operations` (with its route, command and
tool); ``tests/sidecar/test_operations.py`` fails on a method declared in neither or
one alone."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sidecar.limits import INTAKE_CHUNK

if TYPE_CHECKING:
    from sidecar.eviction import EvictionReport, Mandate, RestoreResult, ToolDecision
    from sidecar.memory import Step
    from sidecar.model import (
        CallCheck,
        ChainReport,
        CheckMode,
        CheckResult,
        IntakeResult,
        LookupResult,
        StepReport,
        Tool,
    )
    from sidecar.results import (
        Activity,
        ArchiveMaintenance,
        ArchiveStatus,
        AuditRecord,
        ConstraintChange,
        ConstraintView,
        Digest,
        Forgotten,
        Health,
        Recovered,
        RevocationRun,
        SessionActivity,
        ToolHistory,
    )
    from sidecar.storage.review import Appeal, Approval
    from sidecar.tools import AddToolsResult, SyncResult
    from sidecar.tools.paging import ToolPage


class SidecarAPI(Protocol):
    def add_tools(
        self, tools: Sequence[Tool], progress: Callable[[int], None] | None = None
    ) -> AddToolsResult: ...

    def audit(self, pointer: str, viewer: str | None = None) -> AuditRecord: ...

    def check(
        self,
        plan: Sequence[str],
        mode: CheckMode = "sequence",
        context: Mapping[str, Any] | None = None,
        viewer: str | None = None,
    ) -> CheckResult: ...

    def check_call(
        self,
        steps: Sequence[Step | Mapping[str, Any]],
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        task_input: str | None = None,
        context: Mapping[str, Any] | None = None,
        viewer: str | None = None,
        session_id: str | None = None,
    ) -> CallCheck: ...

    def close(self) -> None: ...

    def constraint(self, constraint_id: str, viewer: str | None = None) -> ConstraintView: ...

    def constraints(
        self, include_lifted: bool = False, viewer: str | None = None
    ) -> list[ConstraintView]: ...

    def decide(self, min_chains: int | None = None) -> list[ToolDecision]: ...

    def digest(self) -> Digest: ...

    def evict(
        self,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        min_chains: int | None = None,
    ) -> EvictionReport: ...

    def forget(self, source: str, since: float | None = None) -> Forgotten: ...

    def health(self) -> Health: ...

    def hidden_tools(self) -> set[str]: ...

    def lift(self, constraint_id: str, reason: str) -> ConstraintChange: ...

    def list_tools(self) -> list[Tool]: ...

    def list_tools_page(self, cursor: str | None = None, limit: int = 100) -> ToolPage: ...

    def maintain_archive(self, retention_hours: float | None = None) -> ArchiveMaintenance: ...

    def mandates(self, status: str | None = None) -> list[Mandate]: ...

    def recover(self) -> Recovered: ...

    def reinstate(self, constraint_id: str, reason: str) -> ConstraintChange: ...

    def confirm(self, constraint_id: str, reason: str) -> ConstraintChange: ...

    def retire(self, constraint_id: str, reason: str) -> ConstraintChange: ...

    def report(self, report: ChainReport | StepReport | Mapping[str, Any]) -> IntakeResult: ...

    def report_many(
        self,
        reports: Iterable[ChainReport | StepReport | Mapping[str, Any]],
        chunk: int = INTAKE_CHUNK,
        progress: Callable[[int], None] | None = None,
        source: str = "local",
    ) -> list[IntakeResult]: ...

    def restore(
        self, tool_id: str, reason: str, lift_constraints: bool = False
    ) -> RestoreResult: ...

    def run_revocations(self) -> RevocationRun: ...

    def tool_history(self, tool_id: str) -> ToolHistory: ...

    def search(
        self,
        query: str,
        k: int = 5,
        after: Sequence[str] = (),
        context: Mapping[str, Any] | None = None,
        steps: Sequence[Step | Mapping[str, Any]] | None = None,
        task_input: str | None = None,
        viewer: str | None = None,
        session_id: str | None = None,
    ) -> LookupResult: ...

    def status(self, verify: bool = False) -> ArchiveStatus: ...

    def sync_tools(self, source: str, tools: Sequence[Tool]) -> SyncResult: ...

    def request_approval(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        source: str = "local",
        why: str = "",
    ) -> Approval: ...

    def approvals(self, status: str | None = None, limit: int = 100) -> list[Approval]: ...

    def approve(
        self, approval_id: str, for_s: float | None = None, *, by: str = "local"
    ) -> Approval: ...

    def deny(self, approval_id: str, *, by: str = "local") -> Approval: ...

    def appeal(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        reason: str = "",
        constraint_ids: Sequence[str] = (),
        *,
        source: str = "local",
    ) -> Appeal: ...

    def appeals(self, status: str | None = None, limit: int = 100) -> list[Appeal]: ...

    def note_calls(self, calls: Sequence[Mapping[str, Any]], source: str = "local") -> int: ...

    def activity(self, hours: int = 48) -> Activity: ...

    def session_activity(self, session_key: str, limit: int = 500) -> SessionActivity: ...

    def close_appeal(self, appeal_id: str, granted: bool, *, by: str = "local") -> Appeal: ...


if TYPE_CHECKING:
    from sidecar.core import Sidecar
    from sidecar.shells.client import RemoteSidecar

    def _implementations(local: Sidecar, remote: RemoteSidecar) -> list[SidecarAPI]:
        # mypy checks each against the interface: a method missing, or narrower than
        # declared, on either fails the type check
        return [local, remote]
