"""Every feature family, each both ways: the features of a call, and a condition learned
from hand-written sessions that holds (warn or block) for one call and not for another."""

from __future__ import annotations

from sidecar.memory import FailureMemory, LearnParams, Session, assess, call_features
from sidecar.memory.verdict import Verdict
from tests.sidecar.memory.world import (
    COUNT_MISMATCH,
    NOT_DELIVERED,
    NOT_FOUND,
    get_order,
    learned,
    order,
    product,
    refund,
    refund_world,
    session,
    step,
)


def verdict(
    memory: FailureMemory, before: list, tool: str, arguments: dict, told: str | None = None
) -> Verdict:  # type: ignore[type-arg]
    return assess(memory.conditions(tool), before, tool, arguments, told)


def families(v: Verdict) -> set[str]:
    return {r.family for r in v.reasons}


# ---- bad value -------------------------------------------------------------------------
def account_world() -> list[Session]:
    out = [
        session(f"miss-{n}", step("find_account", {"email": "zed9@example.com"}, error=NOT_FOUND))
        for n in range(2)
    ]
    out += [
        session(f"hit-{n}", step("find_account", {"email": f"user{n}@example.com"}, f"user_{n}"))
        for n in range(3)
    ]
    return out


def test_bad_value_holds_for_the_remembered_value_only() -> None:
    memory = learned(account_world())
    blocked = verdict(memory, [], "find_account", {"email": "zed9@example.com"})
    assert blocked.decision == "block" and families(blocked) == {"bad_value"}
    assert "zed9@example.com" in blocked.reasons[0].explanation
    assert verdict(memory, [], "find_account", {"email": "amy7@example.com"}).decision == "allow"


def test_a_bad_value_that_succeeds_later_is_forgotten() -> None:
    memory = learned(account_world())
    memory.add_session(
        session("now-ok", step("find_account", {"email": "zed9@example.com"}, "zed_9"))
    )
    assert verdict(memory, [], "find_account", {"email": "zed9@example.com"}).decision == "allow"


def test_one_argument_of_many_warns_unless_the_error_names_it() -> None:
    # the failing calls share a payment method with nothing to do with the failure
    failing = [
        session(
            f"f{n}",
            get_order(order(f"#A10{n}0", "pending")),
            refund(f"#A10{n}0", ["1000000001"], "card_9999999", NOT_DELIVERED),
        )
        for n in range(2)
    ]
    memory = learned([*refund_world()[:4], *failing])
    conditions = [
        c
        for c in memory.conditions("refund_order")
        if c.predicate.feature == "value:payment_method_id"
    ]
    assert conditions and all(c.warn_only for c in conditions)
    assert conditions[0].support == 2 and conditions[0].contradictions == 0
    named_error = "Error: New item 2000000009 not found or available"
    sessions = [
        session(
            f"s{n}",
            step(
                "swap", {"order_id": f"#A{n}00", "new_item_ids": ["2000000009"]}, error=named_error
            ),
        )
        for n in range(2)
    ]
    named = learned(sessions).conditions("swap")
    elem = [c for c in named if c.predicate.feature == "elem:new_item_ids"]
    assert elem and not elem[0].warn_only


def test_bad_value_features() -> None:
    features = call_features([], "swap", {"order_id": "#A1", "new_item_ids": ["1", "2"]})
    assert features["value:*"] == '{"new_item_ids":["1","2"],"order_id":"#A1"}'
    assert features["value:order_id"] == "#A1"
    assert features["elem:new_item_ids"] == ["1", "2"]
    single = call_features([], "find_account", {"email": "a_1@x.com"})
    assert "value:email" not in single  # the whole argument set says it


# ---- not grounded ------------------------------------------------------------------------
def grounding_world() -> list[Session]:
    out = []
    for n, invented in enumerate(("#A9001", "#A9002")):
        out.append(
            session(
                f"invented-{n}",
                step("list_orders", {"user_id": "u_1"}, {"orders": ["#A1001"]}),
                step("get_order", {"order_id": invented}, error="Error: Order not found"),
            )
        )
    for n in range(3):
        oid = f"#A10{n:02d}"
        out.append(
            session(
                f"known-{n}",
                step("list_orders", {"user_id": "u_1"}, {"orders": [oid]}),
                step("get_order", {"order_id": oid}, order(oid)),
            )
        )
    return out


