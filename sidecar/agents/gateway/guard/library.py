"""The gateway's backend over the library: what :class:`~sidecar.agents.gateway.guard.backend.
GatewayBackend` asks, answered by a :class:`~sidecar.core.Sidecar` in this process, or by
a running sidecar over HTTP (:class:`~sidecar.shells.client.RemoteSidecar`: a gateway beside
``sidecar serve`` on the same home, so that its evidence reaches the one memory).  It
uses their public methods and nothing else: the gateway is a shell like the HTTP API."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sidecar.agents.gateway.guard.backend import (
    GuardReason,
    GuardVerdict,
    Hit,
    Outcome,
    Step,
    SyncedTools,
)
from sidecar.agents.gateway.guard.linking import token_name
from sidecar.agents.sink import step_report
from sidecar.errors import InvalidInput, SidecarError
from sidecar.model import CallCheck, IntakeResult, LookupResult, Tool
from sidecar.rules.verdict import merged
from sidecar.storage.review import Appeal, Approval
from sidecar.tools.catalog import parse_tool
from sidecar.tools.records import SyncResult as LibrarySync
from sidecar.trust.principals import GATEWAY

log = logging.getLogger("sidecar.agents.gateway")


class Memory(Protocol):
    """What the backend uses of :class:`~sidecar.core.Sidecar` (and of
    :class:`~sidecar.shells.client.RemoteSidecar`, which has the same methods over HTTP)."""

    def sync_tools(self, source: str, tools: Sequence[Tool]) -> LibrarySync: ...

    def hidden_tools(self) -> set[str]: ...

    def search(
        self, query: str, k: int = 5, *, steps: Any = None, viewer: str | None = None
    ) -> LookupResult: ...

    def check_call(
        self,
        steps: Any,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        viewer: str | None = None,
    ) -> CallCheck: ...

    def report_many(self, reports: Iterable[Any], *, source: str) -> list[IntakeResult]: ...

    def request_approval(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        source: str = ...,
        why: str = "",
    ) -> Approval: ...

    def note_calls(self, calls: Sequence[Mapping[str, Any]], source: str = ...) -> int: ...

    def appeal(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        reason: str = "",
        constraint_ids: Sequence[str] = (),
        *,
        source: str = ...,
    ) -> Appeal: ...


class LibraryBackend:
    def __init__(self, sc: Memory, source: str = GATEWAY) -> None:
        """``source``: who the sessions it reports are attributed to."""
        self.sc = sc
        self.source = source

    def sync_tools(self, source: str, tools: list[dict[str, Any]]) -> SyncedTools:
        """A tool the hot index refuses (an oversized schema, a secret in a default...) is
        left out with a warning: the gateway still lists and guards it, and one odd tool
        never stops the sync of the others."""
        taken: dict[str, Tool] = {}
        for item in tools:
            try:
                tool = parse_tool(item)
            except InvalidInput as exc:
                log.warning(
                    '{"event": "tool_not_indexed", "upstream": %s, "tool": %s, "why": %s}',
                    json.dumps(source),
                    json.dumps(str(item.get("name", ""))[:200]),
                    json.dumps(str(exc)[:300]),
                )
                continue
            taken[tool.tool_id] = tool
        result = self.sc.sync_tools(source, list(taken.values()))
        return SyncedTools(result.added, result.updated, result.gone)

    def hidden_tools(self) -> set[str]:
        return self.sc.hidden_tools()

    def search(self, query: str, k: int, steps: list[Step], viewer: str | None = None) -> list[Hit]:
        result = self.sc.search(query, k, steps=steps, viewer=viewer)
        return [Hit(h.tool_id, h.score, h.description, h.warnings) for h in result.hits]

    def check_views(
        self,
        views: Sequence[tuple[list[Step], str]],
        arguments: dict[str, Any],
        viewer: str | None = None,
    ) -> GuardVerdict:
        checks = [
            self.sc.check_call(steps, tool, arguments, viewer=viewer) for steps, tool in views
        ]
        verdict = merged(checks)  # decided where every check is, never here
        return GuardVerdict(
            verdict.decision,
            tuple(
                GuardReason(
                    rule=f"{r.kind} constraint {r.constraint_id} ({r.status})",
                    explanation=r.explanation,
                    evidence=r.evidence,
                    pointer=r.pointer,
                    rule_id=r.constraint_id,
                    quoted=dict(r.quoted),
                )
                for r in verdict.reasons
            ),
            verdict.risk,
        )

    def report_session(
        self,
        session_id: str,
        steps: list[Step],
        outcome: Outcome,
        task_input: str | None,
        source: str = "",
        context_known: bool = True,
    ) -> None:
        """A session of a named token's calls is that token's, as the gateway observed
        it (``gateway:<name>``: trusted only when the token is, since the agent chose
        the calls and declared the outcome); the home's token's are the backend's
        ``source``."""
        report = step_report(session_id, steps, outcome, task_input, context_known)
        who = f"{GATEWAY}:{source}" if source else self.source
        (result,) = self.sc.report_many([report], source=who)
        if result.status == "rejected":
            raise SidecarError(f"session {session_id} was not taken: {result.reason}")

    def note_calls(self, calls: list[dict[str, Any]], principal: str) -> None:
        """What was decided for calls the gateway relayed, into the decision log, for
        the agent whose calls they are (as its sessions are reported)."""
        name = token_name(principal)
        self.sc.note_calls(calls, source=f"{GATEWAY}:{name}" if name else self.source)

    def request_approval(
        self, tool: str, arguments: dict[str, Any], principal: str, why: str
    ) -> Approval:
        """The approval of one held call (:mod:`sidecar.agents.gateway.guard.approval`),
        asked for the agent whose call it is."""
        return self.sc.request_approval(tool, arguments, source=self._agent(principal), why=why)

    def appeal(
        self,
        tool: str,
        arguments: dict[str, Any],
        reason: str,
        constraint_ids: Sequence[str],
        principal: str,
    ) -> Appeal:
        """An appeal against a block (the gateway's ``appeal_block``), filed for the agent
        whose link called it, as its approvals are."""
        return self.sc.appeal(
            tool, arguments, reason, constraint_ids, source=self._agent(principal)
        )

    def _agent(self, principal: str) -> str:
        """Whom a link's approvals and appeals are attributed to: ``gateway:<name>`` for
        a named token, the backend's ``source`` for the home's token (or none)."""
        name = token_name(principal)
        return f"{GATEWAY}:{name}" if name else self.source
