"""The shop MCP server over stdio with the OpenTelemetry SDK exporting its spans (the
python ``mcp`` SDK's own) to the OTLP/HTTP endpoint given as the first argument."""

from __future__ import annotations

import sys


def export_to(endpoint: str, service: str) -> object:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    return provider


if __name__ == "__main__":
    export_to(sys.argv[1], "shop")
    from tests.agents.gateway.shop_server import server

    server.run("stdio")
