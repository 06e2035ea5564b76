"""Every tool the sidecar serves over MCP converts under OpenAI's strict mode, checked with
the OpenAI Agents SDK's own conversion (``MCPUtil.to_function_tool(...,
convert_schemas_to_strict=True)``, which is what ``Agent(mcp_config={
"convert_schemas_to_strict": True})`` uses), and a call shaped as strict mode shapes it
(every field given, ``null`` for the unused, free-form values as JSON text) still does
what the tool is for: the sidecar's own ``/mcp`` tools, and the gateway's with and
without ``--expose search``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from benchmarks.standalone_backend import StandaloneBackend
from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.agents.gateway import build_gateway
from tests.agents.gateway.conftest import TOKEN, serving, shop_stdio

agents = pytest.importorskip(
    "agents", reason="openai-agents is not installed: pip install '.[agents]'"
)

pytestmark = pytest.mark.integration

LOOKED = {"tool": "get_order", "arguments": '{"order_id": "#W1"}', "error": None}
PENDING = {**LOOKED, "output": '{"order_id": "#W1", "status": "pending"}'}


def strict(tools: list[Any], server: Any) -> dict[str, dict[str, Any]]:
    """Each tool's schema as the SDK converts it, asserting the conversion was strict."""
    from agents.mcp import MCPUtil

    out = {}
    for tool in tools:
        converted = MCPUtil.to_function_tool(tool, server, convert_schemas_to_strict=True)
        assert converted.strict_json_schema, f"{tool.name} fell back to a non-strict schema"
        assert _converts(tool.input_schema), tool.name
        out[tool.name] = converted.params_json_schema
    return out


def _converts(schema: dict[str, Any]) -> bool:
    """Whether the SDK's ``ensure_strict_json_schema`` takes ``schema`` (an object that
    allows undeclared properties refused, as the SDK refuses it for an MCP tool)."""
    from agents.exceptions import UserError
    from agents.strict_schema import ensure_strict_json_schema

    try:
        ensure_strict_json_schema(copy.deepcopy(schema), _reject_open_objects=True)
    except UserError:
        return False
    return True


def test_a_free_form_object_does_not_convert() -> None:
    """What the check guards against: ``call_tool``'s arguments as any object (its first
    shape) cannot be strict; as one JSON text they can."""
    from sidecar.agents.gateway.guard.own_tools import own_tools

    free = {"type": "object", "additionalProperties": True}
    loose = {"type": "object", "properties": {"name": {"type": "string"}, "arguments": free}}
    assert not _converts(loose)
    assert not _converts({"type": "object", "properties": {"arguments": {"type": "object"}}})
    assert _converts(own_tools()["call_tool"].input_schema)


def _unconnected() -> Any:
    from agents.mcp import MCPServerStreamableHttp

    return MCPServerStreamableHttp({"url": "http://127.0.0.1:9/mcp"}, name="sidecar")


def test_the_sidecars_own_mcp_tools(tmp_path: Path) -> None:
    from sidecar.shells.mcp_server import build_mcp

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("exchange", "exchange")])
        server = build_mcp(sc)
        schemas = strict(anyio.run(server.list_tools), _unconnected())
        assert set(schemas) == {
            "search_tools", "check_plan", "report_chain", "audit_chain", "forget_source",
            "appeal_block",
        }  # fmt: skip
        step = schemas["check_plan"]["properties"]["steps"]["anyOf"][0]["items"]
        assert set(step["properties"]) == {"tool", "arguments", "output", "error"}
        report = schemas["report_chain"]["properties"]["report"]["properties"]
        assert {"steps", "outcome", "task_input", "topology", "failure"} <= set(report)

        def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = anyio.run(server.call_tool, name, arguments)
            assert not result.is_error, result
            return dict(result.structured_content or {})

        failing = {"tool": "exchange", "arguments": '{"order_id": "#W1"}', "output": None}
        failing["error"] = "Non-delivered order cannot be exchanged"
        for n in range(2):  # as a strict client writes a report: every field, some null
            reported = call(
                "report_chain",
                {
                    "report": {
                        "steps": [PENDING, failing],
                        "outcome": "abandoned",
                        "task_input": None,
                        "session_id": f"s{n}",
                        "report_id": None,
                        "topology": None,
                        "failure": None,
                        "constraint": None,
                        "reported_at": None,
                        "logs": None,
                    }
                },
            )
            assert reported["status"] in ("archived", "recorded")
        checked = call(
            "check_plan",
            {
                "plan": None,
                "mode": "sequence",
                "context": None,
                "steps": [PENDING],
                "next": {"tool": "exchange", "arguments": '{"order_id": "#W1"}'},
                "task_input": None,
            },
        )
        assert checked["decision"] in ("warn", "block") and checked["reasons"]
        found = call(
            "search_tools",
            {
                "query": "exchange an item",
                "k": 2,
                "after": None,
                "context": '{"payload_bytes": 10}',
                "steps": [PENDING],
                "task_input": None,
            },
        )
        assert found["hits"]


@pytest.mark.parametrize("expose", ["all", "search"])
def test_the_gateways_tools(expose: str) -> None:
    from agents.mcp import MCPServerStreamableHttp
    from agents.tool_context import ToolContext

    gateway = build_gateway(StandaloneBackend(), [shop_stdio()], token=TOKEN, expose=expose)

    async def main() -> tuple[dict[str, Any], str]:
        async with serving(gateway) as url:
            params = {"url": url, "headers": {"Authorization": f"Bearer {TOKEN}"}}
            async with MCPServerStreamableHttp(params, name="gw") as server:
                tools = await server.list_tools()
                schemas = strict(tools, server)
                if expose == "all":
                    return schemas, ""
                from agents.mcp import MCPUtil

                [call_tool] = [t for t in tools if t.name == "call_tool"]
                function = MCPUtil.to_function_tool(call_tool, server, True)
                args = json.dumps({"name": "get_order", "arguments": '{"order_id": "#W3"}'})
                context = ToolContext(
                    context=None, tool_name="call_tool", tool_call_id="c1", tool_arguments=args
                )
                out = await function.on_invoke_tool(context, args)
                return schemas, json.dumps(out)

    schemas, answer = anyio.run(main)
    if expose == "all":
        assert {"get_order", "exchange", "report_outcome"} <= set(schemas)
        return
    assert set(schemas) == {"search_tools", "call_tool", "report_outcome"}
    assert schemas["call_tool"]["properties"]["arguments"]["type"] == ["string", "null"]
    assert '\\"status\\": \\"delivered\\"' in answer  # the call went through, arguments kept
