"""The gateway's pure parts: session bookkeeping, evidence, naming, upstream specs, and
the in-memory backend's learning."""

from __future__ import annotations

import pytest

from sidecar.gateway import Step, Upstream, UpstreamSpecError
from sidecar.gateway.catalog import Catalog
from sidecar.gateway.evidence import arguments_evidence, cap, step_from_result
from sidecar.gateway.memory import MemoryBackend, facts_before
from sidecar.gateway.sessions import SessionBook, SessionLimits, inferred_outcome

OK = Step("get_order", {"order_id": "#W1"}, {"status": "pending"})
BAD = Step("exchange", {"order_id": "#W1"}, None, "Non-delivered order cannot be exchanged")
FIXED = Step("exchange", {"order_id": "#W3"}, {"status": "exchange requested"})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("steps", "outcome"),
    [
        ([], None),
        ([OK], None),
        ([OK, BAD], "abandoned"),
        ([OK, BAD, OK], "abandoned"),  # another tool's success does not recover it
        ([OK, BAD, FIXED], "unknown"),  # the same tool later succeeded
        ([BAD, FIXED, BAD], "abandoned"),  # the last failure counts
    ],
)
def test_inferred_outcome(steps: list[Step], outcome: str | None) -> None:
    assert inferred_outcome(steps) == outcome


def test_idle_sessions_expire_and_only_failing_ones_are_reported() -> None:
    clock = Clock()
    book = SessionBook(SessionLimits(idle_timeout_s=10), clock=clock)
    book.record("a", OK)
    book.record("a", BAD)
    book.record("b", OK)
    clock.now = 5
    book.record("c", BAD)
    clock.now = 10
    [report] = book.expire()  # a and b are idle; c is not; b has nothing to report
    assert report.outcome == "abandoned" and report.steps == (OK, BAD)
    assert report.ended == "idle"
    assert list(book._sessions) == ["c"]
    assert book.stats.unreported == 1
    clock.now = 15
    assert [r.steps for r in book.expire()] == [(BAD,)]


def test_the_least_recently_active_session_is_evicted_and_reported() -> None:
    clock = Clock()
    book = SessionBook(SessionLimits(max_sessions=2), clock=clock)
    book.record("a", BAD)
    clock.now = 1
    book.record("b", OK)
    clock.now = 2
    book.steps("a")  # a is active again: b is now the oldest
    assert book.record("c", OK) == []  # b had nothing to report
    clock.now = 3
    [evicted] = book.record("d", OK)
    assert evicted.ended == "evicted" and evicted.steps == (BAD,)
    assert sorted(book._sessions) == ["c", "d"] and book.stats.evicted == 2


def test_a_session_keeps_its_last_steps_and_counts_the_dropped() -> None:
    book = SessionBook(SessionLimits(max_steps=2))
    for step in (OK, BAD, FIXED):
        book.record("a", step)
    assert book.steps("a") == [BAD, FIXED]
    report = book.close("a")
    assert report is not None and report.dropped_steps == 1 and report.outcome == "unknown"


def test_a_declared_outcome_is_reported_and_the_session_starts_afresh() -> None:
    book = SessionBook(SessionLimits(report_clean=False))
    book.record("a", OK)
    report = book.declare("a", "completed", "look up an order")
    assert report is not None
    assert (report.outcome, report.task_input, report.steps) == (
        "completed",
        "look up an order",
        (OK,),
    )
    assert book.steps("a") == [] and "a" not in book
    assert book.close("a") is None
    assert book.declare("a", "abandoned", None) is None  # nothing to report


def test_report_clean_reports_sessions_without_failures() -> None:
    book = SessionBook(SessionLimits(report_clean=True))
    book.record("a", OK)
    report = book.close("a")
    assert report is not None and report.outcome == "unknown"


