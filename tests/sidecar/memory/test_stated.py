"""What a failure message states: the numbers it gives, aligned with the call's
expressions, both ways (an expression equal to the stated numbers in two situations
blocks; an equality in one situation, or one a small integer makes by coincidence,
does not), on the booking desk of :mod:`tests.sidecar.memory.booking`."""

from __future__ import annotations

import json

import pytest

from sidecar.memory import FailureCondition, FailureMemory, Thresholds, assess
from sidecar.memory.families import stated as stated_family
from sidecar.memory.families.base import build_call
from sidecar.memory.families.stated import (
    MAX_EXPRESSIONS,
    accident,
    expressions,
    stated_numbers,
)
from sidecar.memory.stats import MAX_PROFILES
from sidecar.memory.trace import Trace
from tests.sidecar.memory.booking import booking, flight, search, user
from tests.sidecar.memory.world import learned, session, step

ADD_UP = "does not add up"
EXPRESSION = "sum(flights->prices[cabin])*len(passengers)"


def stated(memory: FailureMemory, tool: str = "book") -> list[FailureCondition]:
    return [c for c in memory.conditions(tool) if c.family == "stated"]


def proposal(paid_right: bool, passengers: int = 2, price: float = 318.4) -> tuple[list, dict]:  # type: ignore[type-arg]
    """A new booking on a flight no session saw, paid right or 100 short."""
    shown = flight("HAT901", "2024-08-02", price)
    before = [search(shown), user("user_new", 10_000.0)]
    total = price * passengers
    arguments = {
        "user_id": "user_new",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT901", "date": "2024-08-02"}],
        "passengers": [{"first_name": f"P{k}", "last_name": "N"} for k in range(passengers)],
        "payments": [{"payment_id": "gift_card_new", "amount": total - (0 if paid_right else 100)}],
    }
    return before, arguments


def short_payments() -> list:  # type: ignore[type-arg]
    """Two situations whose messages state the total and what was paid."""
    return [
        booking("f1", [flight("HAT101", "2024-05-01", 137.25)], "economy", 2, paid=250.5),
        booking("f2", [flight("HAT102", "2024-05-03", 241.75)], "economy", 3, paid=700.25),
    ]


def test_an_expression_equal_to_the_stated_numbers_in_two_situations_blocks() -> None:
    memory = learned(short_payments())
    [condition] = stated(memory)
    assert ADD_UP in condition.signature and condition.support == 2
    before, short = proposal(paid_right=False)
    verdict = assess(memory.conditions("book"), before, "book", short)
    assert verdict.decision == "block"
    [reason] = [r for r in verdict.reasons if r.family == "stated"]
    assert reason.level == "block"
    # the reason line shows the expression, the numbers it matched, in how many situations
    assert f"{EXPRESSION} equalled the message's 1st number (274.5, 725.25) in 2 situations" in (
        reason.explanation
    )
    assert "sum(payments.amount)" in reason.explanation and "2nd number (250.5, 700.25)" in (
        reason.explanation
    )
    assert f"{EXPRESSION} = 636.8" in reason.observed
    before, right = proposal(paid_right=True)
    assert all(r.family != "stated" for r in assess(memory.conditions("book"), before, "book",
                                                     right).reasons)  # fmt: skip


def test_one_situation_blocks_only_on_numbers_unlikely_to_match_by_accident() -> None:
    # 274.5 and 250.5: four digits each, about 1 in 9,000 for one expression
    memory = learned(short_payments()[:1])
    [condition] = stated(memory)
    assert condition.support == 1 and condition.confirmations == 1
    assert condition.chance <= 0.05
    before, short = proposal(paid_right=False)
    verdict = assess(memory.conditions("book"), before, "book", short)
    assert [r.level for r in verdict.reasons if r.family == "stated"] == ["block"]
    assert "in 1 situation" in verdict.reasons[0].explanation
    # 300 and 250: three digits, 1 in 900; one situation of such numbers only warns
    plain = learned([booking("p1", [flight("HAT111", "2024-05-01", 150.0)], "economy", 2, 250.0)])
    [weak] = stated(plain)
    assert weak.chance > 0.05 and Thresholds().level(weak) == "warn"
    verdict = assess(plain.conditions("book"), before, "book", short)
    assert [r.level for r in verdict.reasons if r.family == "stated"] == ["warn"]


def test_an_expression_matching_in_one_situation_only_is_not_proposed() -> None:
    # the second desk charges a fee the expressions do not know of: its message's total
    # is no expression of the call, so no expression equals it in every situation
    sessions = short_payments()[:1]
    fee = booking("f3", [flight("HAT103", "2024-05-04", 199.5)], "economy", 2, paid=300.0)
    steps = list(fee.steps)
    last = steps[-1]
    steps[-1] = step("book", dict(last.arguments), error=(
        "Error: payment amount does not add up, total price is 424, but paid 300"))  # fmt: skip
    sessions.append(session("f3", *steps, task_input="book f3"))
    memory = learned(sessions)
    assert not stated(memory)
    before, short = proposal(paid_right=False)
    verdict = assess(memory.conditions("book"), before, "book", short)
    assert all(r.family != "stated" for r in verdict.reasons)


