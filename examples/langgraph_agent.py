"""A scripted agent (no LLM) on LangGraph, with its tools from ``langchain-mcp-adapters``,
through ``sidecar gateway``.

Its "model" is a fixed plan: each step is an ``AIMessage`` with a tool call, run by
LangGraph's own ``ToolNode`` over the adapters' own tools, exactly as a LangGraph agent's
tool node runs what its model asked for; the ``ToolMessage`` that comes back is what the
model would read next.  Two ways to get the tools, as the adapters' README shows them:

- ``--mode stateless`` (the default of ``MultiServerMCPClient(...).get_tools()``): every
  tool call opens an MCP session of its own.  The gateway ties the calls of a task back
  together by the values one call's output showed and the next call used (the order id
  ``get_order`` returned), and ``report_outcome`` speaks for the task's session;
- ``--mode session`` (``async with client.session("shop")`` and ``load_mcp_tools``): one
  MCP session per task, the surest way to keep the session.

langchain-mcp-adapters 0.3 is an ``mcp`` 1.x client and the sidecar runs on ``mcp`` 2.x,
so the agent runs in an environment of its own, as an agent application would::

    python3 -m venv .venv-langgraph
    .venv-langgraph/bin/pip install -r examples/requirements-langgraph.txt
    .venv-langgraph/bin/python examples/langgraph_agent.py --mode stateless
        (starts the sidecar's gateway with .venv/bin/sidecar on a fresh home)
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from shop_gateway import Call, arguments, play, target

_ids = itertools.count()


def graph(tools: list[Any]) -> Any:
    """The agent's graph with the model's node left out: its tool node alone."""
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return builder.compile()


async def call(agent: Any, name: str, args: dict[str, Any]) -> tuple[str, bool]:
    """One tool call the plan makes, run by the graph's ``ToolNode``: the text of the
    ``ToolMessage`` the model would read, and whether it is an error."""
    from langchain_core.messages import AIMessage

    request = {"name": name, "args": args, "id": f"call_{next(_ids)}", "type": "tool_call"}
    result = await agent.ainvoke({"messages": [AIMessage(content="", tool_calls=[request])]})
    message = result["messages"][-1]
    return message.text, message.status == "error"


async def run(url: str, token: str, mode: str, which: str = "story") -> list[str]:
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools

    connection = {
        "transport": "streamable_http",
        "url": url,
        "headers": {"Authorization": f"Bearer {token}"},
    }
    client = MultiServerMCPClient({"shop": connection})  # type: ignore[dict-item]
    shared = graph(await client.get_tools()) if mode == "stateless" else None

    @contextlib.asynccontextmanager
    async def per_task() -> AsyncIterator[Call]:
        if shared is not None:  # each call opens (and closes) a session of its own
            yield lambda name, args: call(shared, name, args)
            return
        async with client.session("shop") as session:  # one session for the task
            agent = graph(await load_mcp_tools(session))
            yield lambda name, args: call(agent, name, args)

    return await play(per_task, which)


def main() -> int:
    args = arguments(__doc__.splitlines()[0], modes=("stateless", "session"))
    print(f"mode: {args.mode}")
    with target(args) as (url, token):
        anyio.run(run, url, token, args.mode, args.scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main())
