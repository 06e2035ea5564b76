"""Every feature family, each both ways: the features of a call, and a condition learned
from hand-written sessions that holds (warn or block) for one call and not for another."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sidecar.memory import (
    FailureCondition,
    FailureMemory,
    LearnParams,
    Session,
    Step,
    Thresholds,
    assess,
    call_features,
)
from sidecar.memory.predicate import Predicate
from sidecar.memory.thresholds import Verdict
from tests.sidecar.memory.world import (
    COUNT_MISMATCH,
    NOT_DELIVERED,
    NOT_FOUND,
    SUCCESSES,
    get_order,
    learned,
    order,
    own,
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
        for n in range(SUCCESSES)
    ]
    return out


def test_bad_value_holds_for_the_remembered_value_only() -> None:
    memory = learned(account_world())
    blocked = verdict(memory, [], "find_account", {"email": "zed9@example.com"})
    assert blocked.decision == "block" and families(blocked) == {"bad_value"}
    assert "zed9@example.com" in blocked.reasons[0].explanation
    assert verdict(memory, [], "find_account", {"email": "amy7@example.com"}).decision == "allow"


def test_a_bad_value_that_also_succeeded_is_contested_whatever_the_order() -> None:
    ok = session("now-ok", step("find_account", {"email": "zed9@example.com"}, "zed_9"))
    for sessions in ([*account_world(), ok], [ok, *account_world()]):
        found = verdict(learned(sessions), [], "find_account", {"email": "zed9@example.com"})
        assert found.decision == "warn"


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
                step(
                    "get_order", {"order_id": invented}, error=f"Error: Order {invented} not found"
                ),
            )
        )
    for n in range(SUCCESSES):
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
    # missing from the session, said by the message: a block; unsaid: a warning
    silent = [
        Session(s.session_id, tuple(replace(st, error="Error: not found") if st.error else st
                                    for st in s.steps), s.outcome)
        for s in grounding_world()
    ]  # fmt: skip
    quiet = verdict(learned(silent), before, "get_order", {"order_id": "#A7777"})
    assert quiet.decision == "warn" and "not_grounded" in families(quiet)
    assert verdict(memory, before, "get_order", {"order_id": "#A1005"}).decision == "allow"
    # the user said it: grounded in the task input
    told = verdict(memory, before, "get_order", {"order_id": "#A7777"}, told="it is #A7777")
    assert "not_grounded" not in families(told)


def test_an_id_the_tool_accepted_in_another_session_is_not_called_made_up() -> None:
    """#A1003 was listed and fetched in another session: fetched here without being
    listed, it is not an invented id (the tool accepted it), while #A7777 still is."""
    memory = learned(grounding_world())
    before = [step("list_orders", {"user_id": "u_1"}, {"orders": ["#A1005"]})]

    def check(order_id: str, memory: FailureMemory = memory) -> Verdict:
        accepted = memory.accepted("get_order")
        return assess(memory.conditions("get_order"), before, "get_order",
                      {"order_id": order_id}, accepted=accepted)  # fmt: skip

    assert "not_grounded" not in families(check("#A1003"))
    assert check("#A7777").decision == "block"
    # without what the tool accepted, the made-up-id rule holds for #A1003 too
    bare = assess(memory.conditions("get_order"), before, "get_order", {"order_id": "#A1003"})
    assert bare.decision == "block"
    # against a rule a trusted source stands behind, an untrusted source's success of
    # the very id does not answer it; a trusted one's does
    for vouching, answered in (("mallory", False), ("ops", True)):
        world = [replace(s, source="ops") for s in grounding_world() if "A1003" not in
                 str(s.steps)] + [replace(s, source=vouching) for s in grounding_world()
                                  if "A1003" in str(s.steps)]  # fmt: skip
        judged = learned(world).judged_by(frozenset({"ops"}))
        found = check("#A1003", judged)
        assert ("not_grounded" not in families(found)) is answered, vouching


def _reworded(error: str) -> list[Session]:
    return [
        Session(s.session_id, tuple(replace(st, error=error) if st.error else st
                                    for st in s.steps), s.outcome)
        for s in grounding_world()
    ]  # fmt: skip


