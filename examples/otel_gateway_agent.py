"""A scripted agent (no LLM) instrumented with OpenTelemetry, through ``sidecar gateway``.

Each task is one trace: an ``invoke_agent`` span around an ``execute_tool`` span per
call (the GenAI semantic conventions).  The agent opens a new MCP session for every call;
the ``mcp`` client propagates the current trace context in each request's
``_meta.traceparent``, and the gateway groups a trace's calls into one session, before
any linking by value (W3C baggage ``session.id`` or ``gen_ai.conversation.id``, when set,
would group a whole conversation across traces).  An HTTP client that sends the
``traceparent`` header does the same.

    pip install opentelemetry-sdk     # in .venv already (`make test` installs it)
    python examples/otel_gateway_agent.py
    python examples/otel_gateway_agent.py --url http://127.0.0.1:8766/mcp --token TOKEN

The spans are only made, not exported: to also teach the memory from them, export them
to ``sidecar serve``'s ``/v1/traces`` as ``otel_agent.py`` does.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from gateway_agent import session
from shop_gateway import Call, arguments, play, target


async def run(url: str, token: str, which: str = "story") -> list[str]:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    tracer = trace.get_tracer("shop-agent")

    async def call(name: str, args: dict[str, Any]) -> tuple[str, bool]:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes):
            async with session(url, token) as s:  # a session of its own for each call
                result = await s.call_tool(name, args)
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return text, bool(result.is_error)

    @contextlib.asynccontextmanager
    async def traced() -> AsyncIterator[Call]:
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "shop"}
        with tracer.start_as_current_span("invoke_agent shop", attributes=attributes):
            yield call

    return await play(traced, which)


def main() -> int:
    args = arguments(__doc__.splitlines()[0])
    with target(args) as (url, token):
        anyio.run(run, url, token, args.scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main())
