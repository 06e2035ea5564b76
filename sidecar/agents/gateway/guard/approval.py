"""Calls the gateway holds until a person approves them: the gateway owns the approval,
and never asks the client (whose elicitation a client may answer for itself).

Which calls (:class:`ApprovalPolicy`, off by default): ``destructive``, tools their
upstream annotates ``destructiveHint: true`` (the specification's default for a tool
that says nothing is not taken: only an explicit annotation holds a call); ``warned``,
calls the memory would warn about (held instead of forwarded with the warning); and
tools named one by one.  The policy comes after the verdict: a blocked call is refused
as ever, never offered for approval.

A held call asks the library (:meth:`~sidecar.core.Sidecar.request_approval`) for the
approval of exactly that call: the same tool, the same arguments (by hash), the same
agent.  Until an operator approves it (``sidecar approvals approve ID``, the console, or
``POST /v1/approvals/{id}/approve``) the client gets an ``isError`` result naming the
approval and saying to retry; with ``wait_s`` the gateway first waits that long for a
decision.  An approval given once lets one call through; one given for a time, every
such call until then.  A denied call is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from sidecar.agents.gateway.guard import answers
from sidecar.agents.gateway.guard.backend import GuardVerdict

if TYPE_CHECKING:
    from mcp.types import CallToolResult, Tool

Trigger = Literal["destructive", "warned"]
TRIGGERS: tuple[Trigger, ...] = ("destructive", "warned")
POLL_S = 0.5
"""How often a waiting call asks again whether it was decided."""


class Ticket(Protocol):
    """What the gateway reads of an approval."""

    approval_id: str
    status: str


@dataclass(frozen=True)
class ApprovalPolicy:
    triggers: frozenset[Trigger] = frozenset()
    tools: frozenset[str] = frozenset()
    """Tools always held (their names as the gateway exposes them, or upstream names)."""
    wait_s: float = 0.0
    """How long a held call waits for a decision before it is answered (0: at once)."""

    def __post_init__(self) -> None:
        unknown = set(self.triggers) - set(TRIGGERS)
        if unknown:
            raise ValueError(f"approval triggers are {', '.join(TRIGGERS)}; not {unknown}")
        if not 0 <= self.wait_s <= 3_600:
            raise ValueError("wait_s must be from 0 to 3600")

    @property
    def active(self) -> bool:
        return bool(self.triggers or self.tools)

    def why(self, names: set[str], tool: Tool | None, verdict: GuardVerdict) -> str | None:
        """Why this call is held (``None``: it is not)."""
        if names & self.tools:
            return "the operator holds every call of this tool for approval"
        hints = None if tool is None else tool.annotations
        if "destructive" in self.triggers and hints is not None and hints.destructive_hint:
            return "the tool is annotated destructive"
        if "warned" in self.triggers and verdict.decision == "warn":
            rules = "; ".join(r.rule for r in verdict.reasons)
            return f"the memory warns about this call ({rules})"[:2_000]
        return None


Ask = Callable[[str, dict[str, Any], str], Ticket]
"""The library's ``request_approval`` for one call: tool, arguments, why."""


async def held(
    policy: ApprovalPolicy, ask: Ask, name: str, arguments: dict[str, Any], why: str
) -> CallToolResult | None:
    """``None`` when the call may run now; else the answer to a call held or denied."""
    ticket = await anyio.to_thread.run_sync(ask, name, arguments, why)
    with anyio.move_on_after(policy.wait_s):
        while ticket.status == "pending" and policy.wait_s > 0:
            await anyio.sleep(POLL_S)
            ticket = await anyio.to_thread.run_sync(ask, name, arguments, why)
    if ticket.status == "approved":
        return None
    return answers.error(_held_text(name, arguments, ticket, why))


def _held_text(name: str, arguments: dict[str, Any], ticket: Ticket, why: str) -> str:
    shown = json.dumps(arguments, ensure_ascii=False, default=str)[:300]
    if ticket.status == "denied":
        return (
            f"Refused: {name} was not run: an operator denied this call "
            f"(approval {ticket.approval_id}). Do not retry it with these arguments."
        )
    return (
        f"Held for approval: {name} was not run, because {why}. An operator must approve "
        f"this exact call (approval {ticket.approval_id}, arguments {shown}); retry it "
        "once approved, with the same arguments (a call with other arguments is another "
        "approval)."
    )


def parse_triggers(text: str) -> frozenset[Trigger]:
    words = {w.strip() for w in text.split(",") if w.strip()}
    unknown = words - set(TRIGGERS)
    if unknown:
        raise ValueError(f"approval triggers are {', '.join(TRIGGERS)}; not {sorted(unknown)}")
    return frozenset(w for w in TRIGGERS if w in words)


def tool_names(text: str) -> frozenset[str]:
    return frozenset(w.strip() for w in text.split(",") if w.strip())