def test_not_grounded_blocks_when_the_message_names_the_argument_and_its_absence() -> None:
    """ "The order ID does not exist" names the argument (order_id) and says its value is
    not there, though it quotes no value: an invented id is what it speaks of."""
    before = [step("list_orders", {"user_id": "u_1"}, {"orders": ["#A1005"]})]
    named = verdict(learned(_reworded("The order ID does not exist.")), before, "get_order",
                    {"order_id": "#A7777"})  # fmt: skip
    assert named.decision == "block" and "not_grounded" in families(named)
    # the argument named, nothing said of its value; or an absence said of nothing named
    for error in ("The order service timed out.", "Error: the record does not exist"):
        quiet = verdict(learned(_reworded(error)), before, "get_order", {"order_id": "#A7777"})
        assert quiet.decision != "block", error


@pytest.mark.parametrize(
    ("signature", "argument", "names"),
    [
        ("The appointment ID does not exist.", "appointment_id", True),
        ("The password is incorrect.", "password", True),
        ("echo: cannot write to <str>: No such file", "file_name", True),
        ("Error: payment method not found", "payment_method_id", True),
        ("Error: User not found", "email", False),
        ("No appointments found.", "date", False),  # the date named by nothing
        ("The order service timed out.", "order_id", False),  # no absence said
        ("Invalid date format. Use YYYY-MM-DD.", "travel_date", False),  # its form
    ],
)
def test_a_message_names_an_argument_and_its_absence(
    signature: str, argument: str, names: bool
) -> None:
    from sidecar.memory.families.not_grounded import FAMILY

    predicate = Predicate(f"grounded:{argument}", "==", False)
    assert FAMILY.signature_names(predicate, signature) is names


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
        session(f"ok-{n}", step("get_order", {"order_id": f"#W10000{n:02d}"}, order(f"#W{n}")))
        for n in range(SUCCESSES)
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


def test_novelty_against_a_single_success_never_blocks() -> None:
    # one value seen succeeding says nothing about the others: the failures' shapes
    # are what chance gives
    world = shape_world()
    memory = learned([*world[SUCCESSES:], world[0]])
    novel = [c for c in memory.conditions("get_order") if c.family == "value_shape"]
    assert novel and all(Thresholds().level(c) != "block" for c in novel)
    assert verdict(memory, [], "get_order", {"order_id": "#1234567"}).decision != "block"


def test_a_value_an_earlier_output_gave_has_no_shape_read() -> None:
    """An order id the listing returned is the system's own: its shape is not the
    agent's doing, so no shape rule may hold for it; one typed in is read."""
    listed = [step("list_orders", {"user_id": "u_1"}, {"orders": [{"order_id": "#1234567"}]})]
    assert "shape:order_id" not in call_features(listed, "get_order", {"order_id": "#1234567"})
    assert call_features(listed, "get_order", {"order_id": "#7654321"})["shape:order_id"] == "#9{7}"
    memory = learned(shape_world())
    given = verdict(memory, listed, "get_order", {"order_id": "#1234567"})
    assert "value_shape" not in families(given)
    assert verdict(memory, listed, "get_order", {"order_id": "#7654321"}).decision == "block"


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
    assert status and all((c.support, c.session_count) == (1, 2) for c in status)
    each = FailureMemory(LearnParams(independence="session"))
    for s in refund_world(failing_orders=("#A1001", "#A1001")):
        each.add_session(s)
    counted = [
        c for c in each.conditions("refund_order") if c.predicate.feature == "obj:order_id.status"
    ]
    assert counted and all(c.support == 2 for c in counted)