def test_a_small_integer_coincidence_does_not_block() -> None:
    # the message speaks of seats left and asked; 1 and 2 are also the number of flights
    # and of passengers, by coincidence, in both situations
    def reserve(sid: str) -> object:
        shown = flight(f"HAT2{sid}", "2024-06-01", 150.0)
        arguments = {
            "cabin": "economy",
            "flights": [{"flight_number": f"HAT2{sid}", "date": "2024-06-01"}],
            "passengers": [{"first_name": "A"}, {"first_name": "B"}],
        }
        error = "Error: only 1 seats left in the cabin, asked for 2"
        return session(sid, search(shown), step("hold_seats", arguments, error=error),
                       task_input=f"hold {sid}")  # fmt: skip

    memory = learned([reserve("a"), reserve("b")])  # type: ignore[list-item]
    for condition in stated(memory, "hold_seats"):
        assert Thresholds().level(condition) != "block"
        assert condition.chance > 0.05


def test_pairs_the_failures_cannot_tell_apart_must_all_hold() -> None:
    # one passenger in every failure: the price alone and the price times the passengers
    # both equal the stated total; a later right payment for two passengers satisfies
    # the second, so nothing is blocked; a short one fails both, and is
    sessions = [
        booking("g1", [flight("HAT301", "2024-05-01", 412.35)], "economy", 1, paid=400.0),
        booking("g2", [flight("HAT302", "2024-05-02", 388.65)], "economy", 1, paid=350.5),
    ]
    memory = learned(sessions)
    [condition] = stated(memory)
    assert EXPRESSION in condition.predicate.feature
    assert "sum(flights->prices[cabin])|" in condition.predicate.feature
    before, right = proposal(paid_right=True, passengers=2)
    verdict = assess(memory.conditions("book"), before, "book", right)
    assert all(r.family != "stated" for r in verdict.reasons)
    before, short = proposal(paid_right=False, passengers=2)
    assert assess(memory.conditions("book"), before, "book", short).decision == "block"


def test_a_success_the_relation_holds_for_contradicts_it() -> None:
    sessions = short_payments()
    # a desk that once took a payment that did not add up: the relation is not the rule
    lenient = booking("h1", [flight("HAT403", "2024-05-02", 288.15)], "economy", 2)
    steps = list(lenient.steps)
    arguments = dict(steps[-1].arguments)
    arguments["payments"] = [{"payment_id": "gift_card_h1", "amount": 500.0}]
    steps[-1] = step("book", arguments, {"reservation_id": "Rh1"})
    sessions.append(session("h1", *steps, task_input="book h1"))
    [condition] = stated(learned(sessions))
    assert condition.contradictions == 1 and condition.units == 1
    assert Thresholds().level(condition) != "block"


def test_the_numbers_a_message_states() -> None:
    text = "Error: flight HAT001 on 2024-05-01 at 10:30: total price is 1,250.50, but paid 1000"
    assert stated_numbers(text) == [[1250.5, 2.0], [1000.0, 0.0]]
    assert stated_numbers("Order #A1001 not found for user_42") == []
    assert accident(1) == 0.5 and accident(2) == pytest.approx(1 / 3)
    assert accident(1250) == pytest.approx(1 / 9000)
    assert accident(12.5) == pytest.approx(1 / 900)
    assert accident(0) == 1.0


def test_the_expressions_of_a_call() -> None:
    shown = flight("HAT501", "2024-05-01", 100.0)
    trace = Trace([search(shown), user("user_7", 80.0),
                   step("get_account", {}, {"account_id": "acct_1", "balance": 55.5})])  # fmt: skip
    arguments = {
        "user_id": "user_7",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT501", "date": "2024-05-01"}],
        "passengers": [{"first_name": "A"}, {"first_name": "B"}, {"first_name": "C"}],
        "payments": [{"payment_id": "gift_card_7", "amount": 300.0}],
        "price": 12.5,
        "amount": 4,
    }
    found = expressions(build_call(trace, "book", arguments, None))
    assert found["len(passengers)"] == 3.0
    assert found["sum(payments.amount)"] == 300.0
    assert found["sum(flights->prices[cabin])"] == 100.0
    assert found[EXPRESSION] == 300.0
    assert found["price*amount"] == 50.0
    assert found["last:balance"] == 55.5


