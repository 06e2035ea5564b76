"""What the gateway asks of the failure memory: a narrow protocol and its values.

The gateway never reaches into the library; it calls these five methods from worker
threads (they may block on storage): the reads (``hidden_tools``, ``search``,
``check_views``) one at a time, and the writes (``sync_tools``, ``report_session``) one at
a time, a read and a write possibly at once, so that a slow write never delays another
session's check.  Any object with these methods serves: the adapter over
:class:`~sidecar.Sidecar` (:mod:`sidecar.agents.gateway.guard.library`), or a small in-memory
one the tests and benchmarks of the gateway use.

A backend whose checks are a few reads of its own memory, never storage, says so with a
true ``checks_in_memory`` attribute (:func:`checks_in_memory`): the gateway then asks
``hidden_tools`` and ``check_views`` on the event loop, which saves a worker-thread hop
(about 0.2-0.3 ms) on every call.  The library's adapter reads SQLite in a check and
keeps the hop.

A backend that keeps the review desk also has ``request_approval`` (the calls an
operator must approve: :mod:`sidecar.agents.gateway.guard.approval`) and ``appeal``
(:class:`AppealDesk`: an agent contests a block, with the gateway's own tool
``appeal_block``); one without them holds no call and lists no ``appeal_block``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from sidecar.memory import SessionOutcome, SessionRisk, Step
from sidecar.storage.review import Appeal

Decision = Literal["allow", "warn", "block"]
Outcome = SessionOutcome
__all__ = [
    "AppealDesk",
    "Decision",
    "GatewayBackend",
    "GuardReason",
    "GuardVerdict",
    "Hit",
    "Outcome",
    "Step",
    "SyncedTools",
    "checks_in_memory",
]


def checks_in_memory(backend: object) -> bool:
    """Whether ``backend`` answers its checks from memory (never blocking on storage)."""
    return getattr(backend, "checks_in_memory", False) is True


@dataclass(frozen=True)
class SyncedTools:
    """What a :meth:`GatewayBackend.sync_tools` call changed, by tool name."""

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    gone: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hit:
    tool_id: str
    score: float
    description: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class GuardReason:
    """Why a call is warned about or blocked: the rule, the evidence behind it, and where
    the full record lives (a cold storage pointer, when there is one)."""

    rule: str
    explanation: str
    evidence: str
    pointer: str | None = None
    rule_id: str = ""
    """A stable id of the rule (a constraint id), for budgets kept per rule."""
    quoted: dict[str, str] = field(default_factory=dict, hash=False)
    """Free text of the rule's evidence the asking agent may read (its failure message),
    shown as data (:mod:`sidecar.rules.wording`); empty else."""


@dataclass(frozen=True)
class GuardVerdict:
    decision: Decision
    reasons: tuple[GuardReason, ...] = field(default_factory=tuple)
    risk: SessionRisk | None = None
    """The session's risk of ending abandoned, as the memory answered it."""

    @classmethod
    def allow(cls) -> GuardVerdict:
        return cls("allow")


@runtime_checkable
class GatewayBackend(Protocol):
    def sync_tools(self, source: str, tools: list[dict[str, Any]]) -> SyncedTools:
        """Make ``source``'s tools in the hot index exactly ``tools`` (MCP ``Tool`` dicts:
        ``name``, ``description``, ``inputSchema``): new ones added, changed ones
        re-embedded, missing ones marked gone."""
        ...

    def hidden_tools(self) -> set[str]:
        """Tools that must never be listed or called (evicted)."""
        ...

    def search(self, query: str, k: int, steps: list[Step], viewer: str | None = None) -> list[Hit]:
        """Up to ``k`` tools for ``query`` after the session's ``steps``; withheld tools
        are absent; warnings worded for ``viewer`` (an agent token's name; ``None``: an
        operator)."""
        ...

    def check_views(
        self,
        views: Sequence[tuple[list[Step], str]],
        arguments: dict[str, Any],
        viewer: str | None = None,
    ) -> GuardVerdict:
        """Whether a call with ``arguments`` should run, seen as each of ``views`` (the
        steps before it as a link reads the session, the tool under one of its names):
        one verdict, decided by the memory, its reasons worded for ``viewer``."""
        ...

    def report_session(
        self,
        session_id: str,
        steps: list[Step],
        outcome: Outcome,
        task_input: str | None,
        source: str = "",
        context_known: bool = True,
    ) -> None:
        """Take a session's steps as evidence (when it ended, or when one of its calls
        failed: sent again longer, only its new steps count); ``source``: the named
        token its calls came with (``""``: the home's token, or none);
        ``context_known`` ``False``: one call nothing tied to others."""
        ...


@runtime_checkable
class AppealDesk(Protocol):
    def appeal(
        self,
        tool: str,
        arguments: dict[str, Any],
        reason: str,
        constraint_ids: Sequence[str],
        principal: str,
    ) -> Appeal:
        """File an appeal against the block of a call of ``tool`` with ``arguments``,
        for the agent ``principal`` (the calling link's: its token's name); raises the
        library's errors (:class:`~sidecar.errors.InvalidInput`,
        :class:`~sidecar.errors.RateLimited` past a source's open appeals)."""
        ...
