"""The gateway's own tools: ``search_tools`` and ``call_tool`` (with ``--expose search``),
``report_outcome``, and ``appeal_block`` (with a backend that keeps appeals).

Their input schemas are closed objects whose every property has an explicit type, so
that they convert under OpenAI's strict mode (the Agents SDK's
``convert_schemas_to_strict=True``) with nothing lost: a strict schema cannot say "any
object", so ``call_tool`` takes the tool's arguments as one JSON text (an object is
accepted too, from clients that send one), and optional values may be ``null``.
``appeal_block`` is the sidecar's MCP tool of that name, declared once
(:func:`sidecar.shells.mcp_server.appeal_tool`): the same description, schema and
validation, its appeal filed for the agent whose link called it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sidecar.agents.gateway.guard.answers import error
from sidecar.agents.gateway.guard.backend import Hit, Outcome, Step
from sidecar.errors import SidecarError
from sidecar.trust.redact import redact_text
from sidecar.wire import dump_dict

if TYPE_CHECKING:
    from mcp.types import CallToolResult, Tool

    from sidecar.agents.gateway.proxy.catalog import Catalog
    from sidecar.storage.review import Appeal

File = Callable[[str, dict[str, Any], str, list[str], str], Awaitable["Appeal"]]
"""The backend's ``appeal``: tool, arguments, reason, constraint ids, principal."""

SEARCH_TOOLS, CALL_TOOL, REPORT_OUTCOME = "search_tools", "call_tool", "report_outcome"
APPEAL_BLOCK = "appeal_block"
OWN_TOOLS = frozenset({SEARCH_TOOLS, CALL_TOOL, REPORT_OUTCOME, APPEAL_BLOCK})
MAX_K = 50
MAX_TASK = 2_000


def _closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


@functools.cache
def own_tools() -> dict[str, Tool]:
    return {
        SEARCH_TOOLS: _search_tool(),
        CALL_TOOL: _call_tool(),
        REPORT_OUTCOME: _report_tool(),
        APPEAL_BLOCK: _appeal_tool(),
    }


def _search_tool() -> Tool:
    from mcp.types import Tool, ToolAnnotations

    return Tool(
        name=SEARCH_TOOLS,
        description="Find tools for a task. Tools known to fail after what this session "
        "has already run are left out; risky ones carry warnings. Returns each tool's "
        "name, description and inputSchema: run one with call_tool.",
        input_schema=_closed(
            {
                "query": {"type": "string", "description": "what the tool should do"},
                "k": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "maximum": MAX_K,
                    "description": "how many tools (null: 5)",
                },
            },
            ["query"],
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )


def _call_tool() -> Tool:
    from mcp.types import Tool

    return Tool(
        name=CALL_TOOL,
        description="Run a tool found with search_tools: its name, and its arguments as "
        'one JSON object written as text, e.g. {"order_id": "#W1"}.',
        input_schema=_closed(
            {
                "name": {"type": "string", "description": "the tool's name"},
                "arguments": {
                    "type": ["string", "null"],
                    "description": "the tool's arguments: a JSON object, as text "
                    '(null or "{}": none)',
                },
            },
            ["name", "arguments"],
        ),
    )


def _report_tool() -> Tool:
    from mcp.types import Tool, ToolAnnotations

    return Tool(
        name=REPORT_OUTCOME,
        description="Say how this session's task ended: 'completed' or 'abandoned' "
        "(gave up). Failed paths are remembered so later sessions avoid them.",
        input_schema=_closed(
            {
                "outcome": {"type": "string", "enum": ["completed", "abandoned"]},
                "task": {"type": ["string", "null"], "description": "the task, in a sentence"},
            },
            ["outcome"],
        ),
        annotations=ToolAnnotations(
            read_only_hint=False, idempotent_hint=False, open_world_hint=False
        ),
    )


def _appeal_tool() -> Tool:
    from mcp.types import Tool

    from sidecar.shells.mcp_server import appeal_tool

    declared = appeal_tool()
    return Tool(
        name=APPEAL_BLOCK,
        title=declared.title,
        description=declared.description,
        input_schema=declared.parameters,
        annotations=declared.annotations,
    )