def test_not_grounded_holds_for_an_invented_id_only() -> None:
    memory = learned(grounding_world())
    before = [step("list_orders", {"user_id": "u_1"}, {"orders": ["#A1005"]})]
    invented = verdict(memory, before, "get_order", {"order_id": "#A7777"})
    assert invented.decision == "block" and "not_grounded" in families(invented)
    assert verdict(memory, before, "get_order", {"order_id": "#A1005"}).decision == "allow"
    # the user said it: grounded in the task input
    told = verdict(memory, before, "get_order", {"order_id": "#A7777"}, told="it is #A7777")
    assert "not_grounded" not in families(told)


def test_grounded_features() -> None:
    before = [step("list_orders", {"user_id": "u_1"}, {"orders": ["#A1"]})]
    assert call_features(before, "get_order", {"order_id": "#A1"})["grounded:order_id"] is True
    assert call_features(before, "get_order", {"order_id": "#A2"})["grounded:order_id"] is False
    assert (
        call_features(before, "get_order", {"order_id": "#A2"}, "about #A2")["grounded:order_id"]
        is True
    )
    # an earlier argument grounds it too
    assert call_features(before, "x", {"user_id": "u_1"})["grounded:user_id"] is True
    # free text is not an id: no grounding feature
    assert "grounded:reason" not in call_features(before, "x", {"reason": "no longer needed"})


# ---- value shape -------------------------------------------------------------------------
def shape_world() -> list[Session]:
    out = [
        session(f"ok-{n}", step("get_order", {"order_id": f"#W100000{n}"}, order(f"#W100000{n}")))
        for n in range(3)
    ]
    out += [
        session(f"bad-{n}", step("get_order", {"order_id": oid}, error="Error: Order not found"))
        for n, oid in enumerate(("#9502127", "#9502128"))
    ]
    return out


def test_value_shape_holds_for_a_shape_never_seen_to_succeed() -> None:
    memory = learned(shape_world())
    novel = verdict(memory, [], "get_order", {"order_id": "#1234567"})
    assert novel.decision == "block" and "value_shape" in families(novel)
    assert verdict(memory, [], "get_order", {"order_id": "#W7654321"}).decision == "allow"


def test_failures_before_any_success_are_no_evidence_of_novelty() -> None:
    # nothing had been seen to succeed when these failed: "never seen to succeed" then
    # says nothing about the value
    memory = learned([*shape_world()[3:], *shape_world()[:3]])
    assert not [c for c in memory.conditions("get_order") if c.family == "value_shape"]


def test_shape_features() -> None:
    features = call_features(
        [], "swap", {"order_id": "#W1234567", "item_ids": ["1000000001", "#X1"]}
    )
    assert features["shape:order_id"] == "#A9{7}"
    assert features["shape:item_ids"] == ["9{10}", "#A9"]


# ---- bound object field ----------------------------------------------------------------
def test_bound_field_holds_for_the_state_of_the_object_acted_on() -> None:
    memory = learned(refund_world())
    pending = order("#A3001", "pending")
    blocked = verdict(
        memory,
        [get_order(pending)],
        "refund_order",
        {"order_id": "#A3001", "item_ids": ["1000000001"], "payment_method_id": "card_1111111"},
    )
    assert blocked.decision == "block" and "bound_field" in families(blocked)
    assert "status" in " ".join(r.explanation for r in blocked.reasons)
    delivered = order("#A3002", "delivered")
    allowed = verdict(
        memory,
        [get_order(delivered)],
        "refund_order",
        {"order_id": "#A3002", "item_ids": ["1000000001"], "payment_method_id": "card_1111111"},
    )
    assert allowed.decision == "allow"


