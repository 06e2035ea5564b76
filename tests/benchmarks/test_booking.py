"""The booking domain: the desk refuses exactly what it should with the numbers it
should state, ground truths succeed, the runs are the same for a seed, and the call
memory learns the total from a few "does not add up" refusals (insurance included)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from benchmarks import booking
from benchmarks.booking_world import INSURANCE_PER_PASSENGER, Desk, World, make_world, refusal
from benchmarks.failure_domains import load_domains, missing, parse_domains, uninstalled
from sidecar.memory import FailureMemory, Thresholds, assess
from sidecar.memory.families import stated as stated_family
from sidecar.memory.families.stated import FITTED
from sidecar.memory.trace import Trace

ADD_UP = "Payment amount does not add up"


@cache
def built(seed: int = 0) -> tuple[booking.Built, ...]:
    return tuple(booking.build(seed))


def world() -> World:
    return make_world(0)


def ground_truth(task_id: str) -> booking.Built:
    return next(b for b in built() if b.mutation is None and b.dialogue.task.task_id == task_id)


def booked(b: booking.Built) -> dict:  # type: ignore[type-arg]
    return dict(b.dialogue.steps[b.dialogue.booking].arguments)


def test_ground_truths_succeed_and_mistakes_end_at_their_refusal() -> None:
    runs = built()
    assert len({b.dialogue.task.task_id for b in runs}) == booking.TASKS
    assert {b.mutation.kind for b in runs if b.mutation} == set(booking.KINDS)
    assert 300 <= len(runs) <= booking.TASKS * (booking.RUNS_PER_TASK + 1)
    for b in runs:
        run = b.run
        assert run.domain == "booking" and run.task == f"booking/{b.dialogue.task.task_id}"
        assert len(run.told_before) == len(run.steps)
        if b.mutation is None:
            assert run.succeeded and all(s.error is None for s in run.steps)
            assert [s.tool for s in run.steps][-2:] == ["book_reservation",
                                                        "get_reservation_details"]  # fmt: skip
            continue
        *before, last = run.steps
        assert not run.succeeded and run.agent == f"mutation:{b.mutation.kind}"
        assert last.error and all(s.error is None for s in before)
        assert tuple(before) == b.dialogue.steps[: len(before)]


def test_each_mistake_is_refused_for_its_reason_with_its_numbers() -> None:
    w = world()
    for b in built():
        if b.mutation is None:
            continue
        kind, last = b.mutation.kind, b.run.steps[-1]
        args, task = last.arguments, b.dialogue.task
        if kind in booking.TOTAL_KINDS:
            total = booking._total(w, task.flights, task.cabin, len(task.passengers),
                                   task.insurance)  # fmt: skip
            paid = sum(p["amount"] for p in args["payment_methods"])
            assert paid != total
            assert last.error == f"{ADD_UP}, total price is {total}, but paid {paid}"
        elif kind == "low_balance":
            assert last.error.startswith(("Gift card balance", "Certificate balance"))
        elif kind == "too_many_passengers":
            assert last.error.startswith("Not enough seats on flight BX")
            assert last.error.endswith(f"left, {len(args['passengers'])} requested")
        elif kind == "unknown_user":
            assert args["user_id"] not in w.users
            assert last.error == f"User {args['user_id']} not found"
        elif kind == "flight_not_on_date":
            assert last.error.startswith("Flight BX") and "not available on 2025-04-" in last.error


def test_the_desk_states_the_numbers_of_what_it_refuses() -> None:
    w = world()
    b = next(b for b in built() if b.mutation is None and len(b.dialogue.task.passengers) == 3
             and b.dialogue.task.insurance)  # fmt: skip
    args, task = booked(b), b.dialogue.task
    price = sum(w.flights[f]["dates"][d]["prices"][task.cabin] for f, d in task.flights)
    total = (price + INSURANCE_PER_PASSENGER) * 3
    assert refusal(w, args) is None
    short = {**args, "payment_methods": [{"payment_id": args["payment_methods"][0]["payment_id"],
                                          "amount": price * 3}]}  # fmt: skip
    assert refusal(w, short) == f"{ADD_UP}, total price is {total}, but paid {price * 3}"
    number, day = task.flights[0]
    left = w.flights[number]["dates"][day]["available_seats"][task.cabin]
    crowd = {**args, "passengers": args["passengers"] * (left // 3 + 1)}
    asked = len(crowd["passengers"])
    seats = [(f, w.flights[f]["dates"][d]["available_seats"][task.cabin]) for f, d in task.flights]
    first = next(f for f, n in seats if n < asked)
    assert refusal(w, crowd).startswith(f"Not enough seats on flight {first} on ")
    user = w.users[args["user_id"]]
    w.users[args["user_id"]] = {**user, "payment_methods": {
        "gift_card_1": {"id": "gift_card_1", "source": "gift_card", "balance": 50}}}  # fmt: skip
    gift = {**args, "payment_methods": [{"payment_id": "gift_card_1", "amount": total}]}
    assert refusal(w, gift) == f"Gift card balance is not enough: balance 50, required {total}"
    # a booking takes the seats and the balance it paid
    desk = Desk(world(), "RBX")
    _, error = desk.call("book_reservation", args)
    assert error is None and desk.world.flights[number]["dates"][day]["available_seats"][
        task.cabin] == left - 3  # fmt: skip


def test_the_runs_are_the_same_for_a_seed_and_differ_across_seeds() -> None:
    again = booking.build(0)
    assert [b.run for b in again] == [b.run for b in built()]
    assert [b.run for b in booking.build(1)] != [b.run for b in built()]


def test_the_domain_is_registered_and_needs_no_file(tmp_path: Path) -> None:
    assert "booking" in parse_domains(None) and parse_domains("booking") == ("booking",)
    assert missing(tmp_path, ("booking",)) == [] and uninstalled(("booking",)) == []
    corpus, notes = load_domains(tmp_path, ("booking",))
    assert notes["runs_by_domain"] == {"booking": len(built())}
    assert {t.tool_id for t in corpus.tools} == set(booking.TOOLS)


def _total_refusals() -> tuple[list[booking.Built], FailureMemory, set[str]]:
    """Every run, a memory taught a few "does not add up" refusals (with and without
    insurance) and a dozen successes, and the tasks it was taught."""
    runs = built()
    totals = [b for b in runs if b.mutation and b.mutation.kind in booking.TOTAL_KINDS]
    insured = [b for b in totals if b.dialogue.task.insurance][:3]
    plain = [b for b in totals if not b.dialogue.task.insurance][:2]
    learned = {b.dialogue.task.task_id for b in insured + plain}
    memory = FailureMemory()
    for b in [*insured, *plain, *[b for b in runs if b.mutation is None][:12]]:
        memory.add_session(b.run.session())
    return runs, memory, learned


def test_exact_rules_leave_no_contradicted_approximation_to_warn() -> None:
    """Learned from the whole desk, the "does not add up" refusals have their exact rule
    (the stated total, fee included), and so do the balance refusals (the payment item
    asking more of the card it names than the card holds) and the seat refusals (a
    flight asked more seats in the cabin than it has left); beside them only rules no
    success contradicts.  A refusal stating no numbers (a flight not flying that day)
    keeps its contradicted ones."""
    memory = FailureMemory()
    for b in built():
        memory.add_session(b.run.session())
    conditions = memory.conditions("book_reservation")
    for said in ("does not add up", "Gift card balance is not enough",
                 "Certificate balance is not enough", "Not enough seats"):  # fmt: skip
        group = [c for c in conditions if said in c.signature]
        assert any(c.family == "stated" and c.aligned >= 2 for c in group), said
        assert all(c.contradictions == 0 for c in group), said
    assert any(c.contradictions for c in conditions if "not available on" in c.signature)


def test_a_balance_refusal_blocks_the_item_asking_too_much_of_its_card() -> None:
    """The balance a refusal states is the card's, the amount required the payment item's
    that names it: a new booking asking a card for more than it holds is blocked, one
    within the balance (the rest on another card) is not."""
    runs = built()
    refused = [(b, j) for b in runs if b.mutation for j, step in enumerate(b.run.steps)
               if (step.error or "").startswith("Gift card balance is not enough")]  # fmt: skip
    memory = FailureMemory()
    for b in [*[b for b, _j in refused[:3]], *[b for b in runs if b.mutation is None][:20]]:
        memory.add_session(b.run.session())
    [rule] = [c for c in memory.conditions("book_reservation")
              if c.family == "stated" and "balance" in c.signature]  # fmt: skip
    assert "worst(payment_methods:amount-balance)" in rule.predicate.feature
    b, j = refused[4]
    before, call = Trace(b.run.steps[:j]), b.run.steps[j]
    verdict = assess(memory.conditions("book_reservation"), before, call.tool, call.arguments)
    assert verdict.decision == "block" and any(r.family == "stated" for r in verdict.reasons)
    # the same booking with the card asked for its balance only, the rest on another card
    paid = list(call.arguments["payment_methods"])
    card = next(p for p in paid if p["payment_id"].startswith("gift_card"))
    balance = rule_balance(before, card["payment_id"])
    other = next(p for p in paid if p is not card)
    fitted = [{**card, "amount": balance}, {**other, "amount": other["amount"] + card["amount"]
                                             - balance}]  # fmt: skip
    fits = assess(memory.conditions("book_reservation"), before, call.tool,
                  {**call.arguments, "payment_methods": fitted})  # fmt: skip
    assert all(r.family != "stated" for r in fits.reasons)


def rule_balance(before: Trace, card: str) -> float:
    """The balance the session showed for ``card``."""
    for step in before.steps:
        methods = step.output.get("payment_methods") if isinstance(step.output, dict) else None
        if isinstance(methods, dict) and card in methods:
            return float(methods[card]["balance"])
    raise AssertionError(f"{card} shown nowhere")


def test_the_fitting_search_stops_at_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fee is found within the default budget; with one evaluation per failing call
    the search gives up before the pair that fits (it is counted in work, not time)."""
    monkeypatch.setattr(stated_family, "FIT_STEPS_PER_CALL", 1)
    _runs, starved, _learned = _total_refusals()
    assert not [c for c in starved.conditions("book_reservation") if FITTED in c.predicate.feature]
    monkeypatch.undo()
    _runs, memory, _learned = _total_refusals()
    assert [c for c in memory.conditions("book_reservation") if FITTED in c.predicate.feature]


