"""A scripted agent traced with OpenTelemetry, sending its tool calls to a running
sidecar as GenAI ``execute_tool`` spans over OTLP/HTTP: the sidecar learns from them
with no code of its own in the agent.

    sidecar serve &
    python examples/otel_agent.py

The agent helps the customers of a toy shop, one conversation each
(``gen_ai.conversation.id``): it looks their order up, then asks for an exchange.  The
shop refuses to exchange an order that is still pending: ten customers with delivered
orders are served first (the successes a failure is tested against), then four more,
three of whose orders are pending.  Each conversation is one trace: an
``invoke_agent`` span around one ``execute_tool`` span per call (tool name, call id,
arguments and result as JSON, an ERROR status with the shop's message when it
refused).  A few seconds after each root span ends the sidecar reports the
conversation to its memory; after that, a check of an exchange on another pending order
is blocked (see ``examples/README.md``).

Needs ``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``.  The
endpoint is ``--endpoint``, else ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else the
default ``sidecar serve`` address; the token is ``--token``, else ``$SIDECAR_TOKEN``,
else the ``token`` file of the home (``$SIDECAR_HOME``, else ``./.sidecar``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

DELIVERED = [f"#W{n}" for n in range(10, 20)]
ORDERS = {
    **{o: {"order_id": o, "status": "delivered", "items": ["white cap"]} for o in DELIVERED},
    "#W1": {"order_id": "#W1", "status": "pending", "items": ["blue shirt"]},
    "#W2": {"order_id": "#W2", "status": "delivered", "items": ["red hat"]},
    "#W3": {"order_id": "#W3", "status": "pending", "items": ["green scarf"]},
    "#W5": {"order_id": "#W5", "status": "pending", "items": ["grey socks"]},
}


class ShopError(Exception):
    pass


def get_order(order_id: str) -> dict[str, Any]:
    return ORDERS[order_id]


def exchange(order_id: str, item: str) -> dict[str, Any]:
    if ORDERS[order_id]["status"] != "delivered":
        raise ShopError("Non-delivered order cannot be exchanged")
    return {"order_id": order_id, "exchanged": item, "status": "exchange requested"}


TOOLS = {"get_order": get_order, "exchange": exchange}


def call_tool(tracer: Any, name: str, arguments: dict[str, Any], call_id: str) -> Any:
    """One tool call, as an ``execute_tool`` span under the current agent span."""
    from opentelemetry.trace import Status, StatusCode

    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": json.dumps(arguments),
    }
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
        try:
            result = TOOLS[name](**arguments)
        except ShopError as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            return None
        span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        return result


def help_customer(tracer: Any, order_id: str, item: str) -> str:
    """One conversation: look the order up, then ask for the exchange."""
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "shop-assistant",
        "gen_ai.conversation.id": f"conversation-{order_id.strip('#')}",
    }
    with tracer.start_as_current_span("invoke_agent shop-assistant", attributes=attributes):
        call_tool(tracer, "get_order", {"order_id": order_id}, f"{order_id}-1")
        done = call_tool(tracer, "exchange", {"order_id": order_id, "item": item}, f"{order_id}-2")
    return "exchanged" if done else "refused"


def token(given: str | None) -> str:
    if given:
        return given
    if os.environ.get("SIDECAR_TOKEN"):
        return os.environ["SIDECAR_TOKEN"]
    home = Path(os.environ.get("SIDECAR_HOME") or ".sidecar")
    return (home / "token").read_text().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--endpoint",
        default=os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or "http://127.0.0.1:8765/v1/traces",
    )
    parser.add_argument("--token", help="the sidecar's bearer token")
    args = parser.parse_args(argv)

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    failed: list[int] = []

    class Exporter(OTLPSpanExporter):
        """The SDK's exporter, remembering a batch the sidecar did not take."""

        def export(self, spans: Any) -> SpanExportResult:
            result = super().export(spans)
            if result is not SpanExportResult.SUCCESS:
                failed.append(len(spans))
            return result

    exporter = Exporter(
        endpoint=args.endpoint, headers={"Authorization": f"Bearer {token(args.token)}"}
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "shop-assistant"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("examples.otel_agent")
    served = [help_customer(tracer, order_id, "white cap") for order_id in DELIVERED]
    print(
        f"{len(DELIVERED)} customers with delivered orders: {served.count('exchanged')} exchanged"
    )
    customers = (("#W1", "blue shirt"), ("#W2", "red hat"), ("#W3", "green scarf"),
                 ("#W5", "grey socks"))  # fmt: skip
    for order_id, item in customers:
        print(f"{order_id}: exchange {item!r}: {help_customer(tracer, order_id, item)}")
    provider.shutdown()  # flushes the last spans
    if failed:
        print(f"{sum(failed)} span(s) were not taken by {args.endpoint}", file=sys.stderr)
        return 1
    print(f"spans sent to {args.endpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