def test_an_incidental_value_of_another_object_does_not_hold() -> None:
    # a pending order elsewhere in the session is not the order refunded
    memory = learned(refund_world())
    before = [get_order(order("#A3003", "pending")), get_order(order("#A3004", "delivered"))]
    allowed = verdict(
        memory,
        before,
        "refund_order",
        {"order_id": "#A3004", "item_ids": ["1000000001"], "payment_method_id": "card_1111111"},
    )
    assert allowed.decision == "allow"


def test_sessions_acting_on_the_same_object_are_one_piece_of_evidence() -> None:
    memory = learned(refund_world(failing_orders=("#A1001", "#A1001")))
    status = [
        c for c in memory.conditions("refund_order") if c.predicate.feature == "obj:order_id.status"
    ]
    assert status and all(c.support == 1 for c in status)
    each = FailureMemory(LearnParams(count_objects_once=False))
    for s in refund_world(failing_orders=("#A1001", "#A1001")):
        each.add_session(s)
    counted = [
        c for c in each.conditions("refund_order") if c.predicate.feature == "obj:order_id.status"
    ]
    assert counted and all(c.support == 2 for c in counted)


def test_bound_field_features_follow_list_elements_and_the_latest_state() -> None:
    before = [
        step(
            "get_product",
            {"product_id": "9000000001"},
            product({"2000000001": False, "2000000002": True}),
        )
    ]
    features = call_features(before, "swap", {"new_item_ids": ["2000000001", "2000000002"]})
    assert features["obj:new_item_ids.available"] == [False, True]
    assert features["bound:new_item_ids"] is True
    assert (
        call_features(before, "swap", {"new_item_ids": ["2000000003"]})["bound:new_item_ids"]
        is False
    )
    after_write = [
        *before,
        get_order(order("#A1", "pending")),
        step("refund_order", {"order_id": "#A1"}, order("#A1", "refund requested")),
    ]
    assert (
        call_features(after_write, "x", {"order_id": "#A1"})["obj:order_id.status"]
        == "refund requested"
    )


def test_an_identifier_field_never_becomes_a_state_condition() -> None:
    # every failing order belongs to another user: user_id has many values, so no
    # "user_id == ..." condition, however clean its record
    sessions = []
    for n in range(16):
        o = order(f"#A40{n:02d}", "pending" if n < 3 else "delivered", user=f"user_{n:03d}")
        err = NOT_DELIVERED if n < 3 else None
        sessions.append(
            session(
                f"s{n}", get_order(o), refund(o["order_id"], ["1000000001"], "card_1111111", err)
            )
        )
    memory = learned(sessions)
    features = {c.predicate.feature for c in memory.conditions("refund_order")}
    assert "obj:order_id.status" in features
    assert "obj:order_id.user_id" not in features


# ---- relation ----------------------------------------------------------------------------
ORIGINAL = "Error: Payment method should be the original payment method"


def relation_world() -> list[Session]:
    out = []
    for n in range(2):
        o = order(f"#A50{n:02d}", payments=["card_1111111"])
        out.append(
            session(
                f"other-{n}",
                get_order(o),
                refund(o["order_id"], ["1000000001"], f"paypal_22222{n:02d}", ORIGINAL),
            )
        )
    for n in range(3):
        o = order(f"#A60{n:02d}", payments=[f"card_33333{n:02d}"])
        out.append(
            session(
                f"same-{n}",
                get_order(o),
                refund(o["order_id"], ["1000000001"], f"card_33333{n:02d}"),
            )
        )
    return out


def test_relation_holds_when_the_payment_is_not_among_the_orders_payments() -> None:
    memory = learned(relation_world())
    o = order("#A7001", payments=["card_4444444"])
    foreign = verdict(
        memory,
        [get_order(o)],
        "refund_order",
        {"order_id": "#A7001", "item_ids": ["1000000001"], "payment_method_id": "paypal_5555555"},
    )
    assert foreign.decision == "block" and "relation" in families(foreign)
    own = verdict(
        memory,
        [get_order(o)],
        "refund_order",
        {"order_id": "#A7001", "item_ids": ["1000000001"], "payment_method_id": "card_4444444"},
    )
    assert "relation" not in families(own) and own.decision == "allow"