def test_the_memory_learns_the_total_with_its_fee_and_blocks_only_wrong_totals() -> None:
    """A few "does not add up" refusals, with and without insurance, make a condition
    from the stated numbers that blocks a new session's wrong total, not its right one."""
    runs, memory, learned = _total_refusals()
    stated = [c for c in memory.conditions("book_reservation") if c.family == "stated"]
    assert stated and all(c.predicate.op == "not_in" for c in stated)
    [condition] = stated
    assert "30*len(passengers)*[insurance]" in condition.predicate.feature
    assert Thresholds().level(condition) == "block"
    fresh = next(b for b in runs if b.mutation is None and b.dialogue.task.task_id not in learned
                 and b.dialogue.task.insurance and len(b.dialogue.task.passengers) > 1)  # fmt: skip
    before = Trace(fresh.dialogue.steps[: fresh.dialogue.booking])
    right = booked(fresh)
    verdict = assess(memory.conditions("book_reservation"), before, "book_reservation", right)
    assert all(r.family != "stated" for r in verdict.reasons)
    paid = right["payment_methods"]
    wrong = {**right, "payment_methods": [*paid[:-1], {**paid[-1], "amount": paid[-1]["amount"]
                                                        - INSURANCE_PER_PASSENGER}]}  # fmt: skip
    verdict = assess(memory.conditions("book_reservation"), before, "book_reservation", wrong)
    assert verdict.decision == "block"
    [reason] = [r for r in verdict.reasons if r.family == "stated"]
    assert "plus 30 per len(passengers) when insurance is set" in reason.explanation
