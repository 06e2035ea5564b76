"""The ``booking`` domain of ``bench_failures``: runs against a flight-booking desk
simulated for this benchmark (:mod:`benchmarks.booking_world`), every value drawn from a
seeded generator; no data file, nothing downloaded.

- a *task* is a user's request: a one-way, connecting, round or three-city trip for one
  to four passengers in one cabin, with or without insurance, paid one of the ways the
  user's payment methods allow (one card, a gift card or two cards, a gift card or a
  certificate first and a card for the rest);
- its *ground-truth run* looks the user and the flights up, sometimes checks the
  flights' status, books with the total the outputs it read make (the prices in the
  cabin asked, times the passengers, plus insurance), and reads the reservation back:
  reward 1, every output the desk's;
- a *mutation run* makes one seeded mistake (:data:`KINDS`) in the booking (or in the
  first look-up) and ends, abandoned, at the desk's refusal.  The refusal is the
  desk's answer to the changed call, never written here.  Run ``r`` takes the next
  kind in a round robin over the kinds the task admits, from a seeded offset, and a
  candidate of that kind drawn by ``Random("booking:<seed>:<task>:<r>")``;
- what the agent had been told before a call is the user's turns before it: the
  request, then "go ahead" before the booking;
- ``task`` is ``booking/<task id>``, ``agent`` ``ground_truth`` or
  ``mutation:<kind>``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.booking_world import (
    CABINS,
    FIRST_NAMES,
    INSURANCE_PER_PASSENGER,
    LAST_NAMES,
    Desk,
    World,
    days,
    make_world,
)
from benchmarks.mutation_runs import Mutation, mutation_runs
from benchmarks.tau2 import Corpus, Run
from sidecar.memory import Step

DOMAIN = "booking"
TASKS = 72
RUNS_PER_TASK = 4
"""Mutation runs per task."""
TOTAL_KINDS = ("no_passenger_multiplier", "no_insurance", "other_cabin_price")
"""The mistakes in the amount paid: the desk says the total does not add up."""
KINDS = (*TOTAL_KINDS, "low_balance", "too_many_passengers", "unknown_user",
         "flight_not_on_date")  # fmt: skip
GO_AHEAD = "Yes, that's right, please go ahead and book it."


@dataclass(frozen=True)
class Task:
    task_id: str
    user_id: str
    legs: tuple[tuple[str, str, str], ...]
    """(origin, destination, date) of each search."""
    flights: tuple[tuple[str, str], ...]
    """(flight number, date) of each flight booked, one per leg."""
    cabin: str
    passengers: tuple[dict[str, str], ...]
    insurance: bool
    plan: str
    """How to pay: ``card``, ``gift``, ``two_cards``, ``gift_then_card``,
    ``certificate_then_card``."""
    check_status: bool

    def request(self, world: World) -> str:
        user = world.users[self.user_id]
        trip = ", then ".join(f"from {o} to {d} on {day}" for o, d, day in self.legs)
        names = ", ".join(f"{p['first_name']} {p['last_name']}" for p in self.passengers)
        pays = {"card": "my credit card", "gift": "my gift card",
                "two_cards": "my two credit cards, split evenly",
                "gift_then_card": "my gift card first, the rest on my credit card",
                "certificate_then_card": "my certificate first, the rest on my credit card",
                }[self.plan]  # fmt: skip
        return (
            f"Hi, I'm {user['name']['first_name']} {user['name']['last_name']}, user id "
            f"{self.user_id}. I'd like to fly {trip}, in {self.cabin.replace('_', ' ')}, "
            f"for {names}. {'I want' if self.insurance else 'No'} travel insurance. "
            f"Please pay with {pays}."
        )


@dataclass(frozen=True)
class Dialogue:
    task: Task
    steps: tuple[Step, ...]
    told: tuple[str, ...]
    booking: int
    """The index of the ``book_reservation`` call."""


# ---- tasks -------------------------------------------------------------------------------
def make_tasks(world: World, seed: int = 0, count: int = TASKS) -> list[Task]:
    rng = random.Random(f"booking:{seed}:tasks")
    out: list[Task] = []
    taken: set[tuple[Any, ...]] = set()
    while len(out) < count:
        task = _task(world, rng, f"{len(out):03d}")
        # the same booking twice would be one situation counted as two
        if task is not None and (task.user_id, task.flights, task.cabin) not in taken:
            taken.add((task.user_id, task.flights, task.cabin))
            out.append(task)
    return out


def _task(world: World, rng: random.Random, task_id: str) -> Task | None:
    user_id = rng.choice(sorted(world.users))
    legs = _legs(world, rng)
    if legs is None:
        return None
    n = rng.choice((1, 1, 2, 2, 3, 4))
    cabin = rng.choice(CABINS)
    flights = []
    for origin, destination, day in legs:
        numbers = [number for number in world.routes()[(origin, destination)]
                   if _seats(world, number, day, cabin) >= n]  # fmt: skip
        if not numbers:
            return None
        flights.append((rng.choice(numbers), day))
    user = world.users[user_id]
    passengers = [{"first_name": user["name"]["first_name"],
                   "last_name": user["name"]["last_name"], "dob": _dob(rng)}]  # fmt: skip
    passengers += [{"first_name": rng.choice(FIRST_NAMES), "last_name": rng.choice(LAST_NAMES),
                    "dob": _dob(rng)} for _ in range(n - 1)]  # fmt: skip
    insurance = rng.random() < 0.5
    total = _total(world, flights, cabin, n, insurance)
    plans = _plans(user["payment_methods"], total)
    return Task(task_id, user_id, tuple(legs), tuple(flights), cabin, tuple(passengers),
                insurance, rng.choice(plans), rng.random() < 0.3)  # fmt: skip


def _legs(world: World, rng: random.Random) -> list[tuple[str, str, str]] | None:
    """The searches of a one-way, connecting, round or three-city trip, on dates some
    flight of each leg flies."""
    routes = world.routes()
    shape = rng.choice(("one_way", "one_way", "connecting", "round_trip", "round_trip",
                        "three_city"))  # fmt: skip
    start = rng.choice(sorted(routes))
    airports = [*start]
    for _ in range({"one_way": 0, "connecting": 1, "round_trip": 0, "three_city": 1}[shape]):
        onward = [d for (o, d) in routes if o == airports[-1] and d not in airports]
        if not onward:
            return None
        airports.append(rng.choice(sorted(onward)))
    if shape in ("round_trip", "three_city"):
        airports.append(airports[0])
    calendar = days()
    day = rng.randrange(len(calendar) - 6)
    legs = []
    for origin, destination in itertools.pairwise(airports):
        if (origin, destination) not in routes:
            return None
        legs.append((origin, destination, calendar[day]))
        if shape != "connecting":
            day += rng.randint(1, 3)
    return legs


def _seats(world: World, number: str, day: str, cabin: str) -> int:
    on = world.flights[number]["dates"].get(day)
    return int(on["available_seats"][cabin]) if on is not None else 0


def _dob(rng: random.Random) -> str:
    return f"{rng.randint(1950, 2015)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _total(
    world: World, flights: Sequence[tuple[str, str]], cabin: str, n: int, insurance: bool
) -> int:
    price = sum(world.flights[f]["dates"][d]["prices"][cabin] for f, d in flights)
    return (price + (INSURANCE_PER_PASSENGER if insurance else 0)) * n


def _plans(methods: dict[str, dict[str, Any]], total: int) -> list[str]:
    sources = Counter(m["source"] for m in methods.values())
    plans = ["card"]
    if sources["credit_card"] > 1:
        plans.append("two_cards")
    for source, plan in (("gift_card", "gift_then_card"), ("certificate", "certificate_then_card")):
        if sources[source]:
            enough = _richest(methods, source)[1] >= total
            plans.append("gift" if enough and source == "gift_card" else plan)
    return sorted(set(plans) - ({"certificate_then_card"} if "gift" in plans else set()))


def _richest(methods: dict[str, dict[str, Any]], source: str) -> tuple[str, int]:
    """The method of ``source`` with the largest balance (the first id of a tie)."""
    found = [(-m["balance"], p) for p, m in methods.items() if m["source"] == source]
    balance, pid = min(found)
    return pid, -balance


def payments(plan: str, methods: dict[str, dict[str, Any]], amount: int) -> list[dict[str, Any]]:
    """How the agent splits ``amount`` between the user's methods for ``plan``."""
    cards = sorted(p for p, m in methods.items() if m["source"] == "credit_card")
    first = {"gift": "gift_card", "gift_then_card": "gift_card",
             "certificate_then_card": "certificate"}.get(plan)  # fmt: skip
    if plan == "card":
        return [{"payment_id": cards[0], "amount": amount}]
    if plan == "two_cards":
        half = amount // 2
        return [{"payment_id": cards[0], "amount": half},
                {"payment_id": cards[1], "amount": amount - half}]  # fmt: skip
    pid = _richest(methods, str(first))[0]
    if plan == "gift":
        return [{"payment_id": pid, "amount": amount}]
    part = min(methods[pid]["balance"], amount)
    out = [{"payment_id": pid, "amount": part}]
    return out + ([{"payment_id": cards[0], "amount": amount - part}] if amount > part else [])