def test_relation_features() -> None:
    before = [
        get_order(order("#A1", items=["1000000001", "1000000002"], payments=["card_1111111"]))
    ]
    args = {
        "order_id": "#A1",
        "item_ids": ["1000000001", "1000000009"],
        "payment_method_id": "card_1111111",
    }
    features = call_features(before, "refund_order", args)
    assert features["rel:payment_method_id@order_id.payment_history[].payment_method_id"] == "all"
    assert features["rel:item_ids@order_id.items[].item_id"] == "some"
    args["item_ids"] = ["1000000008"]
    assert (
        call_features(before, "refund_order", args)["rel:item_ids@order_id.items[].item_id"]
        == "none"
    )


# ---- numeric and size --------------------------------------------------------------------
def swap_world() -> list[Session]:
    out = []
    for n, (old, new) in enumerate(((["1000000001", "1000000002"], []), (["1000000003"], []))):
        o = order(f"#A80{n:02d}", "pending", items=old)
        args = {"order_id": o["order_id"], "item_ids": old, "new_item_ids": new}
        out.append(session(f"short-{n}", get_order(o), step("swap", args, error=COUNT_MISMATCH)))
    for n in range(3):
        o = order(f"#A90{n:02d}", "pending", items=[f"10000000{n}{n}"])
        args = {
            "order_id": o["order_id"],
            "item_ids": [f"10000000{n}{n}"],
            "new_item_ids": [f"20000000{n}{n}"],
        }
        out.append(session(f"ok-{n}", get_order(o), step("swap", args, o)))
    return out


def test_size_condition_holds_when_two_lists_differ_in_length() -> None:
    memory = learned(swap_world())
    o = order("#A9901", "pending", items=["1000000007"])
    short = verdict(
        memory,
        [get_order(o)],
        "swap",
        {
            "order_id": "#A9901",
            "item_ids": ["1000000007", "1000000008"],
            "new_item_ids": ["2000000007"],
        },
    )
    assert short.decision == "block" and "numeric" in families(short)
    assert any("differ in length" in r.explanation for r in short.reasons)
    even = verdict(
        memory,
        [get_order(o)],
        "swap",
        {"order_id": "#A9901", "item_ids": ["1000000007"], "new_item_ids": ["2000000007"]},
    )
    assert even.decision == "allow"


def test_numeric_features_both_ways() -> None:
    card = {
        "user_id": "u_1",
        "payment_methods": {"gift_card_1234567": {"source": "gift_card", "balance": 30.0}},
    }
    before = [
        step("get_user", {"user_id": "u_1"}, card),
        step(
            "get_product",
            {"product_id": "9000000001"},
            product({"2000000001": True, "2000000002": True}, price=20.0),
        ),
        get_order(order("#A1", payments=["card_1", "card_2"])),
    ]
    two = {
        "new_item_ids": ["2000000001", "2000000002"],
        "item_ids": ["2000000001", "2000000003"],
        "payment_method_id": "gift_card_1234567",
        "order_id": "#A1",
    }
    f = call_features(before, "swap", two)
    assert f["same_len:item_ids|new_item_ids"] is True
    assert f["overlap:item_ids|new_item_ids"] is True
    assert f["same_at:item_ids|new_item_ids"] is True
    assert f["len:order_id.payment_history"] == 2
    assert f["cmp:sum(new_item_ids.price)>payment_method_id.balance"] is True
    one = {**two, "new_item_ids": ["2000000002"], "item_ids": ["2000000001"]}
    g = call_features(before, "swap", one)
    assert g["same_len:item_ids|new_item_ids"] is True
    assert g["overlap:item_ids|new_item_ids"] is False
    assert g["same_at:item_ids|new_item_ids"] is False
    assert g["cmp:sum(new_item_ids.price)>payment_method_id.balance"] is False
    assert (
        call_features(before, "swap", {**two, "new_item_ids": []})["same_len:item_ids|new_item_ids"]
        is False
    )