def appeal_arguments(arguments: dict[str, Any]) -> dict[str, Any] | CallToolResult:
    """``appeal_block``'s arguments validated as the sidecar's MCP server validates them
    (``arguments`` given as JSON text or as an object), or the error to answer."""
    from pydantic import ValidationError

    from sidecar.shells.mcp_server import appeal_tool

    try:
        return appeal_tool().fn_metadata.validate_arguments(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"`{'.'.join(str(p) for p in e['loc']) or 'arguments'}`: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        return error(f"invalid_input: {APPEAL_BLOCK} {problems}")


def call_tool_target(arguments: dict[str, Any]) -> tuple[str, dict[str, Any]] | CallToolResult:
    """The tool ``call_tool`` names and its arguments, or the error to answer."""
    inner = arguments.get("name")
    raw = arguments.get("arguments")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return error("call_tool: `arguments` is not valid JSON (give a JSON object as text)")
    inner_args = {} if raw is None else raw
    if not isinstance(inner, str) or not isinstance(inner_args, dict):
        return error("call_tool needs `name` (a string) and `arguments` (a JSON object)")
    if inner in OWN_TOOLS:
        return error(f"call {inner} directly")
    return inner, inner_args


@dataclass(frozen=True)
class Declared:
    """What ``report_outcome`` did: the report, if one was made, and how many steps it
    held (or why none was made)."""

    reported: bool
    steps: int
    note: str | None = None


class OwnTools:
    """``search_tools``, ``report_outcome`` and ``appeal_block``, over the parts of the
    gateway they use (``file``: ``None`` for a backend that keeps no appeals)."""

    def __init__(
        self,
        catalog: Catalog,
        steps: Callable[[str | None], list[Step]],
        search: Callable[[str, int, list[Step], str | None], Awaitable[list[Hit]]],
        declare: Callable[[str | None, Outcome, str | None], Awaitable[Declared]],
        file: File | None = None,
    ) -> None:
        self._catalog = catalog
        self._steps = steps
        self._search = search
        self._declare = declare
        self.file = file

    async def search(
        self, session: str | None, arguments: dict[str, Any], viewer: str | None = None
    ) -> CallToolResult:
        query = arguments.get("query")
        k = arguments.get("k")
        k = 5 if k is None else k
        if not isinstance(query, str) or not query.strip():
            return error("search_tools needs a non-empty `query`")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
            return error(f"`k` must be an integer from 1 to {MAX_K}")
        hits = await self._search(query, k, self._steps(session), viewer)
        found = []
        for hit in hits:
            tool = self._catalog.tool(hit.tool_id)
            if tool is None:
                continue  # the index knows a tool no upstream lists any more
            found.append(
                {
                    "name": hit.tool_id,
                    "description": tool.description or hit.description,
                    "inputSchema": tool.input_schema,
                    "score": hit.score,
                    "warnings": list(hit.warnings),
                }
            )
        return structured({"tools": found})

    async def report_outcome(
        self, session: str | None, arguments: dict[str, Any]
    ) -> CallToolResult:
        outcome = arguments.get("outcome")
        task = arguments.get("task")
        if outcome not in ("completed", "abandoned"):
            return error("`outcome` must be 'completed' or 'abandoned'")
        if task is not None and not isinstance(task, str):
            return error("`task` must be a string")
        done = await self._declare(session, outcome, task[:MAX_TASK] if task else None)
        payload: dict[str, Any] = {"reported": done.reported, "outcome": outcome}
        payload["steps"] = done.steps
        if done.note:
            payload["note"] = done.note
        return structured(payload)

    async def appeal(self, principal: str, arguments: dict[str, Any]) -> CallToolResult:
        """File an appeal for ``principal`` (the calling link's); the library's refusal
        (an invalid value, too many appeals open) is answered as a tool error."""
        given = appeal_arguments(arguments)
        if not isinstance(given, dict):
            return given
        if self.file is None:
            return error(f"{APPEAL_BLOCK}: this gateway's memory keeps no appeals")
        args, rules = given["arguments"] or {}, given["constraint_ids"] or []
        try:
            filed = await self.file(given["tool"], args, given["reason"], rules, principal)
        except SidecarError as exc:
            return error(f"{exc.code}: {redact_text(str(exc))}")
        return structured(dump_dict(filed))


def structured(payload: dict[str, Any]) -> CallToolResult:
    from mcp import types

    text = json.dumps(payload, ensure_ascii=False, default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=payload
    )
