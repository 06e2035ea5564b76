"""The call-level memory through the library: sessions reported as steps, honest
counting, the constraint lifecycle, and the check before a call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import InvalidInput
from tests.support.shop import (
    REFUSAL,
    SUCCESSES,
    exchange,
    failing_session,
    good_session,
    lookup,
    teach,
)


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "home", database_url=state_url
    ) as s:
        s.add_tools(
            [
                Tool("get_order", "look up an order by id"),
                Tool("exchange_items", "exchange delivered items of an order"),
                Tool("cancel_order", "cancel a pending order"),
            ]
        )
        yield s


def check_exchange(sc: Sidecar, status: str, order: str = "#C3000") -> str:
    return sc.check_call([lookup(order, status)], "exchange_items", {"order_id": order}).decision


def test_a_failure_met_by_sessions_blocks_the_same_call_in_the_same_state(sc: Sidecar) -> None:
    sc.report_many([good_session(n) for n in range(SUCCESSES)])
    first = sc.report(failing_session(0))
    assert first.status == "archived" and first.pointer
    assert check_exchange(sc, "pending") == "warn"  # one situation: not yet enough to block
    sc.report_many([failing_session(1), failing_session(2)])
    verdict = sc.check_call([lookup("#C3000", "pending")], "exchange_items", {"order_id": "#C3000"})
    assert verdict.decision == "block" and not verdict.safe
    reason = verdict.reasons[0]
    assert reason.kind == "call" and reason.level == "block"
    assert "status" in reason.explanation
    assert "3 situations, 3 sessions, 1 source, 0 successes; confirmed by 3 of 3" in (
        reason.explanation
    )
    assert reason.pointer and reason.pointer.startswith("cold://chains/")
    record = sc.audit(reason.pointer)
    assert record["source"] == "steps" and record["steps"][-1]["error"] == REFUSAL
    # the same tool on a delivered order is fine; the sequence alone proves nothing
    assert check_exchange(sc, "delivered") == "allow"


def test_n_sessions_count_n_and_a_replay_once(sc: Sidecar) -> None:
    sc.report_many([good_session(n) for n in range(SUCCESSES)])
    report = failing_session(7)
    assert sc.report(report).status == "archived"
    again = sc.report(report)
    assert "already archived (replayed report)" in (again.reason or "")
    assert check_exchange(sc, "pending") == "warn"  # still one session
    views = [v for v in sc.constraints() if v.kind == "call"]
    assert {v.support for v in views} == {1}
    # the learner counts the objects acted on: sessions on other orders
    sc.report_many([failing_session(8), failing_session(9)])
    assert check_exchange(sc, "pending") == "block"


def test_a_looping_session_never_makes_a_tool_its_own_prefix(tmp_path: Path) -> None:
    """A session that retried a failing call makes no eviction of that tool, however
    many sessions loop the same way."""
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, evict_min_chains=1) as sc:
        sc.add_tools([Tool("book", "book a flight seat")])
        refusal = "Error: Seat already taken"
        for n in range(3):
            steps = [{"tool": "book", "arguments": {"seat": "1A"}, "error": refusal}] * 3
            sc.report({"steps": steps, "outcome": "abandoned", "session_id": f"loop-{n}"})
        assert sc.decide() == []
        assert sc.evict().evicted == ()
        assert [t.tool_id for t in sc.list_tools()] == ["book"]


def dead_end(n: int) -> dict[str, Any]:
    return {
        "topology": ["get_order", "exchange_items"],
        "outcome": "abandoned",
        "failure": {"signature": REFUSAL},
        "constraint": {"rule": "IF get_order THEN exchange_items is refused"},
        "session_id": f"dead-{n}",
    }


def test_dead_ends_through_a_tool_count_per_session_for_eviction(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        sc.add_tools([Tool("get_order", "x"), Tool("exchange_items", "y")])
        sc.report(dead_end(1))
        decisions = {d.tool_id: d for d in sc.decide()}
        assert decisions["get_order"].action == "keep"
        sc.report(dead_end(2))  # the same dead end met by another session
        assert {d.tool_id: d.action for d in sc.decide()} == {"get_order": "evict"}
        sc.report(good_session(1))  # a success uses it: kept
        assert {d.tool_id: d.action for d in sc.decide()} == {"get_order": "keep"}


def test_a_call_that_succeeded_is_usage_whatever_its_sessions_outcome(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, evict_min_chains=1) as sc:
        sc.add_tools([Tool("get_order", "x"), Tool("exchange_items", "y")])
        sc.report(dead_end(1))
        assert {d.tool_id: d.action for d in sc.decide()} == {"get_order": "evict"}
        # sessions that ended abandoned (or unknown) in which get_order returned fine
        for n in range(2):
            sc.report(failing_session(n) | {"outcome": "unknown"})
        (decision,) = sc.decide()
        assert decision.action == "keep" and "successful call" in decision.reason
        assert sc.evict().evicted == ()


def test_a_condition_is_contested_retired_and_reinstated(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, retire_after=2) as sc:
        teach(sc)
        (view,) = [
            v for v in sc.constraints() if v.kind == "call" and "has status 'pending'" in v.rule
        ]
        assert (view.status, view.support, view.contradictions) == ("active", 3, 0)
        assert (view.sessions, view.sources, view.confirmations) == (3, ("local",), 3)
        assert view.chance is not None and view.chance < 0.05
        assert view.valid_from <= view.last_seen and view.invalid_at is None
        assert check_exchange(sc, "pending") == "block"
        # exchanges of pending orders that succeeded: the condition is contradicted
        for n in range(2):
            order = f"#P{n}"
            sc.report(
                {
                    "steps": [lookup(order, "pending"), exchange(order)],
                    "outcome": "completed",
                    "session_id": f"pending-ok-{n}",
                }
            )
            got = {v.chain_id: v for v in sc.constraints(include_lifted=True)}[view.chain_id]
            if n == 0:
                assert got.status == "contested" and got.contradictions == 1
                assert check_exchange(sc, "pending") == "warn"
        assert got.status == "retired" and got.invalid_at is not None
        assert view.chain_id not in {v.chain_id for v in sc.constraints()}
        assert check_exchange(sc, "pending") == "allow"
        sc.reinstate(view.chain_id, "the upstream rule came back")
        got = {v.chain_id: v for v in sc.constraints()}[view.chain_id]
        assert got.status == "active" and got.invalid_at is None
        sc.lift(view.chain_id, "a false positive")
        assert view.chain_id not in {v.chain_id for v in sc.constraints()}


def test_a_completed_run_contests_a_fatal_sequence(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, retire_after=2) as sc:
        fatal = {
            "topology": ["a", "b", "c"],
            "outcome": "abandoned",
            "failure": {"signature": "HTTP 422 unprocessable"},
            "constraint": {"rule": "IF a, b THEN c fails"},
        }
        chain = sc.report(fatal)
        assert not sc.check(["a", "b", "c"]).safe
        sc.report({"topology": ["x", "a", "b", "c"], "outcome": "completed"})
        (view,) = sc.constraints()
        assert (view.status, view.contradictions) == ("contested", 1)
        result = sc.check(["a", "b", "c"])
        assert result.safe and result.warnings  # warns, does not block
        lookup_after = sc.search("c", k=5, after=["a", "b"])
        assert "c" not in {w.tool_id for w in lookup_after.withheld}
        sc.report({"topology": ["a", "b", "c", "d"], "outcome": "completed"})
        assert sc.constraints() == [] and sc.check(["a", "b", "c"]).safe
        sc.reinstate(chain.chain_id or "", "seen failing again")
        assert not sc.check(["a", "b", "c"]).safe


def test_a_hand_written_condition_blocks_on_its_authors_word(sc: Sidecar) -> None:
    report = failing_session(0)
    report["constraint"] = {
        "conditions": [
            {
                "tool": "cancel_order",
                "signature": "Error: Non-pending order cannot be cancelled",
                "predicate": {"feature": "obj:order_id.status", "op": "==", "value": "delivered"},
            }
        ]
    }
    sc.report(report)
    verdict = sc.check_call([lookup("#Z1", "delivered")], "cancel_order", {"order_id": "#Z1"})
    assert verdict.decision == "block"
    assert "written by hand" in verdict.reasons[0].explanation
    assert sc.check_call([lookup("#Z1", "pending")], "cancel_order", {"order_id": "#Z1"}).safe


def test_lookup_with_steps_withholds_and_warns_apart(sc: Sidecar) -> None:
    teach(sc)
    steps = [lookup("#Q1", "pending")]
    result = sc.search("exchange items of an order", k=3, steps=steps)
    hit = {h.tool_id: h for h in result.hits}["exchange_items"]
    assert any(w.startswith("may fail:") and "status" in w for w in hit.warnings)
    assert result.withheld == ()  # a call-level condition warns in a lookup, never withholds
    calm = sc.search("exchange items of an order", k=3, steps=[lookup("#Q2", "delivered")])
    assert not {h.tool_id: h for h in calm.hits}["exchange_items"].warnings


def test_bad_step_reports_are_rejected_and_change_nothing(sc: Sidecar) -> None:
    bad = [
        {"steps": [], "outcome": "abandoned"},
        {"steps": [{"tool": "x", "arguments": [], "error": None}]},
        {"steps": [{"tool": "bad id", "arguments": {}}]},
        {"steps": [{"tool": "x", "arguments": {"n": float("nan")}}]},
        {"steps": [{"tool": "x", "output": "\ud800"}]},
        {"steps": [{"tool": "x", "extra": 1}]},
        {"steps": [{"tool": "x"}], "outcome": "won"},
    ]
    results = sc.report_many(bad)
    assert [r.status for r in results] == ["rejected"] * len(bad)
    assert sc.constraints(include_lifted=True) == []
    with pytest.raises(InvalidInput):
        sc.check_call([{"tool": "x", "arguments": "no"}], "y")
    with pytest.raises(InvalidInput):
        sc.check_call([], "bad id")


def test_secrets_in_steps_are_redacted_before_they_are_stored(sc: Sidecar) -> None:
    token = "ghp_" + "A1b2C3d4" * 5
    report = failing_session(0)
    report["steps"][0]["arguments"]["api_key"] = "sk-live-0123456789abcdef0123"
    report["steps"][1]["error"] = f"{REFUSAL} (token {token})"
    result = sc.report(report)
    text = str(sc.audit(result.pointer or ""))
    assert token not in text and "sk-live-0123456789abcdef0123" not in text
    assert "[REDACTED]" in text


def test_outputs_can_be_kept_out_of_the_cold_record(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, keep_outputs=False) as sc:
        result = sc.report(failing_session(0))
        steps = sc.audit(result.pointer or "")["steps"]
        assert [s["output"] for s in steps] == [None, None]
        assert steps[0]["arguments"] == {"order_id": "#A1000"}


@pytest.mark.parametrize("order", ["completed first", "abandoned first", "one batch"])
def test_a_fatal_sequence_seen_completing_is_contested_whatever_the_order(
    tmp_path: Path, order: str
) -> None:
    completed = {"topology": ["alpha", "beta", "gamma"], "outcome": "completed",
                 "session_id": "ok-1"}  # fmt: skip
    abandoned = {
        "topology": ["alpha", "beta", "gamma"],
        "outcome": "abandoned",
        "failure": {"signature": "HTTP 422 unprocessable"},
        "constraint": {"rule": "IF alpha, beta THEN gamma fails"},
        "session_id": "bad-1",
    }
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        if order == "completed first":
            sc.report(completed)
            sc.report(abandoned)
        elif order == "abandoned first":
            sc.report(abandoned)
            sc.report(completed)
        else:
            sc.report_many([completed, abandoned])
        result = sc.check(["alpha", "beta", "gamma"])
        assert result.safe and result.warnings, order  # contested: a warning, no block
        (view,) = sc.constraints()
        assert (view.status, view.contradictions) == ("contested", 1)
        sc.report(completed)  # a replay counts nothing twice
        assert sc.constraints()[0].contradictions == 1


def test_usage_committed_after_the_decision_keeps_the_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An eviction races a session that uses the tool: the session commits after the
    decision and before the move; the move re-reads usage in its own transaction and
    leaves the tool where it is."""
    from sidecar.eviction import Evictor

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, evict_min_chains=1) as sc:
        sc.add_tools([Tool("get_order", "x"), Tool("exchange_items", "y")])
        sc.report(dead_end(1))
        decide = Evictor.decide

        def decide_then_race(self: Evictor, min_chains: int | None = None) -> Any:
            decisions = decide(self, min_chains)
            assert {d.tool_id: d.action for d in decisions} == {"get_order": "evict"}
            sc.report(failing_session(9) | {"outcome": "unknown"})  # get_order succeeds
            return decisions

        monkeypatch.setattr(Evictor, "decide", decide_then_race)
        report = sc.evict()
        assert report.evicted == ()
        (kept,) = report.kept
        assert kept.tool_id == "get_order" and "since the decision" in kept.reason
        assert "get_order" in {t.tool_id for t in sc.list_tools()}
