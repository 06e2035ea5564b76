"""A scripted agent (no LLM) on the OpenAI Agents SDK, through ``sidecar gateway``.

The agent connects with the SDK's own ``MCPServerStreamableHttp`` and turns the
gateway's tools into the SDK's function tools with ``convert_schemas_to_strict=True``
(OpenAI's strict mode, as ``Agent(mcp_config={"convert_schemas_to_strict": True})``
does); every tool converts.  Its loop calls those function tools the way the SDK's
runner does, and prints the text the SDK would hand the model: a refused call, a call
whose warning is in that text, an allowed one.

The SDK keeps one MCP session per server connection, so one connection serves all the
tasks here: each task ends with ``report_outcome``, which closes the task's session (the
next call starts a new one).  Without it, open one connection per run, or name each
run's session with the ``Sidecar-Session`` header.

    pip install 'openai-agents>=0.24,<0.25'    # in .venv: `make test` installs it
    python examples/openai_agents_agent.py     # starts a gateway on a fresh home
    python examples/openai_agents_agent.py --url http://127.0.0.1:8766/mcp --token TOKEN
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from shop_gateway import Call, arguments, play, target


def _text(output: Any) -> str:
    """The text of what a function tool returned (one text item, or several)."""
    items = output if isinstance(output, list) else [output]
    texts = [i.get("text", "") if isinstance(i, dict) else str(i) for i in items]
    return "\n".join(texts)


async def run(url: str, token: str, which: str = "story") -> list[str]:
    from agents.mcp import MCPServerStreamableHttp, MCPUtil
    from agents.tool_context import ToolContext

    params = {"url": url, "headers": {"Authorization": f"Bearer {token}"}}
    async with MCPServerStreamableHttp(params, name="shop", cache_tools_list=True) as server:
        listed = await server.list_tools()
        tools = {
            t.name: MCPUtil.to_function_tool(t, server, convert_schemas_to_strict=True)
            for t in listed
        }
        loose = sorted(name for name, tool in tools.items() if not tool.strict_json_schema)
        strict = ", ".join(sorted(set(tools) - set(loose)))
        print(f"tools (strict): {strict}" + (f"; not strict: {', '.join(loose)}" if loose else ""))
        calls = iter(range(1_000_000))

        async def call(name: str, args: dict[str, Any]) -> tuple[str, bool]:
            payload = json.dumps(args)
            context = ToolContext(
                context=None,
                tool_name=name,
                tool_call_id=f"call_{next(calls)}",
                tool_arguments=payload,
            )
            text = _text(await tools[name].on_invoke_tool(context, payload))
            return text, not text.startswith("{")

        @contextlib.asynccontextmanager
        async def connection() -> AsyncIterator[Call]:
            yield call  # one MCP session for the connection: report_outcome ends a task's

        return await play(connection, which)


def main() -> int:
    args = arguments(__doc__.splitlines()[0])
    with target(args) as (url, token):
        anyio.run(run, url, token, args.scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main())