def test_sessions_of_one_task_text_are_one_situation() -> None:
    # two attempts at one task (the same words), on two orders the agent found
    task = "Please refund my lamp, the order never arrived and I am tired of waiting."
    sessions = [
        *refund_world(failing_orders=()),
        *(
            session(
                f"again-{n}",
                get_order(order(oid, "pending")),
                refund(oid, ["1000000001"], own(oid, "card"), NOT_DELIVERED),
                task_input=task + (" Thanks." if n else ""),
            )
            for n, oid in enumerate(("#A1001", "#A1002"))
        ),
    ]
    status = [
        c
        for c in learned(sessions).conditions("refund_order")
        if c.predicate.feature == "obj:order_id.status"
    ]
    assert status and all((c.support, c.session_count) == (1, 2) for c in status)


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
    for n in range(3):
        o = order(f"#A50{n:02d}", payments=["card_1111111"])
        out.append(
            session(
                f"other-{n}",
                get_order(o),
                refund(o["order_id"], ["1000000001"], f"paypal_22222{n:02d}", ORIGINAL),
            )
        )
    for n in range(SUCCESSES):
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
    shorts = ((["1000000001", "1000000002"], []), (["1000000003"], []), (["1000000004"], []))
    for n, (old, new) in enumerate(shorts):
        o = order(f"#A80{n:02d}", "pending", items=old)
        args = {"order_id": o["order_id"], "item_ids": old, "new_item_ids": new}
        out.append(session(f"short-{n}", get_order(o), step("swap", args, error=COUNT_MISMATCH)))
    for n in range(SUCCESSES):
        o = order(f"#A90{n:02d}", "pending", items=[f"10000000{n:02d}"])
        args = {
            "order_id": o["order_id"],
            "item_ids": [f"10000000{n:02d}"],
            "new_item_ids": [f"20000000{n:02d}"],
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


# ---- keyed entries -----------------------------------------------------------------------
def flights(*rows: tuple[str, str, str, int, float]) -> dict:  # type: ignore[type-arg]
    """A search result: (number, date, status, economy seats, economy price) per row."""
    return {
        "flights": [
            {
                "flight_number": number,
                "date": date,
                "status": status,
                "seats": {"economy": seats, "business": 2},
                "prices": {"economy": price, "business": 900.0},
            }
            for number, date, status, seats, price in rows
        ]
    }


NO_FLIGHT = "Error: Flight is not available for booking"
QTY = "qty:sum(flights->prices[cabin])*len(passengers)?sum(payments.amount)"
"""The price of the flights named, times the passengers, against what the payments sum."""


def booking_world() -> list[Session]:
    """Bookings of available flights succeed; of cancelled ones fail.  Each search shows
    the same flight number on two dates, one of each status: only the date tells."""
    out = []
    for n in range(SUCCESSES + 3):
        number, good = f"HAT{n:03d}", n < SUCCESSES
        search = step(
            "search",
            {"origin": "JFK", "day": "2024-05-01"},
            flights((number, "2024-05-01", "available", 5, 100.0),
                    (number, "2024-05-02", "cancelled", 5, 100.0)),
        )  # fmt: skip
        date = "2024-05-01" if good else "2024-05-02"
        args = {"user_id": f"user_{n}", "cabin": "economy",
                "flights": [{"flight_number": number, "date": date}]}  # fmt: skip
        call = step("book", args, {"ok": True}) if good else step("book", args, error=NO_FLIGHT)
        out.append(session(f"{'ok' if good else 'bad'}-{n}", search, call))
    return out


def test_keyed_entry_holds_for_the_entry_the_item_names_by_its_fields() -> None:
    memory = learned(booking_world())
    search = step(
        "search",
        {"origin": "JFK"},
        flights(("HAT900", "2024-06-01", "cancelled", 5, 100.0),
                ("HAT900", "2024-06-02", "available", 5, 100.0)),
    )  # fmt: skip
    blocked = verdict(memory, [search], "book",
                      {"user_id": "user_x", "cabin": "economy",
                       "flights": [{"flight_number": "HAT900", "date": "2024-06-01"}]})  # fmt: skip
    assert blocked.decision == "block" and "keyed_entry" in families(blocked)
    assert any("the entry flights names has status" in r.explanation for r in blocked.reasons)
    allowed = verdict(memory, [search], "book",
                      {"user_id": "user_x", "cabin": "economy",
                       "flights": [{"flight_number": "HAT900", "date": "2024-06-02"}]})  # fmt: skip
    assert allowed.decision == "allow"


def test_keyed_entry_and_map_features() -> None:
    before = [
        step("search", {}, flights(("HAT1", "2024-05-01", "available", 0, 120.0),
                                   ("HAT1", "2024-05-02", "cancelled", 9, 80.0)))
    ]  # fmt: skip
    args = {"cabin": "economy", "passengers": [{"name": "a"}, {"name": "b"}],
            "flights": [{"flight_number": "HAT1", "date": "2024-05-01"}],
            "payments": [{"payment_id": "gift_1", "amount": 200.0}]}  # fmt: skip
    f = call_features(before, "book", args)
    assert f["entry:flights.status"] == ["available"]
    assert f["entry:flights.seats[cabin]"] == [0]
    assert f["entry:flights.prices[cabin]"] == [120.0]
    # a quantity over the entries, times a count, against the payments' sum
    assert f[QTY] == ">"
    other = {**args, "flights": [{"flight_number": "HAT1", "date": "2024-05-02"}]}
    g = call_features(before, "book", other)
    assert g["entry:flights.status"] == ["cancelled"]
    assert g[QTY] == "<"
    # one field alone (a number shared by two dates) names no entry
    alone = {**args, "flights": [{"flight_number": "HAT1", "class": "x"}]}
    assert "entry:flights.status" not in call_features(before, "book", alone)


# ---- computed quantities and the failure message -----------------------------------------
def payment_world(stated: bool = True) -> list[Session]:
    """Payments that fall short of the price times the passengers fail; the message says
    both amounts when ``stated``."""
    out = []
    for n in range(SUCCESSES + 3):
        short = n >= SUCCESSES
        price = 100.0 + (n * 37) % 50  # the short payments are not the dearest flights
        search = step("search", {}, flights((f"HAT{n:03d}", "2024-05-01", "available", 9, price)))
        paid = price * 2 - (50.0 if short else 0.0)
        args = {"cabin": "economy", "user_id": f"user_{n}",
                "passengers": [{"name": "a"}, {"name": "b"}],
                "flights": [{"flight_number": f"HAT{n:03d}", "date": "2024-05-01"}],
                "payments": [{"payment_id": f"gift_{n}", "amount": paid}]}  # fmt: skip
        if short:
            text = (
                f"Error: Payment amount does not add up, total price is {price * 2:g}, "
                f"but paid {paid:g}"
                if stated
                else "Error: Payment amount does not add up"
            )
            call = step("book", args, error=text)
        else:
            call = step("book", args, {"ok": True})
        out.append(session(f"p-{n}", search, call))
    return out


def test_a_computed_quantity_holds_when_the_payment_falls_short() -> None:
    memory = learned(payment_world())
    search = [step("search", {}, flights(("HAT777", "2024-07-01", "available", 9, 300.0)))]
    args = {"cabin": "economy", "user_id": "user_q",
            "passengers": [{"name": "a"}, {"name": "b"}],
            "flights": [{"flight_number": "HAT777", "date": "2024-07-01"}]}  # fmt: skip
    short = verdict(memory, search, "book", {**args, "payments": [{"payment_id": "g",
                                                                  "amount": 500.0}]})  # fmt: skip
    assert short.decision == "block" and "computed" in families(short)
    assert any(
        "sum(flights->prices[cabin])*len(passengers) exceeds sum(payments.amount)" in r.explanation
        for r in short.reasons
    )
    exact = verdict(memory, search, "book", {**args, "payments": [{"payment_id": "g",
                                                                  "amount": 600.0}]})  # fmt: skip
    assert exact.decision == "allow"


def test_what_the_message_states_is_a_small_family_of_candidates() -> None:
    def qty(memory: FailureMemory) -> FailureCondition:
        found = [c for c in memory.conditions("book") if c.predicate.feature == QTY]
        assert found
        return found[0]

    stated, silent = qty(learned(payment_world(True))), qty(learned(payment_world(False)))
    assert stated.candidates == silent.candidates  # the same features were tried
    assert stated.chance < silent.chance  # but the message pointed at this one


# ---- missing prerequisite ----------------------------------------------------------------
NOT_LOGGED_IN = "Error: User not authenticated. Please log in first."


def login_world() -> list[Session]:
    out = []
    for n in range(SUCCESSES):
        out.append(
            session(
                f"in-{n}",
                step("login", {"user": f"u_{n}"}, {"token": f"t_{n}"}),
                step("balance", {"account": f"acct_{n}"}, {"balance": 10.0}),
                step("transfer", {"account": f"acct_{n}", "amount": 5.0}, {"ok": True}),
            )
        )
    for n in range(3):
        out.append(
            session(
                f"out-{n}",
                step("balance", {"account": f"acct_9{n}"}, {"balance": 10.0}),
                step("transfer", {"account": f"acct_9{n}", "amount": 5.0}, error=NOT_LOGGED_IN),
            )
        )
    return out


def test_a_missing_prerequisite_holds_when_no_login_came_first() -> None:
    memory = learned(login_world())
    args = {"account": "acct_5", "amount": 5.0}
    missing = verdict(memory, [step("balance", {"account": "acct_5"}, {"balance": 1.0})],
                      "transfer", args)  # fmt: skip
    assert missing.decision == "block" and "prerequisite" in families(missing)
    assert any("login had not succeeded earlier" in r.explanation for r in missing.reasons)
    logged = [step("login", {"user": "u_5"}, {"token": "t"}),
              step("balance", {"account": "acct_5"}, {"balance": 1.0})]  # fmt: skip
    assert verdict(memory, logged, "transfer", args).decision == "allow"
    failed_login = [step("login", {"user": "u_5"}, error="Error: bad password")]
    assert "prerequisite" in families(verdict(memory, failed_login, "transfer", args))


# ---- a call that undid what the failing one needs ----------------------------------------
def logout_world() -> list[Session]:
    out = [
        session(
            f"in-{n}",
            step("balance", {"account": f"acct_{n}"}, {"balance": 10.0}),
            step("transfer", {"account": f"acct_{n}", "amount": 5.0}, {"ok": True}),
        )
        for n in range(SUCCESSES)
    ]
    out += [
        session(
            f"out-{n}",
            step("balance", {"account": f"acct_8{n}"}, {"balance": 10.0}),
            step("logout", {}, {"ok": True}),
            step("transfer", {"account": f"acct_8{n}", "amount": 5.0}, error=NOT_LOGGED_IN),
        )
        for n in range(3)
    ]
    return out


def test_a_call_that_undid_the_state_holds_when_it_came_before() -> None:
    memory = learned(logout_world())
    args = {"account": "acct_5", "amount": 5.0}
    after_logout = [step("balance", {"account": "acct_5"}, {"balance": 1.0}),
                    step("logout", {}, {"ok": True})]  # fmt: skip
    undone = verdict(memory, after_logout, "transfer", args)
    assert undone.decision == "block" and "prerequisite" in families(undone)
    assert any("logout succeeded earlier" in r.explanation for r in undone.reasons)
    plain = [step("balance", {"account": "acct_5"}, {"balance": 1.0})]
    assert verdict(memory, plain, "transfer", args).decision == "allow"


def test_a_prerequisite_rule_never_blocks_a_tool_that_succeeded_here_without_it() -> None:
    memory = learned(login_world())
    assert any(c.family == "prerequisite" for c in memory.conditions("transfer"))
    args = {"account": "acct_5", "amount": 5.0}
    # the transfer already went through in this session with no login before it: the
    # session itself shows the rule does not apply here
    done = [
        step("balance", {"account": "acct_5"}, {"balance": 1.0}),
        step("transfer", {"account": "acct_5", "amount": 1.0}, {"ok": True}),
    ]
    again = verdict(memory, done, "transfer", args)
    assert "prerequisite" not in families(again)
    assert again.decision != "block"


def test_a_missing_prerequisite_needs_two_situations() -> None:
    sessions = login_world()
    one = [s for s in sessions if not s.session_id.startswith("out-")] + [
        s for s in sessions if s.session_id == "out-0"
    ]
    memory = learned(one)
    assert not [c for c in memory.conditions("transfer") if c.family == "prerequisite"]


def test_a_value_condition_does_not_fire_on_a_value_that_succeeded_in_the_session() -> None:
    memory = learned(account_world())
    miss = {"email": "zed9@example.com"}
    assert verdict(memory, [], "find_account", miss).decision != "allow"
    # the same address was found earlier in this session: the session contradicts it
    found = [step("find_account", miss, "user_9")]
    assert verdict(memory, found, "find_account", miss).decision == "allow"


def test_a_message_quoting_the_entry_points_at_its_state() -> None:
    def status(sessions: list[Session]) -> FailureCondition:
        memory = learned(sessions)
        found = [
            c for c in memory.conditions("book") if c.predicate.feature == "entry:flights.status"
        ]
        assert found
        return min(found, key=lambda c: c.chance)

    def quoting(s: Session) -> Session:
        last = s.steps[-1]
        if last.error is None:
            return s
        wanted = last.arguments["flights"][0]
        text = f"Error: flight {wanted['flight_number']} not available on date {wanted['date']}"
        return replace(s, steps=(*s.steps[:-1], replace(last, error=text)))

    plain = status(booking_world())
    quoted = status([quoting(s) for s in booking_world()])
    assert quoted.candidates == plain.candidates  # the same features were tried
    assert quoted.chance < plain.chance  # but the message quoted the entry


def test_an_undoing_call_is_not_one_the_tool_succeeded_after() -> None:
    sessions = logout_world()
    # a session where the transfer went through after a logout and a new login
    sessions.append(
        session(
            "again",
            step("balance", {"account": "acct_77"}, {"balance": 10.0}),
            step("logout", {}, {"ok": True}),
            step("login", {"user": "u_77"}, {"token": "t_77"}),
            step("transfer", {"account": "acct_77", "amount": 5.0}, {"ok": True}),
        )
    )
    memory = learned(sessions)
    undoing = [c for c in memory.conditions("transfer") if c.predicate.feature == "prior:logout"]
    assert not undoing
    assert [c for c in learned(logout_world()).conditions("transfer")
            if c.predicate.feature == "prior:logout"]  # fmt: skip


# ---- numeric arguments -------------------------------------------------------------------
NOT_POSITIVE = "Error: Price and amount must be positive values."


def test_an_amount_beyond_any_seen_to_succeed_holds_and_one_within_does_not() -> None:
    sessions = [
        session(f"buy-{n}", step("buy", {"symbol": f"S{n}_x", "amount": 5 + 7 * n}, {"ok": True}))
        for n in range(SUCCESSES)
    ]
    sessions += [
        session(f"bad-{n}", step("buy", {"symbol": f"B{n}_x", "amount": a}, error=NOT_POSITIVE))
        for n, a in enumerate((0, -3, -10))
    ]
    memory = learned(sessions)
    below = verdict(memory, [], "buy", {"symbol": "Z9_x", "amount": -1})
    assert below.decision == "block" and "amount" in families(below)
    assert any("the argument amount is below 5" in r.explanation for r in below.reasons)
    assert verdict(memory, [], "buy", {"symbol": "Z9_x", "amount": 40}).decision == "allow"
    # 3: below every success, above every failure (0 the nearest): never seen either
    # way, a warning, not a block
    gap = verdict(memory, [], "buy", {"symbol": "Z9_x", "amount": 3})
    assert gap.decision == "warn"
    assert any("no call was seen between it and the failures, at 0" in r.observed
               for r in gap.reasons)  # fmt: skip
    thresholds = [c for c in memory.conditions("buy") if c.predicate.op == "<"]
    assert thresholds and all(c.reach == 0 for c in thresholds)
    assert all(FailureCondition.from_dict(c.to_dict()) == c for c in thresholds)
    f = call_features([], "buy", {"symbol": "Z9_x", "amount": 40, "flag": True, "order_id": 123})
    assert f["arg:amount"] == 40.0 and "arg:flag" not in f and "arg:symbol" not in f
    assert "arg:order_id" not in f  # an identifier, not a quantity


def test_a_length_between_the_failures_and_the_successes_is_warned_not_blocked() -> None:
    """Empty lists refused, lists of three or more accepted: an empty list is blocked; a
    list of one was never seen either way (below every success, above every failure),
    whether the rule says "below 3" or "a length never seen to succeed"."""
    empty = "Cannot calculate mean of an empty list"
    sessions = [session(f"ok-{n}", step("mean", {"numbers": list(range(3 + n % 4))},
                                        {"result": 1.0})) for n in range(SUCCESSES)]  # fmt: skip
    sessions += [session(f"bad-{n}", step("mean", {"numbers": []}, error=empty),
                         task_input=f"task {n}") for n in range(4)]  # fmt: skip
    memory = learned(sessions)
    assert verdict(memory, [], "mean", {"numbers": []}).decision == "block"
    one = verdict(memory, [], "mean", {"numbers": [37]})
    assert one.decision == "warn" and one.reasons
    assert all("no call was seen between it and the failures, at 0" in r.observed
               for r in one.reasons)  # fmt: skip
    kinds = {c.predicate.op for c in memory.conditions("mean") if c.reach == 0}
    assert {"<", "not_in"} <= kinds


# ---- repeated ----------------------------------------------------------------------------
TAKEN = "This appointment has already been registered."


def booking(n: int, day: int) -> Step:
    return step("register_appointment", {"patient": f"p{n}", "date": f"2024-03-{day:02d}"},
                {"appointment_id": f"A{n}{day}"})  # fmt: skip


def repeat_world(error: str = TAKEN) -> list[Session]:
    """Bookings that succeed (some sessions book twice, on two dates), and bookings sent
    again with the same arguments right after they succeeded, refused."""
    out = [session(f"ok-{n}", booking(n, 1)) for n in range(SUCCESSES)]
    out += [session(f"two-{n}", booking(n, 1), booking(n, 2)) for n in range(SUCCESSES)]
    for n in range(3):
        again = replace(booking(100 + n, 5 + n), output=None, error=error)
        out.append(session(f"again-{n}", booking(100 + n, 5 + n), again))
    return out


def test_repeated_blocks_the_same_call_again_when_the_message_says_already() -> None:
    memory = learned(repeat_world())
    first = booking(7, 9)
    again = verdict(memory, [first], first.tool, dict(first.arguments))
    assert again.decision == "block" and "repeated" in families(again)
    (kept,) = [c for c in memory.conditions(first.tool) if c.family == "repeated"]
    assert FailureCondition.from_dict(kept.to_dict()) == kept  # as the state keeps it
    other = verdict(memory, [first], first.tool, {**first.arguments, "date": "2024-03-10"})
    assert other.decision == "allow"
    assert verdict(memory, [], first.tool, dict(first.arguments)).decision == "allow"
    # the same repeats refused for a reason that does not say "already": a warning
    flaky = learned(repeat_world("Service temporarily unavailable, retry later."))
    quiet = verdict(flaky, [first], first.tool, dict(first.arguments))
    assert quiet.decision != "block"


def test_repeated_features() -> None:
    first = booking(1, 1)
    assert call_features([first], first.tool, dict(first.arguments))["again:call"] is True
    reordered = dict(reversed(list(first.arguments.items())))
    assert call_features([first], first.tool, reordered)["again:call"] is True
    assert call_features([first], first.tool, {"patient": "p1"})["again:call"] is False
    failed = replace(first, output=None, error="boom")
    assert call_features([failed], first.tool, dict(first.arguments))["again:call"] is False


def test_equal_scalars_of_different_types_stay_different_values() -> None:
    """Tokens are cached per scalar: 1, 1.0 and True are one key of a dict, never one
    value of a feature, whichever is asked first."""
    from sidecar.memory.predicate import token

    expected = {"true", "1", "1.0"}
    for first in (True, 1, 1.0):
        token(first)
        assert {token(True), token(1), token(1.0)} == expected
    assert Predicate("obj:order_id.items", "==", 1).holds(True) is False
    assert Predicate("obj:order_id.items", "==", True).holds(1) is False
    assert Predicate("obj:order_id.items", "not_in", [1]).holds(1.0) is True