def test_a_call_with_thousands_of_numbers_gets_the_first_expressions_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Arguments are untrusted: 3,000 numbers and 50 lists make at most
    MAX_EXPRESSIONS expressions, the first ones in the order they are built (building
    stops there: the products of the rest are never formed)."""
    arguments: dict[str, object] = {f"n{i:04d}": i + 1 for i in range(3000)}
    arguments |= {f"l{i}": [1, 2] for i in range(50)}
    call = build_call(Trace(), "pay", arguments, None)
    found = expressions(call)
    assert len(found) == MAX_EXPRESSIONS
    monkeypatch.setattr(stated_family, "MAX_EXPRESSIONS", 10**9)
    everything = expressions(call)
    assert len(everything) > 3000
    assert found == dict(list(everything.items())[:MAX_EXPRESSIONS])


def test_a_stated_condition_and_the_success_sample_survive_a_snapshot() -> None:
    sessions = [
        *short_payments(),
        booking("s1", [flight("HAT601", "2024-05-02", 288.15)], "economy", 2),
        booking("s2", [flight("HAT602", "2024-05-03", 199.99)], "business", 1),
    ]
    memory = learned(sessions)
    restored = FailureMemory.from_dict(json.loads(json.dumps(memory.to_dict())))
    assert [c.to_dict() for c in restored.conditions()] == [
        c.to_dict() for c in memory.conditions()
    ]
    [condition] = stated(restored)
    assert condition.units == 2  # the two successes, judged from the kept sample
    again = FailureCondition.from_dict(json.loads(json.dumps(condition.to_dict())))
    assert again == condition and again.stated == condition.stated


def test_the_success_sample_does_not_depend_on_order() -> None:
    sessions = [
        booking(f"o{n}", [flight(f"HAT7{n:02d}", "2024-05-02", 100.0 + n)], "economy", 1 + n % 3)
        for n in range(MAX_PROFILES + 20)
    ]
    forward, backward = learned(sessions), learned(list(reversed(sessions)))
    kept = forward.to_dict()["tools"]["book"]["profiles"]
    assert len(kept) == MAX_PROFILES
    assert kept == backward.to_dict()["tools"]["book"]["profiles"]


def test_an_exact_rule_from_the_stated_numbers_supersedes_contradicted_approximations() -> None:
    from sidecar.memory import Predicate
    from sidecar.memory.derivation import _superseded

    def rule(family: str, feature: str, **kw: object) -> FailureCondition:
        base = FailureCondition("book", ADD_UP, Predicate(feature, "==", ">"), family=family,
                                support=4, failing=4)  # fmt: skip
        return FailureCondition(**{**base.__dict__, **kw})  # type: ignore[arg-type]

    exact = rule("stated", "said:a?b", aligned=2)
    approximate = rule("computed", "qty:price?paid", contradictions=3)
    clean = rule("computed", "qty:total?paid")
    assert _superseded([exact, approximate, clean], 4) == [exact, clean]
    # no exact rule: one the successes contradict, or one not holding in every situation
    for weaker in (rule("stated", "said:a?b", aligned=2, contradictions=1),
                   rule("stated", "said:a?b", aligned=2, support=3),
                   rule("stated", "said:a?b", aligned=1)):  # fmt: skip
        assert _superseded([weaker, approximate, clean], 4) == [weaker, approximate, clean]


def test_the_item_asking_most_of_the_card_it_names() -> None:
    """Per payment item, what it asks against the balance of the card it names (a card
    with no balance asks nothing of one): the item asking most beyond its card's balance
    gives both numbers."""
    cards = {"gift_1": {"id": "gift_1", "balance": 50.0},
             "gift_2": {"id": "gift_2", "balance": 400.0},
             "card_3": {"id": "card_3", "brand": "visa"}}  # fmt: skip
    trace = Trace([step("get_user", {"user_id": "u_1"},
                        {"user_id": "u_1", "payment_methods": cards})])  # fmt: skip
    paid = [{"payment_id": "gift_1", "amount": 80.0}, {"payment_id": "gift_2", "amount": 300.0},
            {"payment_id": "card_3", "amount": 500.0}]  # fmt: skip
    found = expressions(build_call(trace, "book", {"payment_methods": paid}, None))
    worst = "worst(payment_methods:amount-balance)"
    assert found[f"{worst}.amount"] == 80.0 and found[f"{worst}->balance"] == 50.0
    within = [{"payment_id": "gift_1", "amount": 50.0}, {"payment_id": "gift_2", "amount": 10.0}]
    fits = expressions(build_call(trace, "book", {"payment_methods": within}, None))
    assert fits[f"{worst}.amount"] <= fits[f"{worst}->balance"]


def test_the_flight_asked_more_seats_than_it_has_left_in_the_cabin() -> None:
    """An item may ask the length of another list (the passengers) of a map field of the
    entry it names, read through an argument naming its key (the cabin's seats)."""
    full = flight("HAT301", "2024-05-01", 120.0)
    full["available_seats"] = {"economy": 2, "business": 9}
    roomy = flight("HAT302", "2024-05-02", 90.0)
    roomy["available_seats"] = {"economy": 30, "business": 1}
    trace = Trace([search(full), search(roomy)])
    arguments = {
        "cabin": "economy",
        "flights": [{"flight_number": "HAT302", "date": "2024-05-02"},
                    {"flight_number": "HAT301", "date": "2024-05-01"}],
        "passengers": [{"first_name": f"P{k}"} for k in range(3)],
    }  # fmt: skip
    found = expressions(build_call(trace, "book", arguments, None))
    worst = "worst(flights:len(passengers)-available_seats[cabin])"
    assert found[f"{worst}.len(passengers)"] == 3.0
    assert found[f"{worst}->available_seats[cabin]"] == 2.0
