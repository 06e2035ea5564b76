"""One exporter cannot stall the intake: the probes of large results, huge requests,
deep nesting, unusual tool names and memory pressure, against a running collector."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.gateway.guard.backend import Step
from sidecar.agents.otlp import AssemblerLimits
from sidecar.agents.otlp.tools import CUT_MARGIN
from sidecar.trust.toolnames import tool_id_for
from tests.agents.otlp.bodies import agent_turn, request, span, span_id, tool_span, trace_id
from tests.agents.otlp.conftest import Collector, eventually, run_collector

JSON_HEADERS = {"Content-Type": "application/json"}


def _post(collector: Collector, document: Any, *, gzipped: bool = False) -> httpx.Response:
    body = json.dumps(document).encode()
    headers = dict(JSON_HEADERS)
    if gzipped:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    return httpx.post(collector.url, content=body, headers=headers, timeout=120)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# ---- large results ---------------------------------------------------------------------
def test_megabyte_results_are_cut_before_they_are_read(collector: Collector) -> None:
    page = json.dumps({"html": "<p>" + "x" * 1_000_000 + "</p>", "status": "ok"})
    calls = [
        {"tool": "fetch_page", "arguments": {"url": f"/p{n}"}, "result": page} for n in "12345678"
    ]
    calls.append({"tool": "extract", "arguments": {"page": "/p7"}, "error": "payload too large"})
    answer = _post(collector, request(agent_turn(trace_id(0), None, calls)), gzipped=True)
    assert answer.status_code == 200, answer.text
    eventually(lambda: len(collector.backend.reports) == 1)
    [report] = collector.backend.reports
    assert [s.tool for s in report.steps] == ["fetch_page"] * 8 + ["extract"]  # none merged
    cap = collector.assembler.limits.max_chars
    for step in report.steps[:8]:
        assert isinstance(step.output, str) and step.output.startswith('{"html": "<p>xxx')
        assert len(step.output) < cap + 100  # the cap and its marker, not a megabyte
    # what the intake holds is bounded by the cut, not by the results
    assert collector.assembler.held_bytes() < 8 * (cap + CUT_MARGIN + 2_000)


def test_one_request_takes_at_most_its_span_bound(collector: Collector) -> None:
    bound = collector.assembler.limits.max_spans_per_request
    spans = [span(trace_id(i), span_id(0)) for i in range(bound + 5_000)]
    answer = _post(collector, request(spans))
    assert answer.status_code == 200
    assert answer.json() == {
        "partialSuccess": {
            "rejectedSpans": "5000",
            "errorMessage": f"more than {bound} spans in one request",
        }
    }
    stats = collector.assembler.stats
    assert (stats.accepted_spans, stats.rejected) == (bound, 5_000)


def test_a_small_request_is_answered_while_a_large_one_is_being_redacted(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ordering, not timing: the large request is held inside its redaction until the
    small one, from another exporter, has been answered and its session reported."""
    import sidecar.agents.otlp.prepare as prepare_module

    entered, release = threading.Event(), threading.Event()
    real = prepare_module.output_evidence

    def held(value: Any, max_chars: int) -> Any:
        if isinstance(value, str) and value.startswith("LARGE"):
            entered.set()
            assert release.wait(60), "never released"
        return real(value, max_chars)

    monkeypatch.setattr(prepare_module, "output_evidence", held)
    big_result = "LARGE " + "y" * 100_000
    calls = [{"tool": "scrape", "arguments": {"n": i}, "result": big_result} for i in range(40)]
    calls.append({"tool": "scrape", "arguments": {"n": 99}, "error": "too large"})
    large = request(agent_turn(trace_id(1), None, calls))
    answers: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answers.append(_post(collector, large)))
    worker.start()
    try:
        assert entered.wait(60), "the large request never reached its redaction"
        small = agent_turn(trace_id(2), None, [{"tool": "ping", "error": "refused"}])
        answer = _post(collector, request(small))
        assert answer.status_code == 200
        eventually(lambda: [r.steps[0].tool for r in collector.backend.reports] == ["ping"])
        assert worker.is_alive() and not answers  # the large one is still in its redaction
    finally:
        release.set()
        worker.join(120)
    assert answers[0].status_code == 200
    eventually(lambda: len(collector.backend.reports) == 2)


# ---- nesting ---------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [40, 5_000])
def test_deep_tool_arguments_answer_400(collector: Collector, depth: int) -> None:
    spans = [tool_span(trace_id(0), span_id(1), None, "t", _nested(depth), error="E")]
    answer = _post(collector, request(spans))
    assert answer.status_code == 400
    assert "nested" in answer.json()["message"]
    assert collector.assembler.open_traces() == 0  # nothing of it was taken


def test_deep_results_and_attribute_values_answer_400(collector: Collector) -> None:
    deep_result = tool_span(trace_id(0), span_id(1), None, "t", {}, result=_nested(100))
    assert _post(collector, request([deep_result])).status_code == 400
    value: dict[str, Any] = {"stringValue": "leaf"}
    for _ in range(60):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    nested_attribute = span(trace_id(0), span_id(2), None, deep=value)
    answer = _post(collector, request([nested_attribute]))
    assert answer.status_code == 400 and "nested deeper" in answer.json()["message"]


def test_a_json_body_nested_past_any_parser_answers_400(collector: Collector) -> None:
    body = b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = httpx.post(collector.url, content=body, headers=JSON_HEADERS)
    assert answer.status_code == 400 and answer.json()["code"] == 3
    assert collector.assembler.stats.malformed_bodies == 1


