"""Learning conditions from sessions: counts, explanations, incremental intake, bounds
and the JSON forms."""

from __future__ import annotations

import json

import pytest

from sidecar.memory import (
    FailureCondition,
    FailureMemory,
    LearnParams,
    Predicate,
    Thresholds,
    assess,
)
from sidecar.memory.conditions import describe
from tests.sidecar.memory.world import (
    get_order,
    learned,
    order,
    refund,
    refund_world,
    session,
    step,
)

REFUND_ARGS = {"item_ids": ["1000000001"], "payment_method_id": "card_1111111"}


def status_conditions(memory: FailureMemory) -> dict[str, FailureCondition]:
    return {
        c.predicate.op: c
        for c in memory.conditions("refund_order")
        if c.predicate.feature == "obj:order_id.status"
    }


def test_a_learned_condition_carries_its_evidence_and_explains_itself() -> None:
    found = status_conditions(learned(refund_world()))
    equal = found["=="]
    assert equal.predicate == Predicate("obj:order_id.status", "==", "pending")
    assert (equal.family, equal.kind, equal.support, equal.contradictions) == (
        "bound_field",
        "deterministic",
        3,
        0,
    )
    assert (equal.session_count, equal.source_count, equal.sources) == (3, 1, ("local",))
    assert (equal.failing, equal.units, equal.confirmations) == (3, 20, 3)
    assert equal.candidates > 1 and 0 < equal.chance < 0.05
    assert equal.confidence == pytest.approx(3 / 4, abs=1e-3)
    assert equal.sessions == ("fail-0", "fail-1", "fail-2")
    assert equal.explanation.startswith(
        "refund_order fails with 'Error: Non-delivered order cannot be refunded' when the "
        "object order_id refers to has status 'pending' (3 situations, 3 sessions, 1 source, "
        "0 successes; confirmed by 3 of 3; 1 chance in ~"
    )
    assert equal.explanation.endswith(f"among {equal.candidates} candidate features)")
    novel = found["not_in"]
    assert novel.predicate.value == ("delivered",)
    assert "never seen to succeed (seen: 'delivered')" in novel.explanation


def test_successes_that_match_are_contradictions() -> None:
    sessions = refund_world()
    o = order("#A5000", "pending")
    sessions.append(
        session("pending-ok", get_order(o), refund("#A5000", ["1000000001"], "card_1111111"))
    )
    equal = status_conditions(learned(sessions))["=="]
    assert equal.contradictions == 1
    assert Thresholds().level(equal) == "warn"


def test_novelty_is_contradicted_by_successes_whose_value_no_other_success_had() -> None:
    sessions = refund_world()
    for n, status in enumerate(("processed", "processed", "shipped")):
        o = order(f"#A51{n}0", status)
        sessions.append(
            session(f"new-{n}", get_order(o), refund(o["order_id"], ["1000000001"], "card_1"))
        )
    novel = status_conditions(learned(sessions)).get("not_in")
    # left out, the 'shipped' success would have been refused: it is the one success
    # whose status no other success had
    assert novel is not None and novel.contradictions == 1
    assert set(novel.predicate.value) == {"delivered", "processed", "shipped"}


def test_transient_failures_teach_nothing_and_unknown_ones_only_warn() -> None:
    flaky = [
        session(f"t{n}", step("fetch", {"url_id": "u_1"}, error="HTTP 503 Service Unavailable"))
        for n in range(3)
    ]
    assert learned(flaky).conditions("fetch") == []
    odd = [
        session(f"o{n}", step("fetch", {"url_id": "u_1"}, error="it went sideways"))
        for n in range(3)
    ]
    conditions = learned(odd).conditions("fetch")
    assert conditions and {c.kind for c in conditions} == {"unknown"}
    levels = {c.predicate.feature: Thresholds().level(c) for c in conditions}
    # never a block; the very call warns, and no generalization the memory itself
    # calls likely by chance (no success to contrast it with) does
    assert levels["value:*"] == "warn" and "block" not in levels.values()
    assert all(
        lvl is None
        for c in conditions
        if c.chance >= 0.5
        for lvl in [levels[c.predicate.feature]]
        if c.predicate.feature != "value:*"
    )


def test_learning_is_incremental() -> None:
    memory = FailureMemory()
    args = {"order_id": "#A3001", **REFUND_ARGS}
    before = [get_order(order("#A3001", "pending"))]
    for s in refund_world()[:4]:
        memory.add_session(s)
    assert (
        assess(memory.conditions("refund_order"), before, "refund_order", args).decision == "allow"
    )
    for s in refund_world()[4:]:
        memory.add_session(s)
    assert (
        assess(memory.conditions("refund_order"), before, "refund_order", args).decision == "block"
    )


def test_the_memory_round_trips_through_json() -> None:
    memory = learned(refund_world())
    memory.add_condition(
        FailureCondition.from_dict(
            {
                "tool": "refund_order",
                "signature": "Error: Refunds are closed",
                "predicate": {"feature": "obj:order_id.status", "op": "==", "value": "archived"},
            }
        )
    )
    restored = FailureMemory.from_dict(json.loads(json.dumps(memory.to_dict())))
    assert [c.to_dict() for c in restored.conditions()] == [
        c.to_dict() for c in memory.conditions()
    ]
    restored.add_session(refund_world()[-1])
    assert status_conditions(restored)["=="].support == 3  # the same session, the same evidence