# ---- the ground-truth run ----------------------------------------------------------------
def play(world: World, task: Task) -> Dialogue:
    """The ground-truth run: each call answered by the desk, the booking's amounts read
    from the outputs before it."""
    desk = Desk(world, f"RB{task.task_id}")
    steps: list[Step] = []
    told: list[str] = []
    heard = [task.request(world)]

    def call(tool: str, arguments: dict[str, Any]) -> Any:
        output, error = desk.call(tool, arguments)
        steps.append(Step(tool, arguments, output, error))
        told.append("\n".join(heard))
        if error is not None:
            raise AssertionError(f"ground truth of {task.task_id} refused: {error}")
        return output

    user = call("get_user_details", {"user_id": task.user_id})
    shown: dict[tuple[str, str], dict[str, Any]] = {}
    for origin, destination, day in task.legs:
        leg = {"origin": origin, "destination": destination, "date": day}
        for flight in call("search_flights", leg):
            shown[(flight["flight_number"], flight["date"])] = flight
    if task.check_status:
        for number, day in task.flights:
            call("get_flight_status", {"flight_number": number, "date": day})
    price = sum(shown[f]["prices"][task.cabin] for f in task.flights)
    n = len(task.passengers)
    amount = (price + (INSURANCE_PER_PASSENGER if task.insurance else 0)) * n
    heard.append(GO_AHEAD)
    booking = len(steps)
    reservation = call("book_reservation", booking_arguments(
        task, payments(task.plan, user["payment_methods"], amount)))  # fmt: skip
    call("get_reservation_details", {"reservation_id": reservation["reservation_id"]})
    return Dialogue(task, tuple(steps), tuple(told), booking)


