"""Verdicts before a call and the "may apply" hints of a lookup."""

from __future__ import annotations

import json
from dataclasses import replace

from sidecar.memory import FailureCondition, Predicate, Thresholds, Trace, assess, may_apply
from tests.sidecar.memory.world import get_order, learned, order, product, refund_world, step


def condition(**changes: object) -> FailureCondition:
    base = FailureCondition(
        tool="refund_order",
        signature="Error: Non-delivered order cannot be refunded",
        predicate=Predicate("obj:order_id.status", "==", "pending"),
        kind="deterministic",
        family="bound_field",
        support=3,
        contradictions=0,
        confidence=0.75,
        session_count=3,
        source_count=1,
        sources=("local",),
        failing=3,
        units=40,
        candidates=20,
        chance=0.001,
        confirmations=3,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_levels() -> None:
    t = Thresholds()
    assert t.level(condition()) == "block"
    assert t.level(condition(support=1, confidence=0.5)) == "warn"
    assert t.level(condition(contradictions=1, confidence=0.6)) == "warn"
    assert t.level(condition(contradictions=3, confidence=0.43)) is None
    assert t.level(condition(warn_only=True)) == "warn"
    # a failure of unknown kind reproduced in independent situations, against successes
    assert t.level(condition(kind="unknown")) == "block"
    assert t.level(condition(kind="unknown", support=1, confidence=0.5)) == "warn"
    assert t.level(condition(kind="unknown", candidates=0, units=0)) == "warn"
    assert t.level(condition(kind="transient")) is None
    assert t.level(condition(source="manual", support=0, confidence=1.0)) == "block"
    assert Thresholds(min_support_block=4).level(condition()) == "warn"
    # chance and confirmation
    assert t.level(condition(chance=0.2)) == "warn"
    assert t.level(condition(confirmations=0)) == "warn"
    assert Thresholds(require_confirmation=False).level(condition(confirmations=0)) == "block"


def test_sources_an_untrusted_one_alone_never_blocks() -> None:
    t = Thresholds()
    alone = condition(sources=("alice",), source_count=1)
    assert t.level(alone) == "warn"
    assert t.level(condition(sources=("alice", "bob"), source_count=2)) == "block"
    assert Thresholds(trusted=frozenset({"alice"})).level(alone) == "block"


def test_one_other_source_alone_cannot_contest_a_rule() -> None:
    t = Thresholds()
    rule = condition(sources=("alice", "bob"), source_count=2, contradictions=1, confidence=0.6)
    # one success from a third, untrusted source: shown, not acted on
    assert t.level(replace(rule, contradiction_sources=("mallory",))) == "block"
    assert t.contradictions(replace(rule, contradiction_sources=("mallory",))) == 0
    # from a trusted source, from one of the rule's own sources, or from two sources
    for against in (("local",), ("alice",), ("mallory", "eve")):
        assert t.level(replace(rule, contradiction_sources=against)) == "warn", against
    # one token by two routes (its reports and its traces) is still one other source;
    # its traces are one of the rule's own sources when its reports are
    assert t.contradictions(replace(rule, contradiction_sources=("mallory", "otlp:mallory"))) == 0
    assert t.level(replace(rule, contradiction_sources=("otlp:alice",))) == "warn"


def test_a_tokens_reports_and_traces_are_one_source() -> None:
    t = Thresholds(trusted=frozenset({"local", "carol"}))
    # source_count is counted by witness when learned; the sources say who
    assert t.level(condition(sources=("alice", "otlp:alice"), source_count=1)) == "warn"
    assert t.level(condition(sources=("otlp:carol",), source_count=1)) == "block"


def test_assess_blocks_first_and_explains() -> None:
    before = [get_order(order("#A1", "pending"))]
    args = {"order_id": "#A1", "item_ids": ["1000000001"], "payment_method_id": "card_1"}
    warn = condition(
        predicate=Predicate("obj:order_id.user_id", "==", "user_1"), support=1, confidence=0.5
    )
    verdict = assess([warn, condition()], before, "refund_order", args)
    assert verdict.decision == "block"
    assert [r.level for r in verdict.reasons] == ["block", "warn"]
    assert verdict.reasons[0].observed == 'obj:order_id.status = "pending"'
    assert json.loads(json.dumps(verdict.to_dict()))["decision"] == "block"
    only_warn = assess([warn], before, "refund_order", args)
    assert only_warn.decision == "warn"
    assert assess([condition()], before, "other_tool", args).decision == "allow"
    delivered = [get_order(order("#A1", "delivered"))]
    assert assess([condition()], delivered, "refund_order", args).decision == "allow"


def test_a_trace_and_a_step_list_give_the_same_verdict() -> None:
    memory = learned(refund_world())
    steps = [get_order(order("#A9", "pending"))]
    args = {"order_id": "#A9", "item_ids": ["1000000001"], "payment_method_id": "card_1111111"}
    conditions = memory.conditions("refund_order")
    assert assess(conditions, steps, "refund_order", args) == assess(
        conditions, Trace(steps), "refund_order", args
    )


def test_may_apply_needs_what_the_condition_needs_in_the_session() -> None:
    memory = learned(refund_world())
    conditions = memory.conditions("refund_order")
    pending = [get_order(order("#A9", "pending"))]
    hints = may_apply(conditions, pending, "refund_order")
    assert hints and {h.family for h in hints} == {"bound_field"}
    assert any("status = 'pending'" in h.observed for h in hints)
    assert may_apply(conditions, [get_order(order("#A9", "delivered"))], "refund_order") == []
    assert may_apply(conditions, pending, "other_tool") == []


def test_may_apply_for_a_remembered_value_and_a_state_never_seen_to_succeed() -> None:
    bad = condition(
        predicate=Predicate("elem:new_item_ids", "==", "2000000001"), family="bad_value"
    )
    novel = condition(predicate=Predicate("obj:new_item_ids.available", "not_in", (True,)))
    with_item = [step("get_product", {"product_id": "9000000001"}, product({"2000000001": False}))]
    hints = may_apply([bad, novel], with_item, "refund_order")
    assert {h.family for h in hints} == {"bad_value", "bound_field"}
    assert may_apply([bad], [], "refund_order") == []
    assert may_apply([bad], [], "refund_order", task_input="item 2000000001 please")


def test_argument_only_conditions_are_not_hinted() -> None:
    size = condition(
        predicate=Predicate("same_len:item_ids|new_item_ids", "==", False), family="numeric"
    )
    shape = condition(
        predicate=Predicate("shape:order_id", "not_in", ("#A9",)), family="value_shape"
    )
    assert may_apply([size, shape], [get_order(order("#A1"))], "refund_order") == []


def test_a_warning_needs_its_predicate_likelier_among_failures_than_successes() -> None:
    t = Thresholds()
    # 8 of 10 failing situations, 4 of 5 successes: as frequent either way, no warning
    same = condition(support=8, failing=10, contradictions=4, units=5, confidence=0.62,
                     chance=0.2, confirmations=0)  # fmt: skip
    assert t.level(same) is None
    assert t.level(replace(same, contradictions=3, confidence=0.67)) == "warn"
    # with no success to compare with, the failures alone speak
    assert t.level(replace(same, contradictions=0, units=0, confidence=0.89)) == "warn"