def test_nesting_within_the_library_bound_is_taken(collector: Collector) -> None:
    arguments = {"filter": json.loads(_nested(20))}
    calls = [{"tool": "query", "arguments": arguments, "error": "bad filter"}]
    assert _post(collector, request(agent_turn(trace_id(0), None, calls))).status_code == 200
    eventually(lambda: len(collector.backend.reports) == 1)
    assert collector.backend.reports[0].steps[0].arguments == arguments


# ---- tool names ------------------------------------------------------------------------
def test_unusual_tool_names_are_mapped_or_dropped_and_counted(collector: Collector) -> None:
    calls = [
        {"tool": "get order", "arguments": {"id": 1}, "result": {"status": "pending"}},
        {"tool": "fs/read", "arguments": {"path": "/a"}, "result": "text"},
        {"tool": "crm:lookup", "arguments": {"q": "x"}, "result": {}},
        {"tool": "///", "arguments": {}, "result": "nothing usable in the name"},
        {"tool": "exchange", "arguments": {"id": 1}, "error": "Non-delivered order"},
    ]
    assert _post(collector, request(agent_turn(trace_id(0), None, calls))).status_code == 200
    eventually(lambda: len(collector.backend.reports) == 1)
    [report] = collector.backend.reports
    # each a tool of its own: "get order" is not the tool get_order
    mapped = [tool_id_for(n) for n in ("get order", "fs/read", "crm:lookup")]
    assert [s.tool for s in report.steps] == [*mapped, "exchange"]
    assert mapped[0].startswith("get_order_") and mapped[0] != "get_order"
    stats = collector.assembler.stats
    assert stats.renamed_tools == 3
    assert stats.dropped == {"unusable tool name (no letter or digit)": 1}


# ---- memory ----------------------------------------------------------------------------
class SlowSink(StandaloneBackend):
    """A backend that takes no report until it is released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def report_session(
        self, session_id: str, steps: list[Step], outcome: Any, task_input: str | None
    ) -> None:
        assert self.release.wait(60)
        super().report_session(session_id, steps, outcome, task_input)


@pytest.fixture
def slow_collector() -> Iterator[Collector]:
    limits = AssemblerLimits(
        root_grace_s=0, trace_idle_s=60, max_request_bytes=65_536, max_memory_bytes=262_144
    )
    yield from run_collector(limits, SlowSink())


def _failing_turn(n: int) -> dict[str, Any]:
    calls = [{"tool": "lookup", "arguments": {"n": n}, "result": "r" * 4_000}] * 3
    calls.append({"tool": "exchange", "arguments": {"n": n}, "error": "Non-delivered order"})
    return request(agent_turn(trace_id(n), None, calls))


def test_the_memory_limit_refuses_while_reports_wait_and_accepts_after(
    slow_collector: Collector,
) -> None:
    collector, sink = slow_collector, slow_collector.backend
    statuses = []
    for n in range(200):
        answer = _post(collector, _failing_turn(n))
        statuses.append(answer.status_code)
        if answer.status_code == 503:
            break
    assert statuses[-1] == 503 and set(statuses[:-1]) == {200}
    assert answer.headers["Retry-After"] == "1"
    assert answer.json()["code"] == 14  # UNAVAILABLE: an exporter retries it
    stats = collector.assembler.stats
    assert stats.refused_requests == 1 and stats.refused_spans == 5
    assert collector.assembler.held_bytes() <= collector.assembler.limits.max_memory_bytes
    sink.release.set()  # the backend catches up: what it held is freed
    eventually(lambda: len(sink.reports) == len(statuses) - 1)
    assert _post(collector, _failing_turn(999)).status_code == 200
    eventually(lambda: len(sink.reports) == len(statuses))


@pytest.fixture
def small_collector() -> Iterator[Collector]:
    limits = AssemblerLimits(
        root_grace_s=0, trace_idle_s=600, max_request_bytes=65_536, max_memory_bytes=262_144
    )
    yield from run_collector(limits)


@pytest.mark.slow
def test_open_traces_are_closed_early_to_make_room_and_nothing_is_lost(
    small_collector: Collector,
) -> None:
    """Children whose root never comes hold memory until they idle; a new request makes
    room by closing the oldest of them, whose sessions are reported."""
    collector = small_collector
    for n in range(150):
        calls = [{"tool": "lookup", "arguments": {"n": n}, "result": "r" * 3_000}]
        calls.append({"tool": "exchange", "arguments": {"n": n}, "error": "refused"})
        headless = agent_turn(trace_id(n), None, calls, root=False)
        assert _post(collector, request(headless)).status_code == 200
    stats = collector.assembler.stats
    assert stats.traces_shed > 0 and stats.refused_requests == 0
    limit = collector.assembler.limits.max_memory_bytes
    assert collector.assembler.held_bytes() <= limit
    eventually(lambda: len(collector.backend.reports) == stats.traces_shed)
    shed = {r.steps[0].arguments["n"] for r in collector.backend.reports}
    assert shed == set(range(stats.traces_shed))  # the oldest first, each one whole


def test_a_body_inflating_past_the_request_bound_answers_413(small_collector: Collector) -> None:
    calls = [{"tool": "t", "arguments": {"x": "z" * 200_000}, "error": "E"}]
    answer = _post(small_collector, request(agent_turn(trace_id(0), None, calls)), gzipped=True)
    assert answer.status_code == 413
    assert small_collector.assembler.stats.too_large_bodies == 1