def booking_arguments(task: Task, paid: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "user_id": task.user_id,
        "origin": task.legs[0][0],
        "destination": task.legs[-1][1],
        "flight_type": "round_trip" if task.legs[-1][1] == task.legs[0][0] else "one_way",
        "cabin": task.cabin,
        "flights": [{"flight_number": f, "date": d} for f, d in task.flights],
        "passengers": [dict(p) for p in task.passengers],
        "payment_methods": paid,
        "insurance": task.insurance,
    }


# ---- the mistakes ------------------------------------------------------------------------
Mistake = tuple[str, int, str, dict[str, Any]]
"""(kind, index of the changed call, its tool, its changed arguments)."""


def candidates(world: World, dialogue: Dialogue, seed: int) -> list[Mutation]:
    """Every mistake the task admits, parameters drawn from a seeded generator, each
    run against the desk up to its refusal."""
    rng = random.Random(f"booking:{seed}:{dialogue.task.task_id}:values")
    out = []
    for kind, at, tool, arguments in _mistakes(world, dialogue, rng):
        desk = Desk(world, f"RB{dialogue.task.task_id}")
        for step in dialogue.steps[:at]:
            desk.call(step.tool, dict(step.arguments))
        _output, error = desk.call(tool, arguments)
        if error is None:
            raise AssertionError(f"{kind} of {dialogue.task.task_id} was not refused")
        steps = (*dialogue.steps[:at], Step(tool, arguments, None, error))
        out.append(Mutation(kind, at, steps, dialogue.told[: at + 1]))
    return out


