"""Traces become evidence with no code beyond the exporter's endpoint: the OpenTelemetry
SDK's OTLP/HTTP exporter sends an agent's tool spans to a running sidecar (the HTTP app,
behind its token), and the library learns the failing call from them."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.errors import NotFound
from tests.agents.otlp.agent_runs import agent_run
from tests.agents.otlp.conftest import TOKEN, eventually, local_tracer
from tests.serving import serving

# real servers and subprocesses: the slow suite, not `make test-fast`
pytestmark = pytest.mark.integration


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
        agent_run(tracer, order)
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
    records: list[dict[str, Any]] = []

    def archived() -> bool:
        # the intake learns before it publishes the batch's chains: a learned condition
        # may name its record a moment before the record can be read
        pointer = next(v.pointer for v in sc.constraints() if v.kind == "call" and v.pointer)
        with contextlib.suppress(NotFound):
            records.append(sc.audit(pointer or "cold://chains/x"))
        return bool(records)

    eventually(archived)
    record = records[0]
    assert record["source"] == "steps"
    assert record["steps"][-1]["error"] == "Non-delivered order cannot be exchanged"


def test_a_session_still_open_when_the_server_stops_is_reported(tmp_path: Path) -> None:
    """Its agent's root span never came (the agent is still running, or died): the
    session waits in the intake, and a stopping server hands it to the library rather
    than dropping it."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        reported: list[str] = []
        report_many = sc.report_many

        def spy(reports: Any, **kwargs: Any) -> Any:
            reported.extend(r.get("session_id") or "?" for r in reports)
            return report_many(reports, **kwargs)

        sc.report_many = spy  # type: ignore[method-assign]
        tracer, memory = local_tracer()
        agent_run(tracer, "#W3")
        tools_only = [s for s in memory.get_finished_spans() if s.parent is not None]
        assert len(tools_only) == 2
        with serving(sc, TOKEN) as url:
            assert _exporter(url, TOKEN).export(tools_only) == SpanExportResult.SUCCESS
            time.sleep(0.5)
            assert reported == []  # open: its root has not ended
        assert len(reported) == 1
