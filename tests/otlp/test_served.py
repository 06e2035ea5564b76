"""Traces become evidence with no code beyond the exporter's endpoint: the OpenTelemetry
SDK's OTLP/HTTP exporter sends an agent's tool spans to a running sidecar (the HTTP app,
behind its token), and the library learns the failing call from them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.api import create_app
from tests.otlp.conftest import eventually, local_tracer
from tests.otlp.test_intake import _agent_run

# real servers and subprocesses: the slow suite, not `make test-fast`
pytestmark = pytest.mark.integration

TOKEN = "otlp-token-0123456789"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Sidecar]]:
    import uvicorn

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        app = create_app(sc, TOKEN)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}", sc
        finally:
            server.should_exit = True
            thread.join(timeout=30)
            sock.close()


def delivered_session(n: int) -> dict[str, Any]:
    order = f"#D{100 + n}"
    return {
        "steps": [
            {"tool": "get_order", "arguments": {"order_id": order},
             "output": {"order_id": order, "status": "delivered"}},
            {"tool": "exchange", "arguments": {"order_id": order, "item": "hat"},
             "output": {"order_id": order, "status": "exchange requested"}},
        ],
        "outcome": "completed",
        "session_id": f"delivered-{n}",
    }  # fmt: skip


def _exporter(url: str, token: str | None) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers=headers)


def test_exported_spans_teach_the_library(served: tuple[str, Sidecar]) -> None:
    from opentelemetry.sdk.trace.export import SpanExportResult

    url, sc = served
    # the exchanges that went through, reported before (the background a learned
    # condition is tested against: without successes nothing tells what made it fail)
    sc.report_many([delivered_session(n) for n in range(10)])
    tracer, memory = local_tracer()
    for order in ("#W1", "#W2", "#W5"):
        _agent_run(tracer, order)
    spans = list(memory.get_finished_spans())
    assert _exporter(url, None).export(spans) == SpanExportResult.FAILURE  # 401
    assert _exporter(url, TOKEN).export(spans[::-1]) == SpanExportResult.SUCCESS  # any order
    eventually(lambda: sum(v.kind == "call" for v in sc.constraints()) > 0)
    steps = [
        {
            "tool": "get_order",
            "arguments": {"order_id": "#W7"},
            "output": {"order_id": "#W7", "status": "pending"},
        }
    ]
    eventually(
        lambda: (
            sc.check_call(steps, "exchange", {"order_id": "#W7", "item": "hat"}).decision == "block"
        )
    )
    record = sc.audit(
        next(v.pointer for v in sc.constraints() if v.kind == "call" and v.pointer)
        or "cold://chains/x"
    )
    assert record["source"] == "steps"
    assert record["steps"][-1]["error"] == "Non-delivered order cannot be exchanged"
