"""Request bodies of the HTTP API.  Their limits come from :mod:`sidecar.limits`, the
same ones the library enforces, so a body the schema accepts is one the library can
judge (and answer 400 with the reason), and one it refuses is refused with 422."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sidecar.limits import (
    MAX_CONTEXT,
    MAX_K,
    MAX_MIN_CHAINS,
    MAX_PLAN,
    MAX_QUERY,
    MAX_REASON,
    MAX_REPORTS_PER_REQUEST,
    MAX_STEPS,
    MAX_TEXT,
    MAX_TOOLS_PER_REQUEST,
    CheckMode,
)

Scalar = str | int | float | bool | None


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolsIn(Body):
    tools: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_TOOLS_PER_REQUEST)


class StepIn(Body):
    """One call of the session so far."""

    tool: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)
    output: Any = None
    error: str | None = None


class NextIn(Body):
    """The call about to be made."""

    tool: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)


class SearchIn(Body):
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    k: int = Field(5, ge=1, le=MAX_K)
    after: list[str] = Field(default_factory=list, max_length=MAX_PLAN)
    context: dict[str, Scalar] = Field(default_factory=dict, max_length=MAX_CONTEXT)
    steps: list[StepIn] | None = Field(
        default=None,
        max_length=MAX_STEPS,
        description="the session so far; stands for `after` and adds call-level warnings",
    )
    task_input: str | None = Field(default=None, max_length=MAX_TEXT)
    viewer: str | None = Field(
        default=None,
        max_length=64,
        description="operators only: word the answer for this agent token, as it would "
        "be worded for it (a gateway in front of agents asks so); an agent's answer is "
        "always worded for itself",
    )
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the session this is for (as its reports name it): the answer is kept "
        "in the decision log under it, for operators to read (the console's session page)",
    )


class ReportsIn(Body):
    reports: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_REPORTS_PER_REQUEST)
    source: str | None = Field(
        default=None,
        max_length=64,
        description="operators only: the source the reports are attributed to (e.g. "
        "'gateway', for what an MCP gateway observed); by default the token's name",
    )


class SyncIn(Body):
    source: str = Field(min_length=1, max_length=64)
    tools: list[dict[str, Any]] = Field(max_length=MAX_TOOLS_PER_REQUEST)


class CheckIn(Body):
    """A plan (``plan``: tool ids), or a call before it is made (``steps`` so far and
    ``next``).  A steps file as ``python -m benchmarks.tau2 steps`` writes it is such a
    body as it stands."""

    plan: list[str] | None = Field(default=None, max_length=MAX_PLAN)
    mode: CheckMode = "sequence"
    context: dict[str, Scalar] = Field(default_factory=dict, max_length=MAX_CONTEXT)
    steps: list[StepIn] | None = Field(default=None, max_length=MAX_STEPS)
    next: NextIn | None = None
    task_input: str | None = Field(default=None, max_length=MAX_TEXT)
    what_happened: str | None = Field(
        default=None,
        max_length=MAX_TEXT,
        description="what the call really did, in a session replayed from a record; for "
        "the reader only: the check never reads it",
    )
    viewer: str | None = Field(
        default=None,
        max_length=64,
        description="operators only: word the answer for this agent token, as it would "
        "be worded for it (a gateway in front of agents asks so); an agent's answer is "
        "always worded for itself",
    )
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the session this is for (as its reports name it): the answer is kept "
        "in the decision log under it, for operators to read (the console's session page)",
    )


class EvictIn(Body):
    dry_run: bool = False
    min_chains: int | None = Field(
        default=None,
        ge=1,
        le=MAX_MIN_CHAINS,
        strict=True,
        description="overrides SIDECAR_EVICT_MIN_CHAINS",
    )


class RestoreIn(Body):
    reason: str = Field(min_length=1, max_length=MAX_REASON)
    lift_constraints: bool = False


class ReasonIn(Body):
    reason: str = Field(min_length=1, max_length=MAX_REASON)


class MaintainIn(Body):
    retention_hours: float | None = Field(
        default=None,
        ge=1,
        le=1e6,
        description="delete unreferenced files only once this old (default a week)",
    )


class ForgetIn(Body):
    since: float | None = Field(
        default=None, ge=0, description="forget only what arrived since (a Unix time)"
    )


class ApprovalIn(Body):
    tool: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)
    why: str = Field(default="", max_length=MAX_TEXT)
    source: str | None = Field(
        default=None,
        max_length=64,
        description="operators only: the source the call is held for (a gateway asks for "
        "the agent whose call it holds); by default the token's name",
    )


class ApproveIn(Body):
    for_s: float | None = Field(
        default=None,
        gt=0,
        description="approve every such call for this many seconds (default: this one call)",
    )


class AppealIn(Body):
    tool: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)
    reason: str = Field(min_length=1, max_length=MAX_TEXT)
    constraint_ids: list[str] = Field(default_factory=list, max_length=16)
    source: str | None = Field(
        default=None, max_length=64, description="operators only: the agent that appeals"
    )


class CloseAppealIn(Body):
    granted: bool


class NotedCallIn(Body):
    """A call a gateway relayed and what it decided (``kind`` ``call``), or a lookup it
    answered and the tools it offered (``lookup``)."""

    kind: Literal["call", "lookup"] = "call"
    tool: str | None = Field(default=None, min_length=1, max_length=128)
    decision: str | None = Field(default=None, min_length=1, max_length=16)
    query: str | None = Field(default=None, min_length=1, max_length=MAX_QUERY)
    offered: list[str] = Field(default_factory=list, max_length=100)
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)
    reasons: list[dict[str, Any]] = Field(default_factory=list, max_length=20)


class DecisionsIn(Body):
    calls: list[NotedCallIn] = Field(min_length=1, max_length=1000)
    source: str | None = Field(
        default=None,
        max_length=80,
        description="the source the calls are attributed to (a gateway names its agent's, "
        "`gateway:<name>`); the caller's own when not given",
    )
