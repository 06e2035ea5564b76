"""The one book of observed sessions (:mod:`sidecar.agents.sessions`) and the gateway's
linked book over it: when a session is reported, with what, and within which bounds."""

from __future__ import annotations

import pytest

from sidecar.agents.gateway.guard.sessions import LinkedSessionBook
from sidecar.agents.sessions import SessionBook, SessionLimits, step_size
from sidecar.errors import ConfigError
from sidecar.memory import Step
from sidecar.settings import Settings

OK = Step("get_order", {"order_id": "#W1"}, {"status": "pending"})
BAD = Step("exchange", {"order_id": "#W1"}, None, "Non-delivered order cannot be exchanged")
FIXED = Step("exchange", {"order_id": "#W3"}, {"status": "exchange requested"})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_idle_sessions_expire_and_only_failing_ones_are_reported() -> None:
    clock = Clock()
    book = SessionBook(SessionLimits(idle_s=10), clock=clock)
    book.record("a", OK)
    book.record("a", BAD)
    book.record("b", OK)
    clock.now = 5
    book.record("c", BAD)
    clock.now = 10
    [report] = book.expire()  # a and b are idle; c is not; b has nothing to report
    assert report.outcome == "abandoned" and report.steps == (OK, BAD)
    assert report.ended == "idle" and not report.ongoing
    assert list(book._sessions) == ["c"]
    assert (book.stats.reported, book.stats.unreported) == (1, 1)
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


def test_past_its_bytes_the_book_ends_the_least_recently_active_session() -> None:
    clock = Clock()
    book = SessionBook(SessionLimits(max_bytes=3 * step_size(BAD)), clock=clock)
    book.record("a", BAD)
    clock.now = 1
    book.record("b", BAD)
    book.record("b", BAD)
    assert book.bytes == 3 * step_size(BAD)
    clock.now = 2
    [evicted] = book.record("c", BAD)
    assert evicted.session_id and evicted.steps == (BAD,) and evicted.ended == "evicted"
    assert sorted(book._sessions) == ["b", "c"] and book.bytes == 3 * step_size(BAD)
    # the session being recorded is never the one that makes room
    [b] = book.record("c", BAD)
    assert b.steps == (BAD, BAD) and list(book._sessions) == ["c"]


def test_a_full_session_is_reported_and_goes_on_under_a_new_id() -> None:
    """Dropping its oldest steps instead would change the steps the library recognises
    the session by, and it would never be learned from again."""
    book = SessionBook(SessionLimits(max_steps=2))
    book.record("a", OK)
    book.record("a", BAD)
    (stamp, _steps) = book.stamped_steps("a")
    [full] = book.record("a", FIXED)
    # it goes on: it may yet recover (as it does here), so it is not called abandoned
    assert (full.steps, full.outcome, full.ended) == ((OK, BAD), "unknown", "full")
    assert full.session_id == stamp[0]
    assert book.steps("a") == [FIXED] and book.stats.restarted == 1
    book.record("a", BAD)
    later = book.close("a")
    assert later is not None and later.steps == (FIXED, BAD)
    assert later.session_id != full.session_id  # its own first steps: new evidence
    assert book.bytes == 0


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


def test_a_session_that_goes_on_is_reported_again_only_when_it_changed() -> None:
    book = SessionBook()
    book.record("a", OK)
    book.record("a", BAD)
    now = book.report("a")
    assert now is not None and now.ongoing and now.outcome == "abandoned"
    assert book.report("a") is None  # nothing new
    assert book.close("a") is None  # its end says nothing its report did not
    book.record("b", OK)
    book.record("b", BAD)
    book.record("b", FIXED)
    assert book.report("b") is not None
    book.record("b", BAD)  # new: reported at its end
    end = book.close("b")
    assert end is not None and (end.outcome, len(end.steps)) == ("abandoned", 4)
    assert (book.stats.reports, book.stats.reported, book.stats.unreported) == (3, 2, 0)


def test_the_gateway_reports_a_failing_call_at_once() -> None:
    clock = Clock()
    book = LinkedSessionBook(SessionLimits(idle_s=10), clock=clock)
    assert book.observe("a", OK, "alice") == []
    [failed] = book.observe("a", BAD, "alice")
    assert (failed.ended, failed.outcome, failed.steps) == ("failed", "unknown", (OK, BAD))
    assert failed.failed_at == 0.0 and book.stats.at_failure == 1
    clock.now = 10
    [end] = book.expire()
    assert (end.ended, end.outcome, end.session_id) == ("idle", "abandoned", failed.session_id)
    assert (book.stats.reported, book.stats.ended) == (1, {"idle": 1})


def test_an_inferred_session_idles_out_after_the_link_window() -> None:
    clock = Clock()
    book = LinkedSessionBook(SessionLimits(idle_s=100, report_clean=True), 5.0, clock)
    book.observe("a", OK, "alice", inferred=True)
    book.observe("a", OK, "alice", inferred=True)
    book.observe("b", OK, "alice")
    clock.now = 5
    ended = [r for r in book.expire() if not r.ongoing]
    assert [r.ended for r in ended] == ["idle"] and "a" not in book and "b" in book
    with pytest.raises(ValueError, match="link_window_s"):
        LinkedSessionBook(link_window_s=0)


def test_one_set_of_settings_bounds_both_books() -> None:
    from sidecar.agents.sessions import session_limits

    env = {
        "SIDECAR_SESSION_MAX": "7",
        "SIDECAR_SESSION_MAX_STEPS": "9",
        "SIDECAR_SESSION_MAX_BYTES": "4096",
        "SIDECAR_OTLP_CONVERSATION_IDLE_S": "12.5",  # the old name, still read
    }
    limits = session_limits(Settings.load(env=env), report_clean=False)
    assert (limits.max_sessions, limits.max_steps, limits.max_bytes) == (7, 9, 4096)
    assert (limits.idle_s, limits.report_clean) == (12.5, False)
    both = {**env, "SIDECAR_SESSION_IDLE_S": "3"}
    assert Settings.load(env=both).session_idle_s == 3.0  # the new name wins
    for bad in ({"SIDECAR_SESSION_MAX": "0"}, {"SIDECAR_SESSION_MAX_STEPS": "x"}):
        with pytest.raises(ConfigError, match=r"(?i)session_max"):
            Settings.load(env=bad)


def test_the_gateway_is_told_of_each_session_that_leaves_its_book() -> None:
    """What the gateway keeps beside a session (its renamed views) goes with it."""
    clock = Clock()
    book = LinkedSessionBook(SessionLimits(max_sessions=1, idle_s=10), clock=clock)
    gone: list[str] = []
    book.on_ended = gone.append
    book.observe("a", OK, "alice")
    book.observe("b", OK, "alice")  # a makes room
    book.declare("b", "completed", None)
    book.observe("c", OK, "alice")
    clock.now = 10
    book.expire()
    assert gone == ["a", "b", "c"]
