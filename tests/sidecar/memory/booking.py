"""A small hand-written booking desk for the tests of what failure messages state.

A search shows flights with a price and a seat count per cabin; a user holds payment
methods (gift cards with a balance); ``book`` takes a cabin, flights, passengers and
payments, and refuses the way a real desk does, with the numbers in its words:

- a flight not available on the date asked: "flight HAT001 not available on date ...";
- payments that do not sum to the price of the flights in the cabin asked times the
  passengers: "payment amount does not add up, total price is X, but paid Y";
- a gift card paying more than its balance: "gift card balance is not enough".

Sessions are made by running these rules (:func:`desk`), never written with their
outcome."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sidecar.memory import Session, Step
from tests.sidecar.memory.world import session, step

CABINS = ("economy", "business")


def flight(number: str, date: str, economy: float, status: str = "available") -> dict[str, Any]:
    return {
        "flight_number": number,
        "date": date,
        "status": status,
        "seats": {"economy": 9, "business": 4},
        "prices": {"economy": economy, "business": round(economy * 3.5, 2)},
    }


def search(*flights: dict[str, Any]) -> Step:
    return step(
        "search_flights", {"origin": "JFK", "destination": "SFO"}, {"flights": list(flights)}
    )


def user(user_id: str, gift_balance: float) -> Step:
    card = f"gift_card_{user_id.split('_')[-1]}"
    methods = {card: {"source": "gift_card", "balance": gift_balance, "id": card}}
    return step("get_user", {"user_id": user_id}, {"user_id": user_id, "payment_methods": methods})


def desk(
    shown: Sequence[dict[str, Any]], balances: dict[str, float], arguments: dict[str, Any]
) -> str | None:
    """The desk's refusal of a booking (``None``: it books)."""
    by_key = {(f["flight_number"], f["date"]): f for f in shown}
    total = 0.0
    for wanted in arguments["flights"]:
        found = by_key.get((wanted["flight_number"], wanted["date"]))
        if found is None or found["status"] != "available":
            return f"Error: flight {wanted['flight_number']} not available on date {wanted['date']}"
        total += found["prices"][arguments["cabin"]]
    total *= len(arguments["passengers"])
    paid = sum(p["amount"] for p in arguments["payments"])
    if abs(paid - total) > 1e-6:
        return f"Error: payment amount does not add up, total price is {total:g}, but paid {paid:g}"
    for payment in arguments["payments"]:
        if payment["amount"] > balances.get(payment["payment_id"], float("inf")):
            return "Error: gift card balance is not enough"
    return None


def booking(
    sid: str,
    flights: Sequence[dict[str, Any]],
    cabin: str,
    passengers: int,
    paid: float | None = None,
    user_id: str | None = None,
    balance: float = 10_000.0,
) -> Session:
    """One session: a search, the user's details, then ``book`` of every flight shown,
    paying ``paid`` (the right total when ``None``) from the user's gift card."""
    user_id = user_id or f"user_{sid}"
    card = f"gift_card_{user_id.split('_')[-1]}"
    total = sum(f["prices"][cabin] for f in flights) * passengers
    arguments = {
        "user_id": user_id,
        "cabin": cabin,
        "flights": [{"flight_number": f["flight_number"], "date": f["date"]} for f in flights],
        "passengers": [{"first_name": f"P{k}", "last_name": sid} for k in range(passengers)],
        "payments": [{"payment_id": card, "amount": total if paid is None else paid}],
    }
    error = desk(flights, {card: balance}, arguments)
    call = step("book", arguments, {"reservation_id": f"R{sid}"}, error)
    return session(sid, search(*flights), user(user_id, balance), call, task_input=f"book {sid}")