def test_evidence_is_redacted_and_capped_key_by_key() -> None:
    args = arguments_evidence(
        {"api_key": "abc123", "note": "x" * 50, "q": "Bearer abcdefghijkl"}, max_chars=10
    )
    assert args["api_key"] == "[REDACTED]"
    assert args["note"].startswith("x" * 10) and "truncated 40 chars" in args["note"]
    assert "abcdefghijkl" not in args["q"]
    assert cap({"a": 1}, 100) == {"a": 1}
    assert isinstance(cap({"a": "y" * 200}, 20), str)

    text = [{"type": "text", "text": '{"status": "pending", "token": "s3cr3t-value"}'}]
    step = step_from_result("get_order", {}, structured=None, content=text, is_error=False)
    assert step.output == {"status": "pending", "token": "[REDACTED]"}
    failed = step_from_result("x", {}, structured=None, content=text[:0], is_error=True)
    assert failed.error == "error" and failed.output is None


def test_names_are_prefixed_only_where_they_clash() -> None:
    from mcp.types import Tool

    def tool(name: str) -> Tool:
        return Tool(name=name, description=name, input_schema={"type": "object"})

    catalog = Catalog(reserved=frozenset({"call_tool"}))
    catalog.update("a", [tool("search"), tool("read"), tool("call_tool")])
    assert [t.name for t in catalog.tools()] == ["search", "read", "a_call_tool"]
    assert catalog.changed_sources() == ["a"]
    catalog.mark_synced("a", catalog.definitions("a"))
    catalog.update("b", [tool("search"), tool("write")])
    assert sorted(t.name for t in catalog.tools()) == [
        "a_call_tool",
        "a_search",
        "b_search",
        "read",
        "write",
    ]
    route = catalog.route("b_search")
    assert route is not None and (route.upstream, route.name) == ("b", "search")
    assert catalog.changed_sources() == ["a", "b"]  # a's search was renamed


def test_upstream_specs() -> None:
    assert Upstream.parse("web=https://example.test/mcp").url == "https://example.test/mcp"
    stdio = Upstream.parse("fs=npx -y server-files '/tmp/a b'")
    assert stdio.command == ("npx", "-y", "server-files", "/tmp/a b")
    assert stdio.transport == "stdio"
    assert Upstream.parse("w=https://u:pw@example.test/mcp").describe() == (
        "w=https://[REDACTED]@example.test/mcp"
    )
    for bad in ("noequals", "=cmd", "x=", "bad name=cmd", "x=cmd 'unclosed"):
        with pytest.raises(UpstreamSpecError):
            Upstream.parse(bad)


def test_memory_backend_learns_the_shared_condition_and_is_contested_by_a_success() -> None:
    backend = MemoryBackend(block_after=2)
    looked_1 = Step("get_order", {"order_id": "#W1"}, {"order_id": "#W1", "status": "pending"})
    looked_2 = Step("get_order", {"order_id": "#W2"}, {"order_id": "#W2", "status": "pending"})
    failed = "Non-delivered order cannot be exchanged"
    backend.report_session(
        "s1", [looked_1, Step("exchange", {"order_id": "#W1"}, None, failed)], "abandoned", None
    )
    backend.report_session(
        "s2", [looked_2, Step("exchange", {"order_id": "#W2"}, None, failed)], "abandoned", None
    )
    pending = Step("get_order", {"order_id": "#W9"}, {"order_id": "#W9", "status": "pending"})
    delivered = Step("get_order", {"order_id": "#W3"}, {"order_id": "#W3", "status": "delivered"})
    verdict = backend.check_call([pending], "exchange", {"order_id": "#W9"})
    assert verdict.decision == "block"
    assert verdict.reasons[0].rule == "exchange fails when get_order.status = pending"
    assert backend.check_call([delivered], "exchange", {"order_id": "#W3"}).decision == "allow"
    assert backend.check_call([pending], "get_order", {}).decision == "allow"
    # a success under the same condition contests the rule: warned, no longer blocked
    backend.report_session(
        "s3", [pending, Step("exchange", {"order_id": "#W9"}, {})], "completed", None
    )
    assert backend.check_call([pending], "exchange", {"order_id": "#W9"}).decision == "warn"
    assert facts_before([pending], {"x": [1]}) == {
        ("get_order", "order_id", "#W9"),
        ("get_order", "status", "pending"),
    }
