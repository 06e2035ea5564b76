"""The MCP shell: lookup, plan checks, reports and audit for agents; forgetting a source
for operators.

Every tool calls the same :class:`~sidecar.core.Sidecar` methods as the CLI and the HTTP
API; its description and the role it needs are the ones :mod:`sidecar.shells.operations`
declares for it.  Served over streamable HTTP inside the HTTP app (``/mcp``) or over stdio
(``sidecar mcp``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from sidecar.errors import SidecarError
from sidecar.limits import CheckMode
from sidecar.shells.mcp_arguments import JsonObject, Next, Report, Steps, steps_of
from sidecar.shells.operations import admits, of_tool, strictest, tool_description
from sidecar.trust.principals import THE_PROCESS, Principal, principal_of
from sidecar.trust.redact import redact_text
from sidecar.wire import dump_dict

if TYPE_CHECKING:
    from mcp.server.mcpserver.tools import Tool as RegisteredTool

    from sidecar.core import Sidecar
    from sidecar.shells.client import RemoteSidecar

INSTRUCTIONS = (
    "Failure memory for tool selection. Call search_tools with what you have already "
    "executed (`steps` or `after`) and runtime facts (`context`): it never returns a "
    "tool that would complete a known-fatal chain, and says what it withheld. Call "
    "check_plan with `steps` and `next` before a call: a block means the same call "
    "failed before in the same state. Report each session with report_chain so no "
    "successor repeats its failures."
)


def caller(ctx: Context) -> Principal:
    """Who calls: over HTTP the caller's token; over stdio, this process."""
    try:
        request = ctx.request_context.request
    except ValueError:
        request = None  # called outside a transport's request (in the same process)
    return principal_of(getattr(request, "scope", None)) or THE_PROCESS


def viewer(ctx: Context) -> str | None:
    """Whom an answer is worded for: the calling agent's token (``None``: an operator,
    or this process; beside a server, the server words it for this client's token)."""
    who = caller(ctx)
    return None if who.operator else who.name


def build_mcp(sc: Sidecar | RemoteSidecar) -> MCPServer:
    """An MCP server whose tools call ``sc``: the library, or a running sidecar over HTTP
    (``sidecar mcp`` beside a server)."""
    server = MCPServer(name="tool-chain-sidecar", instructions=INSTRUCTIONS, log_level="WARNING")
    _lookup_tools(server, sc)
    _report_tools(server, sc)
    _review_tools(server, sc)
    return server


def _answer(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        return dump_dict(fn())
    except SidecarError as exc:
        # a clear, redacted message for the agent; the MCP layer marks it an error
        raise ToolError(f"{exc.code}: {redact_text(str(exc))}") from None


def _lookup_tools(server: MCPServer, sc: Sidecar | RemoteSidecar) -> None:
    @server.tool(
        title="Search tools",
        description=tool_description("search_tools"),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def search_tools(
        query: str,
        ctx: Context,
        k: int = 5,
        after: list[str] | None = None,
        context: JsonObject | None = None,
        steps: Steps = None,
        task_input: str | None = None,
    ) -> dict[str, Any]:
        session, shown_to = None if steps is None else steps_of(steps), viewer(ctx)
        return _answer(
            lambda: sc.search(query, k, after or [], context, session, task_input, shown_to)
        )

    @server.tool(
        title="Check plan",
        description=tool_description("check_plan"),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def check_plan(
        ctx: Context,
        plan: list[str] | None = None,
        mode: CheckMode = "sequence",
        context: JsonObject | None = None,
        steps: Steps = None,
        next: Next = None,
        task_input: str | None = None,
    ) -> dict[str, Any]:
        shown_to = viewer(ctx)
        if next is not None:
            call = (steps_of(steps), next.tool, next.arguments or {}, task_input, context)
            return _answer(lambda: sc.check_call(*call, viewer=shown_to))
        if plan is None:
            raise ToolError("invalid_input: give a plan, or steps and next (the call to check)")
        return _answer(lambda: sc.check(plan, mode=mode, context=context, viewer=shown_to))

    @server.tool(
        title="Audit chain",
        description=tool_description("audit_chain"),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def audit_chain(pointer: str, ctx: Context) -> dict[str, Any]:
        shown_to = viewer(ctx)
        return _answer(lambda: sc.audit(pointer, viewer=shown_to))


def _report_tools(server: MCPServer, sc: Sidecar | RemoteSidecar) -> None:
    from sidecar.shells.client import RemoteSidecar

    remote = isinstance(sc, RemoteSidecar)

    @server.tool(
        title="Report chain",
        description=tool_description("report_chain"),
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    def report_chain(report: Report, ctx: Context) -> dict[str, Any]:
        body = report.plain()
        if isinstance(sc, RemoteSidecar):
            return _answer(lambda: sc.report(body))  # the server names its own caller
        who = caller(ctx)
        return _answer(lambda: sc.report(body, source=who.name, role=who.role))

    @server.tool(
        title="Forget a source",
        description=tool_description("forget_source"),
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    def forget_source(source: str, ctx: Context, since: float | None = None) -> dict[str, Any]:
        who = caller(ctx)
        # a server checks the role itself, as its route declares it
        if not remote and not admits(strictest(of_tool("forget_source")), who.role):
            raise ToolError(
                f"forbidden: forgetting a source needs an operator token; {who.name!r} holds "
                f"an {who.role} token"
            )
        return _answer(lambda: sc.forget(source, since))


APPEAL_BLOCK = "appeal_block"
_APPEAL_ANNOTATIONS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)


def _review_tools(server: MCPServer, sc: Sidecar | RemoteSidecar) -> None:
    server.add_tool(
        _appeal_block(sc),
        title="Appeal a block",
        description=tool_description(APPEAL_BLOCK),
        annotations=_APPEAL_ANNOTATIONS,
    )


def _appeal_block(sc: Sidecar | RemoteSidecar | None) -> Callable[..., dict[str, Any]]:
    """``appeal_block`` over ``sc``; its signature is the tool's input schema, here and
    at the gateway (:func:`appeal_tool`)."""
    from sidecar.shells.client import RemoteSidecar

    def appeal_block(
        tool: str,
        reason: str,
        ctx: Context,
        arguments: JsonObject | None = None,
        constraint_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        assert sc is not None, "appeal_tool() declares the tool; it never runs it"
        args, rules = arguments or {}, constraint_ids or []
        if isinstance(sc, RemoteSidecar):
            return _answer(lambda: sc.appeal(tool, args, reason, rules))
        who = caller(ctx)
        return _answer(lambda: sc.appeal(tool, args, reason, rules, source=who.name))

    return appeal_block


@functools.cache
def appeal_tool() -> RegisteredTool:
    """``appeal_block`` as this server declares it (title, description, input schema,
    annotations, and the model its arguments are validated with), for a server that
    offers the same tool over another memory: the gateway's own ``appeal_block``."""
    from mcp.server.mcpserver.tools import Tool

    return Tool.from_function(
        _appeal_block(None),
        title="Appeal a block",
        description=tool_description(APPEAL_BLOCK),
        annotations=_APPEAL_ANNOTATIONS,
    )
