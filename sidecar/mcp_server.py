"""The MCP shell: lookup, plan checks, reports and audit for agents.

Every tool calls the same :class:`~sidecar.app.Sidecar` methods as the CLI and the HTTP
API.  Served over streamable HTTP inside the HTTP app (``/mcp``) or over stdio
(``sidecar mcp``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from sidecar.errors import SidecarError
from sidecar.limits import CheckMode
from sidecar.redact import redact_text
from sidecar.wire import dump_dict

if TYPE_CHECKING:
    from sidecar.app import Sidecar

Scalar = str | int | float | bool | None

INSTRUCTIONS = (
    "Failure memory for tool selection. Call search_tools with what you have already "
    "executed (`after`) and runtime facts (`context`, e.g. payload_bytes): it never "
    "returns a tool that would complete a known-fatal chain, and says what it withheld. "
    "Call check_plan before running a multi-step plan. When you abandon a chain, call "
    "report_chain so no successor repeats it."
)


def build_mcp(sc: Sidecar) -> MCPServer:
    """An MCP server whose tools call ``sc``."""
    server = MCPServer(name="tool-chain-sidecar", instructions=INSTRUCTIONS, log_level="WARNING")

    def call(fn: Any) -> dict[str, Any]:
        try:
            return dump_dict(fn())
        except SidecarError as exc:
            # a clear, redacted message for the agent; the MCP layer marks it an error
            raise ToolError(f"{exc.code}: {redact_text(str(exc))}") from None

    @server.tool(
        title="Search tools",
        description="Semantic tool lookup that withholds continuations known to fail "
        "after the executed prefix `after` under `context`.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def search_tools(
        query: str,
        k: int = 5,
        after: list[str] | None = None,
        context: dict[str, Scalar] | None = None,
    ) -> dict[str, Any]:
        return call(lambda: sc.search(query, k=k, after=after or [], context=context))

    @server.tool(
        title="Check plan",
        description="Check a planned tool sequence against archived fatal sequences.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def check_plan(
        plan: list[str],
        mode: CheckMode = "sequence",
        context: dict[str, Scalar] | None = None,
    ) -> dict[str, Any]:
        return call(lambda: sc.check(plan, mode=mode, context=context))

    @server.tool(
        title="Report chain",
        description="Report a completed or abandoned multi-step chain (same JSON shape as "
        "`sidecar report`): deterministic failures are archived as negative constraints.",
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    def report_chain(report: dict[str, Any]) -> dict[str, Any]:
        return call(lambda: sc.report(report))

    @server.tool(
        title="Audit chain",
        description="The full archived record behind a cold storage pointer.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def audit_chain(pointer: str) -> dict[str, Any]:
        return call(lambda: sc.audit(pointer))

    return server
