"""Which session a gateway call belongs to (:mod:`sidecar.agents.gateway.guard.linking`), as pure
bookkeeping: declared ids from headers and ``_meta``, grounded values, and the linker over
a real :class:`SessionBook` with an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.agents.gateway.guard.backend import Step
from sidecar.agents.gateway.guard.linking import (
    Linker,
    Origin,
    argument_values,
    declared_session,
    grounded,
    handle_of,
    new_connection,
    output_values,
    principal_of,
    trace_id,
    trace_session,
)
from sidecar.agents.gateway.guard.sessions import LinkedSessionBook
from sidecar.agents.sessions import SessionLimits

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("headers", "meta", "expected"),
    [
        ({}, {}, None),
        ({"baggage": "session.id=run-7,other=x"}, {}, "baggage:session.id=run-7"),
        (
            {},
            {"baggage": "gen_ai.conversation.id=conv%2042;p=1"},
            "baggage:gen_ai.conversation.id=conv 42",
        ),
        (
            {},
            {"baggage": "k=v, gen_ai.conversation.id = c-9 "},
            "baggage:gen_ai.conversation.id=c-9",
        ),
        ({"traceparent": TRACEPARENT}, {}, f"trace:{TRACE}"),
        ({}, {"traceparent": TRACEPARENT.upper()}, f"trace:{TRACE}"),
        ({}, {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"}, None),
        ({}, {"trace_id": TRACE}, f"trace:{TRACE}"),
        ({"sidecar-session": " task-1 "}, {}, "named:task-1"),
        ({}, {"sidecar/session": "run-42"}, "named:run-42"),
        # the order: baggage, then the declared id, then trace context; _meta first
        (
            {"baggage": "session.id=h", "traceparent": TRACEPARENT},
            {"baggage": "session.id=m"},
            "baggage:session.id=m",
        ),
        # a declared id says more than a trace, which may be one request's own
        ({"sidecar-session": "s"}, {"traceparent": TRACEPARENT}, "named:s"),
    ],
)
def test_the_session_a_request_declares(
    headers: dict[str, str], meta: dict[str, Any], expected: str | None
) -> None:
    assert (declared_session(headers, meta) or trace_session(headers, meta)) == expected
    if expected is not None and expected.startswith("trace:"):
        assert declared_session(headers, meta) is None


def test_a_baggage_over_the_w3c_limit_is_not_read() -> None:
    assert declared_session({"baggage": "session.id=x," + "k=v," * 3_000}, {}) is None
    assert trace_id("not a traceparent") is None and trace_id(None) is None


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("#W1", "#W1"),
        (" W2466703 ", "W2466703"),
        ("sara@example.com", "sara@example.com"),
        ("2026-05-01", None),  # a date: many unrelated sessions show it
        (12345, None),
        (123456, "123456"),
        (999, None),
        (True, None),
        ("blue shirt", None),
        ("pending", None),
        ("#1", None),
        ("x" * 201 + "1", None),
        ("[REDACTED]1", None),
        (1.5, None),
    ],
)
def test_grounded_values(value: Any, kept: str | None) -> None:
    assert grounded(value) == kept


def test_values_an_output_showed_and_a_call_uses() -> None:
    output = {
        "order_id": "#W1",
        "status": "pending",
        "items": [{"item_id": 9385662952, "name": "shirt"}],
        "note": "Order #W2 shipped to sara@example.com.",
    }
    assert set(output_values(output)) == {"#W1", "9385662952", "#W2", "sara@example.com"}
    assert output_values("x" * 10) == []
    arguments = {"order_id": "#W1", "item": "blue shirt", "ids": ["#A1", {"k": "#B22"}], "n": 2}
    assert argument_values(arguments) == {"#W1", "#A1", "#B22"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


LOOKED = Step("get_order", {"order_id": "#W1"}, {"order_id": "#W1", "status": "pending"})
FAILED = Step("exchange", {"order_id": "#W1"}, None, "Non-delivered order cannot be exchanged")


def _linker(window: float = 60.0) -> tuple[Linker, LinkedSessionBook, Clock]:
    clock = Clock()
    book = LinkedSessionBook(SessionLimits(report_clean=True), window, clock=clock)
    return Linker(book), book, clock


def _fresh(who: str = "alice") -> Origin:
    """A call on a connection of its own (a client that opens one per call)."""
    return Origin(who, new_connection(who), None)


def test_calls_on_connections_of_their_own_are_linked_by_a_value_an_output_showed() -> None:
    linker, book, clock = _linker()
    first = linker.for_call(_fresh(), "get_order", {"order_id": "#W1"})
    assert first.how == "new"
    book.observe(first.key, LOOKED, first.principal, inferred=first.inferred)
    clock.now = 5
    second = linker.for_call(_fresh(), "get_order", {"order_id": "#W1", "item": "blue shirt"})
    assert (second.how, second.key) == ("linked", first.key)
    assert book.steps(second.key) == [LOOKED]  # the call is checked in that state
    book.observe(second.key, FAILED, second.principal, inferred=second.inferred)
    # another principal's call on the same value starts its own session
    assert linker.for_call(_fresh("bob"), "get_order", {"order_id": "#W1"}).how == "new"
    # report_outcome on yet another connection speaks of the latest inferred session
    declared = linker.for_own_tool(_fresh())
    assert declared is not None and declared.key == first.key
    report = book.declare(first.key, "abandoned", "exchange #W1")
    assert report is not None and [s.tool for s in report.steps] == ["get_order", "exchange"]
    assert linker.stats == {"mcp": 0, "declared": 0, "trace": 0, "linked": 1, "new": 2}


def test_a_call_tied_to_nothing_teaches_what_it_alone_shows_as_it_fails() -> None:
    """A session of one call that nothing joined: its failure is reported as it comes
    back, its context marked unknown (the memory learns only what the call alone shows);
    a declared outcome says nothing of a task it cannot see, so it is not reported; a
    success is reported, context unknown, where successes are asked for."""
    linker, book, clock = _linker(window=60)
    alone = linker.for_call(_fresh(), "exchange", {"order_id": "#W3"})
    ok = Step("exchange", {"order_id": "#W3"}, {"exchanged": "hat"})
    assert book.observe(alone.key, ok, alone.principal, inferred=True) == []
    assert not book.known(alone.key)
    assert book.declare(alone.key, "completed", None) is None  # even when declared
    again = linker.for_call(_fresh(), "exchange", {"order_id": "#W4"})
    (failed,) = book.observe(again.key, FAILED, again.principal, inferred=True)
    assert (failed.ended, failed.outcome, failed.context_known) == ("failed", "unknown", False)
    assert failed.steps == (FAILED,) and failed.failed_at == clock.now
    third = linker.for_call(_fresh(), "exchange", {"order_id": "#W5"})
    book.observe(third.key, ok, third.principal, inferred=True)
    clock.now = 61
    # past the window: the failing one was reported already; the success now
    (success,) = book.expire()
    assert (success.outcome, success.context_known, success.steps) == ("unknown", False, (ok,))
    assert book.stats.unlinked == 3 and book.stats.at_failure == 1 and len(book) == 0


def test_a_failing_call_of_a_known_session_is_evidence_before_the_session_ends() -> None:
    linker, book, clock = _linker()
    first = linker.for_call(_fresh(), "get_order", {"order_id": "#W1"})
    book.observe(first.key, LOOKED, first.principal, inferred=True)
    second = linker.for_call(_fresh(), "exchange", {"order_id": "#W1"})
    (now,) = book.observe(second.key, FAILED, second.principal, inferred=second.inferred)
    assert (now.ended, now.context_known, now.steps) == ("failed", True, (LOOKED, FAILED))
    clock.now = 61
    (ended,) = book.expire()  # the session's end: the same steps, its outcome
    assert (ended.session_id, ended.outcome) == (now.session_id, "abandoned")


def test_a_link_the_gateway_is_unsure_of_is_kept_apart() -> None:
    """Two agents of one token look up the same order: the second lookup, a call the
    first session already made, starts a session of its own; a call that two sessions'
    outputs could answer for joins neither."""
    linker, book, _clock = _linker()
    a = linker.for_call(_fresh(), "get_order", {"order_id": "#W1"})
    book.observe(a.key, LOOKED, a.principal, inferred=True)
    b = linker.for_call(_fresh(), "get_order", {"order_id": "#W1"})
    assert b.how == "new" and b.key != a.key
    book.observe(b.key, LOOKED, b.principal, inferred=True)
    c = linker.for_call(_fresh(), "exchange", {"order_id": "#W1"})
    assert c.how == "new" and c.key not in (a.key, b.key)


def test_a_client_sends_back_the_handle_to_keep_its_session() -> None:
    """A call that declared nothing is given its session's handle; the client that
    declares it (``_meta["sidecar/session"]``) joins that session, whatever it shares."""
    linker, book, _clock = _linker()
    first = linker.for_call(_fresh(), "get_order", {"order_id": "#W1"})
    handle = handle_of(first)
    assert handle is not None and handle.startswith("gw-")
    book.observe(first.key, LOOKED, first.principal, inferred=True)
    declared = Origin("alice", new_connection("alice"), f"named:{handle}")
    again = linker.for_call(declared, "track", {"carrier": "none"})
    assert again.key == first.key and handle_of(again) is None
    book.observe(again.key, Step("track", {"carrier": "none"}, {"ok": 1}), "alice")
    assert book.known(first.key)  # declared: its context is known
    # another principal declaring the same handle is another session
    assert linker.for_call(Origin("bob", None, f"named:{handle}"), "t", {}).key != first.key


def test_low_entropy_values_never_link() -> None:
    assert grounded("2024-05-01") is None and grounded("10:30") is None
    assert grounded("19.99") is None and grounded("2024") is None and grounded(4242) is None
    assert grounded("#W1") == "#W1" and grounded(123456) == "123456"
    linker, book, _clock = _linker()
    first = linker.for_call(_fresh(), "get_order", {"order_id": "#W1"})
    shown = Step("get_order", {"order_id": "#W1"}, {"placed": "2024-05-01", "total": 1999})
    book.observe(first.key, shown, first.principal, inferred=True)
    other = linker.for_call(_fresh(), "list_orders", {"since": "2024-05-01", "min": 1999})
    assert other.how == "new"


def test_an_inferred_session_is_joined_only_within_the_window() -> None:
    linker, book, clock = _linker(window=60)
    first = linker.for_call(_fresh(), "get_order", {"order_id": "#W1"})
    book.observe(first.key, LOOKED, first.principal, inferred=True)
    clock.now = 61
    late = linker.for_call(_fresh(), "get_order", {"order_id": "#W1"})
    assert late.how == "new" and late.key != first.key
    (alone,) = book.expire()  # the first, alone: what the call shows, context unknown
    assert not alone.context_known and book.stats.unlinked == 1


def test_a_connection_that_keeps_its_session_is_never_joined() -> None:
    linker, book, _clock = _linker()
    kept = new_connection("alice")
    linker.request(kept)  # it listed the tools before its first call
    own = linker.for_call(Origin("alice", kept, None), "get_order", {"order_id": "#W1"})
    assert (own.how, own.key, kept.kept) == ("mcp", kept.id, True)
    book.observe(own.key, LOOKED, own.principal, inferred=own.inferred)
    assert linker.for_call(_fresh(), "get_order", {"order_id": "#W1"}).how == "new"
    # a connection whose first call was inferred keeps it once it makes a second call
    conn = new_connection("alice")
    first = linker.for_call(Origin("alice", conn, None), "get_order", {"order_id": "#W9"})
    book.observe(first.key, Step("get_order", {}, {"order_id": "#W9"}), "alice", inferred=True)
    assert linker.for_call(Origin("alice", conn, None), "get_order", {}).key == first.key
    assert conn.kept and linker.for_call(_fresh(), "get_order", {"order_id": "#W9"}).how == "new"


def test_declared_ids_are_scoped_by_principal() -> None:
    linker, _book, _clock = _linker()
    mine = linker.for_call(Origin("alice", None, "named:run-1"), "get_order", {})
    theirs = linker.for_call(Origin("bob", None, "named:run-1"), "get_order", {})
    assert mine.how == "declared" and mine.key != theirs.key
    assert principal_of("Bearer a", "x") != principal_of("Bearer b", "x")
    assert "Bearer" not in principal_of("Bearer secret-token", "x")


def _traced(trace: str, who: str = "alice") -> Origin:
    """A call on a connection of its own that carries trace context."""
    return Origin(who, new_connection(who), None, f"trace:{trace}")


def test_a_trace_two_calls_share_is_one_session_whose_context_is_known() -> None:
    linker, book, _clock = _linker()
    first = linker.for_call(_traced(TRACE), "get_order", {"order_id": "#W3"})
    assert (first.how, first.inferred) == ("trace", True)
    book.observe(first.key, LOOKED, first.principal, first.inferred, traced=True)
    assert not book.known(first.key)  # one call: perhaps a trace of one request
    second = linker.for_call(_traced(TRACE), "get_order", {"order_id": "#W1"})  # no value in common
    assert (second.how, second.key) == ("trace", first.key)
    assert book.known(first.key)  # two calls in one trace: a task's
    book.observe(second.key, FAILED, second.principal, second.inferred, traced=True)
    report = book.close(first.key)
    assert report is not None and [s.tool for s in report.steps] == ["get_order", "exchange"]
    # another principal's calls in the same trace are a session of their own
    assert linker.for_call(_traced(TRACE, "bob"), "get_order", {}).key != first.key


def test_traces_of_one_request_each_are_linked_by_values_and_their_context_kept() -> None:
    """An agent with OpenTelemetry set up and no span around its task: the ``mcp`` client
    sends a new trace with every request.  Such calls are linked as if they carried no
    trace, and a trace of one call that nothing joined is not reported."""
    linker, book, clock = _linker(window=60)
    first = linker.for_call(_traced("1" * 32), "get_order", {"order_id": "#W1"})
    book.observe(first.key, LOOKED, first.principal, first.inferred, traced=True)
    clock.now = 5
    second = linker.for_call(
        _traced("2" * 32), "get_order", {"order_id": "#W1", "item": "blue shirt"}
    )
    assert (second.how, second.key) == ("linked", first.key)
    assert book.steps(second.key) == [LOOKED]  # checked in the lookup's state
    book.observe(second.key, FAILED, second.principal, second.inferred)
    declared = linker.for_own_tool(_traced("3" * 32))  # report_outcome, a trace of its own
    assert declared is not None and declared.key == first.key
    alone = linker.for_call(_traced("4" * 32), "get_order", {"order_id": "#W7"})
    ok = Step("exchange", {"order_id": "#W7"}, {"exchanged": "hat"})
    book.observe(alone.key, ok, alone.principal, alone.inferred, traced=True)
    clock.now = 100  # past the link window, within the idle timeout: still open
    (settled,) = book.expire()  # quiet: what it did is evidence, its context unknown
    assert (settled.ended, settled.context_known) == ("settled", False) and alone.key in book
    clock.now = 400
    reports = book.expire()
    assert [(len(r.steps), r.context_known) for r in reports] == [(2, True)]
    assert book.stats.unlinked == 1
    assert linker.stats["linked"] == 1 and linker.stats["trace"] == 2


def test_a_declared_id_wins_over_a_trace() -> None:
    linker, _book, _clock = _linker()
    keys = set()
    for n, order in enumerate(["#W1", "#W2"]):
        origin = Origin("alice", new_connection("alice"), "named:run-1", f"trace:{n + 1:032x}")
        link = linker.for_call(origin, "get_order", {"order_id": order})
        assert link.how == "declared" and not link.inferred
        keys.add(link.key)
    assert len(keys) == 1
