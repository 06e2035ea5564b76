"""An agent process traced with the OpenTelemetry SDK, calling the traced shop server
over stdio with the python ``mcp`` client: two calls inside an ``invoke_agent`` span
that names its conversation, then one call outside any span.  Both processes export to
the OTLP/HTTP endpoint given as the first argument."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

from tests.agents.otlp.traced_shop import export_to

ROOT = Path(__file__).resolve().parents[3]


async def main(endpoint: str) -> None:
    from mcp import Client, StdioServerParameters
    from opentelemetry import trace

    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.agents.otlp.traced_shop", endpoint],
        env={"PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")},
        cwd=str(ROOT),
    )
    tracer = trace.get_tracer("agent")
    async with Client(server, mode="legacy") as client:
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "conv-1"}
        with tracer.start_as_current_span("invoke_agent shop", attributes=attributes):
            await client.call_tool("get_order", {"order_id": "#W1"})
            await client.call_tool("exchange", {"order_id": "#W1", "item": "hat"})
        await client.call_tool("exchange", {"order_id": "#W2", "item": "hat"})


if __name__ == "__main__":
    provider = export_to(sys.argv[1], "agent")
    anyio.run(main, sys.argv[1])
    provider.shutdown()  # type: ignore[attr-defined]
