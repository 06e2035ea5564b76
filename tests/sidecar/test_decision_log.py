"""The decision log: a check or lookup that names its session is kept, redacted and
bounded, written behind the answer; one source cannot crowd the others out; a state
that refuses writes loses no answer and counts what it could not keep."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import InvalidInput, StateUnavailable
from sidecar.review.decisions import ARGUMENTS
from sidecar.storage.decisions import Decision
from tests.support.shop import good_session, lookup
from tests.support.tokens import fabricated

STEPS = [lookup("#C3000", "pending")]
CALL = {"order_id": "#C3000"}


@pytest.fixture
def sc(tmp_path: Path) -> Sidecar:
    opened = Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home")
    opened.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
    opened.report_many([good_session(n) for n in range(20)])
    opened.report_many([fabricated(n, "ops") for n in range(4)])
    return opened


def test_only_checks_that_name_their_session_are_kept_and_secrets_are_not(sc: Sidecar) -> None:
    with sc:
        sc.check_call(STEPS, "exchange_items", CALL)  # no session: not kept
        secret = {**CALL, "api_key": "sk-abcdefghijklmnopqrstuvwxyz0123"}
        verdict = sc.check_call(STEPS, "exchange_items", secret, viewer="alice", session_id="s1")
        big = {"blob": "x" * (ARGUMENTS + 10)}
        sc.check_call(STEPS, "get_order", big, viewer="alice", session_id="s1")
        story = sc.session_activity("src:alice/session:s1")
        first, second = story.decisions
        assert first.decision == verdict.decision == "block" and first.source == "alice"
        assert first.arguments == {**CALL, "api_key": "[REDACTED]"}
        assert [r["rule_id"] for r in first.reasons] == [r.constraint_id for r in verdict.reasons]
        assert "blob" not in second.arguments  # too large to keep, and said so
        assert sum(h.blocked + h.allowed for h in sc.activity(1).hours) == 2
        with pytest.raises(InvalidInput):
            sc.check_call(STEPS, "exchange_items", CALL, session_id="")


def test_one_source_past_its_rate_is_dropped_and_counted_others_are_kept(sc: Sidecar) -> None:
    with sc:
        sc.decisions.per_minute = 5
        for n in range(8):
            sc.check_call(STEPS, "get_order", {"n": n}, viewer="mallory", session_id="m")
        sc.check_call(STEPS, "get_order", CALL, viewer="alice", session_id="a")
        assert len(sc.session_activity("src:mallory/session:m").decisions) == 5
        assert len(sc.session_activity("src:alice/session:a").decisions) == 1
        assert sc.activity(1).dropped == 3


def test_the_log_keeps_the_newest_and_a_refused_write_loses_no_answer(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    with sc:
        sc.decisions.keep = 3
        for n in range(5):
            sc.check_call(STEPS, "get_order", {"n": n}, session_id="k")
        kept = sc.session_activity("session:k").decisions
        assert [d.arguments["n"] for d in kept] == [2, 3, 4]

        def refused(*_args: object, **_kwargs: object) -> None:
            raise StateUnavailable("disk full")

        monkeypatch.setattr(sc.state.decisions, "insert", refused)
        assert sc.check_call(STEPS, "get_order", {"n": 5}, session_id="k").decision == "allow"
        assert sc.decisions.flush() == 0  # kept in memory for the next flush
        monkeypatch.undo()
        assert sc.decisions.flush() == 1
        assert [d.arguments["n"] for d in sc.session_activity("session:k").decisions][-1] == 5


def test_a_gateways_notes_are_checked_and_filed_under_its_source(sc: Sidecar) -> None:
    with sc:
        call = {"tool": "exchange_items", "decision": "held", "session_id": "g1", "arguments": CALL}
        assert sc.note_calls([call], source="gateway:alice") == 1
        (held,) = sc.session_activity("src:gateway:alice/session:g1").decisions
        assert (held.decision, held.source) == ("held", "gateway:alice")
        for bad in ({**call, "decision": "maybe"}, {**call, "tool": ""}, {**call, "reasons": "x"}):
            with pytest.raises(InvalidInput):
                sc.note_calls([bad], source="gateway:alice")
        with pytest.raises(InvalidInput):
            sc.note_calls([call], source="not a source!")


def test_a_session_id_no_backend_can_hold_is_refused_as_input(sc: Sidecar) -> None:
    with sc:
        for bad in ("a\x00b", "\ud800", "line\nbreak"):
            with pytest.raises(InvalidInput, match="session_id"):
                sc.check_call(STEPS, "get_order", CALL, session_id=bad)
            with pytest.raises(InvalidInput, match="session_id"):
                sc.search("an order", session_id=bad)


def test_a_row_no_backend_can_hold_costs_itself_alone(
    tmp_path: Path, state_url: str | None
) -> None:
    """A decision whose text a backend refuses (PostgreSQL holds no NUL; UTF-8 no lone
    surrogate) is dropped and counted; the rest of its batch is written, and the log
    goes on (it is never put back to fail every later flush)."""
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home, database_url=state_url) as sc:
        sc.add_tools([Tool("get_order", "look up an order")])
        sc.check_call([], "get_order", {"n": 1}, session_id="good")
        poisoned = replace(_row(), tool="a\x00\ud800")  # as no check would make it
        sc.decisions.record(poisoned)
        sc.check_call([], "get_order", {"n": 2}, session_id="good")
        assert sc.decisions.flush() == 2 and sc.decisions.dropped == 1
        sc.check_call([], "get_order", {"n": 3}, session_id="good")
        kept = sc.session_activity("session:good").decisions
        assert [d.arguments["n"] for d in kept] == [1, 2, 3]


def _row() -> Decision:
    return Decision("d" * 32, time.time(), "call", "local", "session:bad", "t", "allow")