def test_condition_json_round_trip_and_hand_written_defaults() -> None:
    condition = status_conditions(learned(refund_world()))["not_in"]
    data = json.loads(json.dumps(condition.to_dict()))
    assert FailureCondition.from_dict(data) == condition
    assert data["id"] == condition.condition_id
    manual = FailureCondition.from_dict(
        {
            "tool": "refund_order",
            "signature": "Error: Order already refunded",
            "predicate": {"feature": "obj:order_id.status", "op": "==", "value": "refunded"},
        }
    )
    assert (manual.source, manual.kind, manual.family, manual.confidence) == (
        "manual",
        "deterministic",
        "bound_field",
        1.0,
    )
    assert manual.explanation.endswith("has status 'refunded' (written by hand)")
    assert Thresholds().level(manual) == "block"


@pytest.mark.parametrize(
    "data",
    [
        {"signature": "x", "predicate": {"feature": "value:*", "op": "==", "value": 1}},
        {"tool": "t", "predicate": {"feature": "value:*", "op": "==", "value": 1}},
        {"tool": "t", "signature": "x", "predicate": {"feature": "value:*", "op": "~", "value": 1}},
        {"tool": "t", "signature": "x", "predicate": {"feature": "nope:a", "op": "==", "value": 1}},
        {
            "tool": "t",
            "signature": "x",
            "predicate": {"feature": "len:a", "op": ">", "value": "big"},
        },
        {
            "tool": "t",
            "signature": "x",
            "predicate": {"feature": "shape:a", "op": "not_in", "value": "A9"},
        },
        {
            "tool": "t",
            "signature": "x",
            "support": -1,
            "predicate": {"feature": "value:*", "op": "==", "value": 1},
        },
    ],
)
def test_malformed_conditions_are_refused(data: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError):
        FailureCondition.from_dict(data)


def test_bounds_hold() -> None:
    params = LearnParams(max_failures_per_group=3, max_values_per_feature=4, max_bad_values=4)
    memory = FailureMemory(params)
    for n in range(6):
        memory.add_session(
            session(f"f{n}", step("find", {"key": f"k_{n}"}, error="Error: Key not found"))
        )
    for n in range(10):
        memory.add_session(session(f"s{n}", step("find", {"key": f"ok_{n}"}, "v")))
    state = memory.to_dict()
    assert all(len(g["failures"]) == 3 for g in state["groups"])
    assert all(len(table) <= 4 for table in state["tools"]["find"]["values"].values())
    # a value that failed and then succeeded never blocks, full table or not: the table
    # knows it succeeded, or knows that it cannot tell
    memory.add_session(session("back", step("find", {"key": "k_5"}, "v")))
    back = [c for c in memory.conditions("find") if c.predicate.value == '{"key":"k_5"}']
    assert all(Thresholds().level(c) != "block" for c in back)


@pytest.mark.parametrize(
    ("feature", "op", "value", "words"),
    [
        ("obj:order_id.status", "not_in", ("delivered",),
         "the object order_id refers to has a status never seen to succeed (seen: 'delivered')"),
        ("len:order_id.payment_history", "==", 2,
         "the object order_id refers to has payment_history size 2"),
        ("len:new_item_ids", "<", 1, "new_item_ids has length below 1, beyond any seen to succeed"),
        ("shape:order_id", "not_in", ("#A9{7}",),
         "order_id has a shape never seen to succeed (seen: '#A9{7}')"),
        ("rel:pay@order_id.payments[].id", "==", "none",
         "no value of pay is among the payments[].id of the object order_id refers to"),
        ("rel:pay@order_id.payments[].id", "not_in", ("all",),
         "not every value of pay is among the payments[].id of the object order_id refers to"),
        ("same_len:a|b", "==", False, "a and b differ in length"),
        ("same_at:a|b", "==", True, "a and b hold the same value at some position"),
        ("grounded:id", "==", False, "id appears in no earlier output, argument or the task input"),
        ("cmp:sum(a.price)>b.balance", "==", True,
         "sum(a.price) exceeds the balance of the object b refers to"),
        ("value:*", "==", '{"k":"v"}', """its arguments are '{"k":"v"}'"""),
        ("elem:ids", "==", "7", "ids includes '7'"),
    ],
)  # fmt: skip
def test_predicates_in_words(feature: str, op: str, value: object, words: str) -> None:
    assert describe(Predicate(feature, op, value)) == words  # type: ignore[arg-type]


def test_a_condition_blocks_once_each_of_its_situations_is_predicted_by_the_others() -> None:
    # two situations against few successes: each alone is what chance gives, so the
    # condition is unconfirmed and warns; against more successes, the others predict
    # each one: confirmed, it blocks
    few = status_conditions(learned(refund_world(("#A1001", "#A1002"), successes=6)))["=="]
    assert (few.support, few.confirmations) == (2, 0)
    assert "unconfirmed" in few.explanation and Thresholds().level(few) == "warn"
    many = status_conditions(learned(refund_world(("#A1001", "#A1002"), successes=40)))["=="]
    assert (many.support, many.confirmations) == (2, 2)
    assert "confirmed by 2 of 2" in many.explanation and Thresholds().level(many) == "block"
