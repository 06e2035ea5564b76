"""The ``booking`` domain's service: a small flight-booking desk written for this
benchmark, its world drawn from a seeded generator (no data file).

The world holds users with payment methods (credit cards; gift cards and certificates
with a balance) and flights by number, each flying on some dates, with a price and the
seats left per cabin on each date.  The desk (:class:`Desk`) answers five tools and
refuses a booking the way a real desk does, its numbers in its words, checking in
this order:

1. the user exists: ``User mira_tanaka_4821 not found``;
2. each flight flies on the date asked: ``Flight BX417 not available on 2025-04-06``;
3. each flight has the seats in the cabin asked: ``Not enough seats on flight BX417 on
   2025-04-06: 2 left, 3 requested``;
4. the payments add up to the total, the sum over the flights of the price in the cabin
   asked, times the passengers, plus :data:`INSURANCE_PER_PASSENGER` per passenger when
   insurance is taken: ``Payment amount does not add up, total price is 1250, but paid
   1000``;
5. each payment method is the user's, and a gift card or certificate holds what it
   pays: ``Gift card balance is not enough: balance 50, required 120``.

The insurance price is in the tool's description, never in an output: a desk's fee
is policy, not data.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

CABINS = ("basic_economy", "economy", "business")
INSURANCE_PER_PASSENGER = 30
AIRPORTS = ("AVR", "BLM", "CQT", "DNE", "EPX", "FRW", "GLU", "HKD")
FIRST_NAMES = ("Mira", "Tomas", "Aiko", "Lena", "Ravi", "Noor", "Jonah", "Ines", "Kofi",
               "Sasha", "Pavel", "Greta", "Omar", "Yuki", "Dara", "Felix")  # fmt: skip
LAST_NAMES = ("Tanaka", "Okafor", "Lindqvist", "Moreau", "Petrov", "Castillo", "Haddad",
              "Brennan", "Kowalski", "Nakamura", "Silva", "Abara")  # fmt: skip
FIRST_DAY = date(2025, 4, 1)
DAYS = 14
ROUTE_SHARE = 0.45
"""The share of ordered airport pairs some flight serves."""
FLIES_ON = 0.8
"""How often a flight flies on a given date."""


@dataclass
class World:
    users: dict[str, dict[str, Any]]
    """user_id -> the user's details (``get_user_details``'s output)."""
    flights: dict[str, dict[str, Any]]
    """flight number -> origin, destination, departure time, and per date flown its
    ``prices`` and ``available_seats`` by cabin."""
    seed: int = 0

    def routes(self) -> dict[tuple[str, str], list[str]]:
        out: dict[tuple[str, str], list[str]] = {}
        for number, flight in sorted(self.flights.items()):
            out.setdefault((flight["origin"], flight["destination"]), []).append(number)
        return out


def days() -> list[str]:
    return [(FIRST_DAY + timedelta(days=d)).isoformat() for d in range(DAYS)]


def make_world(seed: int = 0, users: int = 40) -> World:
    rng = random.Random(f"booking:{seed}:world")
    flights: dict[str, dict[str, Any]] = {}
    numbers = rng.sample(range(100, 1000), 200)
    for origin in AIRPORTS:
        for destination in AIRPORTS:
            if origin == destination or rng.random() > ROUTE_SHARE:
                continue
            for _ in range(rng.choice((1, 1, 2))):
                number = f"BX{numbers.pop()}"
                flights[number] = _flight(rng, number, origin, destination)
    people: dict[str, dict[str, Any]] = {}
    while len(people) < users:
        person = _user(rng)
        people[person["user_id"]] = person
    return World(people, flights, seed)


def _flight(rng: random.Random, number: str, origin: str, destination: str) -> dict[str, Any]:
    dates: dict[str, Any] = {}
    base = rng.randint(90, 420)
    for day in days():
        if rng.random() > FLIES_ON:
            continue
        economy = base + rng.randint(-40, 60)
        prices = {
            "basic_economy": int(economy * rng.uniform(0.55, 0.8)),
            "economy": economy,
            "business": int(economy * rng.uniform(2.4, 3.8)),
        }
        seats = {
            "basic_economy": rng.choice((0, 1, 2, *range(3, 30))),
            "economy": rng.choice((1, 2, 3, *range(4, 60))),
            "business": rng.choice((0, 1, 2, 3, *range(4, 16))),
        }
        dates[day] = {"prices": prices, "available_seats": seats}
    hour, minute = rng.randint(5, 22), rng.choice((0, 15, 30, 45))
    return {"origin": origin, "destination": destination,
            "departure_time": f"{hour:02d}:{minute:02d}:00", "dates": dates}  # fmt: skip


def _user(rng: random.Random) -> dict[str, Any]:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    user_id = f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"
    methods: dict[str, dict[str, Any]] = {}
    for _ in range(rng.choice((1, 1, 2))):
        pid = f"credit_card_{rng.randint(1_000_000, 9_999_999)}"
        methods[pid] = {"id": pid, "source": "credit_card",
                        "brand": rng.choice(("visa", "mastercard", "amex")),
                        "last_four": f"{rng.randint(0, 9999):04d}"}  # fmt: skip
    for source, count, low, high in (("gift_card", (0, 1, 1, 2), 40, 600),
                                     ("certificate", (0, 0, 1), 100, 500)):  # fmt: skip
        for _ in range(rng.choice(count)):
            pid = f"{source}_{rng.randint(1_000_000, 9_999_999)}"
            methods[pid] = {"id": pid, "source": source, "balance": rng.randint(low, high)}
    return {
        "user_id": user_id,
        "name": {"first_name": first, "last_name": last},
        "email": f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com",
        "payment_methods": methods,
        "reservations": [],
    }


def total_price(world: World, arguments: dict[str, Any]) -> int:
    """What the desk charges for a booking (the flights must fly on their dates)."""
    cabin = arguments["cabin"]
    per_passenger = sum(
        world.flights[f["flight_number"]]["dates"][f["date"]]["prices"][cabin]
        for f in arguments["flights"]
    )
    if arguments.get("insurance"):
        per_passenger += INSURANCE_PER_PASSENGER
    return int(per_passenger * len(arguments["passengers"]))


@dataclass
class Desk:
    """The service one run talks to: a copy of the world it may change (a booking takes
    seats and balances)."""

    world: World
    reservation_prefix: str
    booked: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.world = copy.deepcopy(self.world)

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[Any, str | None]:
        """(output, refusal) of one call."""
        handler = getattr(self, f"_{tool}", None)
        if handler is None:
            return None, f"Unknown tool {tool}"
        result: tuple[Any, str | None] = handler(**arguments)
        return result

    def _get_user_details(self, user_id: str) -> tuple[Any, str | None]:
        user = self.world.users.get(user_id)
        if user is None:
            return None, f"User {user_id} not found"
        return copy.deepcopy(user), None

    def _search_flights(self, origin: str, destination: str, date: str) -> tuple[Any, str | None]:
        found = []
        for number in self.world.routes().get((origin, destination), []):
            flight = self.world.flights[number]
            on = flight["dates"].get(date)
            if on is not None:
                found.append({"flight_number": number, "date": date, "origin": origin,
                              "destination": destination,
                              "departure_time": flight["departure_time"],
                              "status": "available", **copy.deepcopy(on)})  # fmt: skip
        return found, None

    def _get_flight_status(self, flight_number: str, date: str) -> tuple[Any, str | None]:
        flight = self.world.flights.get(flight_number)
        if flight is None or date not in flight["dates"]:
            return None, f"Flight {flight_number} not available on {date}"
        return "available", None

    def _get_reservation_details(self, reservation_id: str) -> tuple[Any, str | None]:
        found = self.booked.get(reservation_id)
        if found is None:
            return None, f"Reservation {reservation_id} not found"
        return copy.deepcopy(found), None

    def _book_reservation(self, **arguments: Any) -> tuple[Any, str | None]:
        refused = refusal(self.world, arguments)
        if refused is not None:
            return None, refused
        return self._book(arguments), None

    def _book(self, arguments: dict[str, Any]) -> dict[str, Any]:
        cabin, passengers = arguments["cabin"], arguments["passengers"]
        flights = []
        for f in arguments["flights"]:
            on = self.world.flights[f["flight_number"]]["dates"][f["date"]]
            on["available_seats"][cabin] -= len(passengers)
            flights.append({**f, "price": on["prices"][cabin]})
        user = self.world.users[arguments["user_id"]]
        for payment in arguments["payment_methods"]:
            method = user["payment_methods"][payment["payment_id"]]
            if "balance" in method:
                method["balance"] -= payment["amount"]
        reservation_id = f"{self.reservation_prefix}{len(self.booked) + 1}"
        user["reservations"].append(reservation_id)
        reservation = {"reservation_id": reservation_id, "user_id": arguments["user_id"],
                       "origin": arguments["origin"], "destination": arguments["destination"],
                       "cabin": cabin, "flights": flights,
                       "passengers": copy.deepcopy(passengers),
                       "payment_history": copy.deepcopy(arguments["payment_methods"]),
                       "insurance": arguments["insurance"]}  # fmt: skip
        self.booked[reservation_id] = reservation
        return copy.deepcopy(reservation)


def refusal(world: World, arguments: dict[str, Any]) -> str | None:
    """Why the desk refuses a booking, in its words (``None``: it books); the checks in
    the module docstring's order."""
    user = world.users.get(arguments["user_id"])
    if user is None:
        return f"User {arguments['user_id']} not found"
    cabin, asked = arguments["cabin"], len(arguments["passengers"])
    for f in arguments["flights"]:
        flight = world.flights.get(f["flight_number"])
        if flight is None or f["date"] not in flight["dates"]:
            return f"Flight {f['flight_number']} not available on {f['date']}"
    for f in arguments["flights"]:
        left = world.flights[f["flight_number"]]["dates"][f["date"]]["available_seats"][cabin]
        if left < asked:
            return (
                f"Not enough seats on flight {f['flight_number']} on {f['date']}: "
                f"{left} left, {asked} requested"
            )
    total = total_price(world, arguments)
    paid = sum(p["amount"] for p in arguments["payment_methods"])
    if paid != total:
        return f"Payment amount does not add up, total price is {total}, but paid {paid}"
    for payment in arguments["payment_methods"]:
        method = user["payment_methods"].get(payment["payment_id"])
        if method is None:
            return f"Payment method {payment['payment_id']} not found"
        if "balance" in method and method["balance"] < payment["amount"]:
            what = "Gift card" if method["source"] == "gift_card" else "Certificate"
            return (
                f"{what} balance is not enough: balance {method['balance']}, "
                f"required {payment['amount']}"
            )
    return None
