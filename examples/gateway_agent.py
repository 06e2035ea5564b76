"""A scripted agent (no LLM) that works through ``sidecar gateway`` with the plain ``mcp``
client, and shows the failure memory stop a call that failed before, with no code of
its own beyond an MCP client.

Each task is one agent run: look the order up, try the exchange, then say how the task
ended (``report_outcome``).  Ten customers first exchange delivered orders (the
successes the memory tests a failure against: without them nothing tells which
difference made the others fail); then two runs meet the shop's refusal on pending
orders (the second is forwarded with a warning, in the text the agent reads); the next
retries the first and the gateway refuses it before it reaches the shop, naming the
rule and its evidence; the last, on a delivered order, goes through.

    python examples/gateway_agent.py                   one MCP session per task
    python examples/gateway_agent.py --mode stateless  one MCP session per call
    python examples/gateway_agent.py --mode modern     the 2026-07-28 protocol: no MCP
                                                       session at all
        both start ``sidecar gateway shop='python examples/shop_server.py'`` on a fresh
        home, run the tasks, stop it
    python examples/gateway_agent.py --url http://127.0.0.1:8766/mcp --token TOKEN
        runs them against a gateway already serving (in front of the same shop)
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from shop_gateway import Call, arguments, play, target


@contextlib.asynccontextmanager
async def session(url: str, token: str) -> AsyncIterator[Any]:
    """One MCP session with the gateway."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        yield s


@contextlib.asynccontextmanager
async def modern(url: str, token: str) -> AsyncIterator[Any]:
    """A client of the 2026-07-28 protocol, which has no MCP session (``mcp.Client``
    negotiates it)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def run(url: str, token: str, mode: str, which: str = "story") -> list[str]:
    async def alone(name: str, args: dict[str, Any]) -> tuple[str, bool]:
        async with session(url, token) as s:  # a client that opens a session per call
            result = await s.call_tool(name, args)
        return _text(result), bool(result.is_error)

    @contextlib.asynccontextmanager
    async def per_task() -> AsyncIterator[Call]:
        if mode == "stateless":
            yield alone
            return
        if mode == "modern":
            async with modern(url, token) as client:

                async def sent(name: str, args: dict[str, Any]) -> tuple[str, bool]:
                    result = await client.call_tool(name, args)
                    return _text(result), bool(result.is_error)

                yield sent
            return
        async with session(url, token) as s:  # one session for the task

            async def call(name: str, args: dict[str, Any]) -> tuple[str, bool]:
                result = await s.call_tool(name, args)
                return _text(result), bool(result.is_error)

            yield call

    return await play(per_task, which)


def main() -> int:
    args = arguments(__doc__.splitlines()[0], modes=("session", "stateless", "modern"))
    with target(args) as (url, token):
        anyio.run(run, url, token, args.mode, args.scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main())