def _mistakes(world: World, dialogue: Dialogue, rng: random.Random) -> list[Mistake]:
    task, at = dialogue.task, dialogue.booking
    methods = dialogue.steps[0].output["payment_methods"]
    on = [world.flights[f]["dates"][d] for f, d in task.flights]
    n, insurance = len(task.passengers), INSURANCE_PER_PASSENGER if task.insurance else 0
    price = sum(o["prices"][task.cabin] for o in on)

    def paying(amount: int, passengers: Sequence[dict[str, str]] = task.passengers) -> Mistake:
        arguments = booking_arguments(task, payments(task.plan, methods, amount))
        return ("", at, "book_reservation", {**arguments, "passengers": list(passengers)})

    out: list[Mistake] = []
    if n > 1:
        out.append(("no_passenger_multiplier", *paying(price + insurance)[1:]))
    if insurance:
        out.append(("no_insurance", *paying(price * n)[1:]))
    others = [c for c in CABINS if c != task.cabin and sum(o["prices"][c] for o in on) != price]
    if others:
        other = sum(o["prices"][rng.choice(others)] for o in on)
        out.append(("other_cabin_price", *paying((other + insurance) * n)[1:]))
    out += _low_balance(task, methods, (price + insurance) * n, at, rng)
    left = min(o["available_seats"][task.cabin] for o in on)
    if left + 1 <= 6:
        asked = max(n + 1, left + rng.choice((1, 2)))
        extra = [{"first_name": rng.choice(FIRST_NAMES), "last_name": rng.choice(LAST_NAMES),
                  "dob": _dob(rng)} for _ in range(asked - n)]  # fmt: skip
        passengers = [*task.passengers, *extra]
        out.append(("too_many_passengers", *paying((price + insurance) * asked, passengers)[1:]))
    out += _unknown_user(world, dialogue, rng)
    out += _not_on_date(world, task, at, dialogue.steps[at].arguments, rng)
    return out


def _low_balance(
    task: Task, methods: dict[str, dict[str, Any]], total: int, at: int, rng: random.Random
) -> list[Mistake]:
    """A gift card or certificate asked to pay more than its balance, the rest on a
    card: the payments still add up."""
    low = sorted(p for p, m in methods.items() if "balance" in m and m["balance"] < total)
    if not low:
        return []
    pid = rng.choice(low)
    part = methods[pid]["balance"] + rng.randint(1, min(150, total - methods[pid]["balance"]))
    card = min(p for p, m in methods.items() if m["source"] == "credit_card")
    paid = [{"payment_id": pid, "amount": part}]
    paid += [{"payment_id": card, "amount": total - part}] if total > part else []
    return [("low_balance", at, "book_reservation", booking_arguments(task, paid))]


def _unknown_user(world: World, dialogue: Dialogue, rng: random.Random) -> list[Mistake]:
    """The user's id with other digits: at the first look-up, or in the booking."""
    user_id = dialogue.task.user_id
    stem = user_id.rsplit("_", 1)[0]
    while True:
        other = f"{stem}_{rng.randint(1000, 9999)}"
        if other not in world.users:
            break
    booking = {**dialogue.steps[dialogue.booking].arguments, "user_id": other}
    return [("unknown_user", 0, "get_user_details", {"user_id": other}),
            ("unknown_user", dialogue.booking, "book_reservation", booking)]  # fmt: skip


def _not_on_date(
    world: World, task: Task, at: int, arguments: dict[str, Any], rng: random.Random
) -> list[Mistake]:
    """One flight booked on a date near the one asked that it does not fly."""
    out: list[Mistake] = []
    for k, (number, day) in enumerate(task.flights):
        calendar = days()
        near = calendar[max(0, calendar.index(day) - 3) : calendar.index(day) + 4]
        idle = [d for d in near if d not in world.flights[number]["dates"]]
        if idle:
            flights = [dict(f) for f in arguments["flights"]]
            flights[k]["date"] = rng.choice(idle)
            out.append(("flight_not_on_date", at, "book_reservation",
                        {**arguments, "flights": flights}))  # fmt: skip
    return out


