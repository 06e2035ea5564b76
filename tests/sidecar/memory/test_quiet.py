"""Warnings that say something: a learned rule warns only when it was right often enough
on the sessions it matched and chance does not explain it; a tool that only reads is
warned on established rules alone; and a rule that does not block yet says how many more
situations it needs."""

from __future__ import annotations

from dataclasses import replace

from sidecar.memory import FailureCondition, Predicate, Thresholds, reads_only
from sidecar.memory.chance import chance

T = Thresholds()


def condition(**changes: object) -> FailureCondition:
    """One situation of a deterministic failure, from one trusted source: it warns."""
    base = FailureCondition(
        tool="refund_order",
        signature="Error: Non-delivered order cannot be refunded",
        predicate=Predicate("obj:order_id.status", "==", "pending"),
        kind="deterministic",
        family="bound_field",
        support=1,
        confidence=0.5,
        session_count=1,
        source_count=1,
        sources=("local",),
        failing=1,
        units=40,
        candidates=4,
        chance=chance(1, 1, 0, 40, 4),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_rule_warns_only_when_it_was_right_often_enough_on_the_sessions_it_matched() -> None:
    assert T.level(condition()) == "warn"
    # right in 3 of the 6 sessions it matched (3 failures, 3 successes): under 0.6
    even = condition(support=3, session_count=3, failing=3, contradictions=3, confidence=0.43)
    assert T.level(replace(even, confidence=0.5)) is None
    # 3 of 4: it still warns
    assert T.level(condition(support=3, session_count=3, failing=3, contradictions=1,
                             confidence=0.6, chance=0.2)) == "warn"  # fmt: skip


def test_a_rule_the_memory_calls_likely_by_chance_does_not_warn_but_the_very_call_does() -> None:
    assert T.level(condition(chance=0.5)) is None
    assert T.level(condition(chance=0.49)) == "warn"
    very = condition(predicate=Predicate("value:*", "==", '{"order_id":"#W1"}'), chance=1.0)
    assert T.level(very) == "warn"


def test_a_read_is_warned_on_established_rules_only() -> None:
    assert reads_only("read") and reads_only(" READ ") and reads_only("search")
    assert not reads_only("write") and not reads_only(None) and not reads_only("unspecified")
    weak = condition()
    assert T.level(weak) == "warn" and T.level(weak, read_only=True) is None
    # established (situations, confirmed, beyond chance) but of unknown kind and one
    # situation short of reproduced blocking: a read is still warned
    strong = condition(kind="unknown", support=3, session_count=3, failing=3, chance=0.001,
                       confirmations=3, confidence=0.75, warn_only=True)  # fmt: skip
    assert T.level(strong, read_only=True) == "warn"
    # a block is a block whatever the tool does
    blocking = replace(strong, kind="deterministic", warn_only=False)
    assert T.level(blocking, read_only=True) == "block"
    # a person's rule always speaks
    manual = replace(weak, source="manual", kind="unknown")
    assert T.level(manual, read_only=True) == "warn"


def test_to_block_counts_the_situations_a_rule_needs() -> None:
    one = condition()
    k = T.to_block(one)
    assert k is not None and k >= 1

    # k more failing situations, each from another source, make it block; k - 1 do not
    def grown(n: int) -> FailureCondition:
        support, failing = 1 + n, 1 + n
        return replace(
            one, support=support, failing=failing, session_count=1 + n,
            source_count=1 + n, sources=("local", *(f"s{i}" for i in range(n))),
            confidence=support / (support + 1), chance=chance(support, failing, 0, 40, 4),
            confirmations=support,
        )  # fmt: skip

    assert T.level(grown(k)) == "block"
    assert T.level(grown(k - 1)) != "block"
    assert T.to_block(grown(k)) == 0
    # no number of situations makes a contested, a warn-only or a transient rule block
    assert T.to_block(condition(contradictions=1, confidence=0.33)) is None
    assert T.to_block(condition(warn_only=True)) is None
    assert T.to_block(condition(kind="unknown")) is None
    assert T.to_block(replace(one, source="manual")) is None


def test_a_repeat_whose_message_says_the_effect_is_there_blocks_from_one_situation() -> None:
    again = condition(
        tool="RegisterUser",
        signature="The username already exists.",
        predicate=Predicate("again:call", "==", True),
        family="repeated",
        chance=0.33,
    )
    assert T.level(again) == "block"  # the message's own words are the evidence
    assert T.level(replace(again, warn_only=True)) == "warn"  # it said something else
    assert T.level(replace(again, contradictions=1, confidence=0.33)) != "block"
    assert T.level(replace(again, kind="unknown")) != "block"
    # one untrusted source alone does not block it, as for any other rule
    assert T.level(replace(again, sources=("agent-a",))) != "block"