# ---- the corpus --------------------------------------------------------------------------
@dataclass(frozen=True)
class Built:
    run: Run
    dialogue: Dialogue
    mutation: Mutation | None = None


def build(seed: int = 0, runs: int = RUNS_PER_TASK, tasks: int = TASKS) -> list[Built]:
    """Every task's ground-truth run and up to ``runs`` mutation runs."""
    world = make_world(seed)
    out: list[Built] = []
    for task in make_tasks(world, seed, tasks):
        dialogue = play(world, task)
        name = f"{DOMAIN}/{task.task_id}"
        out.append(Built(Run(f"{name}#gt", DOMAIN, name, "ground_truth", 1.0, dialogue.steps,
                             dialogue.told), dialogue))  # fmt: skip
        found = candidates(world, dialogue, seed)
        key = f"booking:{seed}:{task.task_id}"
        for run, mutation in mutation_runs(name, DOMAIN, found, KINDS, runs, key):
            out.append(Built(run, dialogue, mutation))
    return out


TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "get_user_details": ("Get a user's profile: name, email, payment methods (credit "
                         "cards; gift cards and certificates with their balance) and "
                         "reservations.", {"user_id": {"type": "string"}}),
    "search_flights": ("Search the direct flights from an airport to another on a date: "
                       "each flight's number, departure time, prices by cabin and seats "
                       "left by cabin.", {"origin": {"type": "string"},
                                          "destination": {"type": "string"},
                                          "date": {"type": "string"}}),
    "get_flight_status": ("The status of a flight on a date.",
                          {"flight_number": {"type": "string"}, "date": {"type": "string"}}),
    "book_reservation": (
        "Book flights for passengers in one cabin. The payments must add up to the total: "
        "the flights' prices in the cabin times the passengers, plus travel insurance at "
        f"{INSURANCE_PER_PASSENGER} per passenger when chosen. A gift card or certificate "
        "cannot pay more than its balance.",
        {"user_id": {"type": "string"}, "origin": {"type": "string"},
         "destination": {"type": "string"}, "flight_type": {"type": "string"},
         "cabin": {"type": "string", "enum": list(CABINS)},
         "flights": {"type": "array", "items": {"type": "object"}},
         "passengers": {"type": "array", "items": {"type": "object"}},
         "payment_methods": {"type": "array", "items": {"type": "object"}},
         "insurance": {"type": "boolean"}}),
    "get_reservation_details": ("A reservation's flights, passengers and payments.",
                                {"reservation_id": {"type": "string"}}),
}  # fmt: skip


def tools() -> list[Any]:
    """The desk's tools, as sidecar tools: every one but the booking only reads."""
    from sidecar import Tool

    return [
        Tool(name, text, "write" if name == "book_reservation" else "read",
             {"type": "object", "properties": params, "required": sorted(params)})
        for name, (text, params) in TOOLS.items()
    ]  # fmt: skip


def load(seed: int = 0, runs: int = RUNS_PER_TASK) -> Corpus:
    built = build(seed, runs)
    notes: dict[str, Any] = {
        "tasks": len({b.dialogue.task.task_id for b in built}),
        "ground_truth_runs": sum(b.mutation is None for b in built),
        "mutation_runs": sum(b.mutation is not None for b in built),
        "calls": sum(len(b.run.steps) for b in built),
    }
    for kind, n in sorted(Counter(b.mutation.kind for b in built if b.mutation).items()):
        notes[f"mutation:{kind}"] = n
    return Corpus([b.run for b in built], notes, tools())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The booking domain: counts and refusals.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=RUNS_PER_TASK)
    args = parser.parse_args(argv)
    corpus = load(args.seed, args.runs)
    refusals = Counter(
        (s.tool, s.error) for r in corpus.runs for s in r.steps if s.error is not None
    )
    print(json.dumps({"notes": corpus.notes, "refusals": [
        [t, e, n] for (t, e), n in refusals.most_common(12)]}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
