"""Seeded mutations of a BFCL scenario's ground truth that make a simulator refuse a
call: the failing sessions of the ``bfcl`` domain (:mod:`benchmarks.bfcl`).

:func:`candidates` builds every mutation a scenario admits, its parameters drawn from
the given random source; :mod:`benchmarks.bfcl` executes each on fresh simulators and
keeps those the simulator itself answers with an error.  The kinds, and what each
changes (read from the simulators' code: which refusals they really return):

- ``drop_prerequisite``: one call of ``cd``, ``mkdir``, ``touch``,
  ``authenticate_travel`` or ``trading_login`` removed, so that a later call meets a
  missing directory or file ("No such file or directory", "No such file") or a token it
  was never given ("Invalid access token");
- ``missing_state``: a prerequisite the package's initial state supplies is taken away:
  the session starts logged out of trading (TradingBot's ground truths never log in:
  its scenarios start logged in; "User not authenticated. Please log in ...") or with
  the market closed (TradingBot has no call that opens it; "Market is closed.
  Transactions are not allowed.");
- ``undone_prerequisite``: a call that undoes an earlier one inserted before a call:
  ``trading_logout`` before a trading call, ``cd('..')`` after a ``cd`` into a folder,
  before a file-system call;
- ``wrong_order``: two adjacent calls of different tools swapped (``touch`` after the
  ``echo`` that writes the file, ``cd`` after the ``cat`` of a file inside it);
- ``past_limit``: an amount pushed past a balance or budget, by a factor drawn in
  [1.2, 3): a buy order's share count past the account balance ("Insufficient funds:
  required ..."), a withdrawal past it, an insurance cost past the budget limit
  ("Exceeded budget limit"), a budget limit set past the balance of the card a later
  booking uses ("Balance is less than budget limit"), a flight booked in a dearer
  class than the card can pay ("Insufficient funds");
- ``unknown_id``: an identifier or name replaced by one of the same shape that does not
  exist (digits redrawn, a suffix added to a file name, a ticker or airport code of
  the same length redrawn): booking, card, order, symbol, access token, airport, file,
  folder ("Booking not found", "Card not registered", "Order with ID ... not found.",
  "Invalid stock symbol: ...", "Invalid access token", "No such file or directory");
- ``invalid_value``: an argument outside the tool's domain: a zero divisor, an empty
  list to average, a negative square root, a zero whole for a percentage, an
  unsupported currency, a date in the wrong format, an unknown travel class, a zero or
  negative amount, an unknown ``wc`` mode, a nested path for ``cd``, a name with a
  character the file system forbids.

Every choice is drawn from the caller's random source in a fixed order, so a seed
gives the same candidates.
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from benchmarks.bfcl_simulators import Call, Scenario, simulator_class, world_before

KINDS = (
    "drop_prerequisite",
    "missing_state",
    "undone_prerequisite",
    "wrong_order",
    "past_limit",
    "unknown_id",
    "invalid_value",
)
PREREQUISITES = ("cd", "mkdir", "touch", "authenticate_travel", "trading_login")
FACTOR = (1.2, 3.0)
"""The range an amount is multiplied by to pass its limit."""
ID_ARGUMENTS = (
    "booking_id",
    "card_id",
    "order_id",
    "symbol",
    "access_token",
    "travel_from",
    "travel_to",
    "file_name",
    "file_name1",
    "file_name2",
    "source",
    "folder",
    "dir_name",
)
_SPECIAL_FOLDERS = ("", ".", "..", "/")
_SUFFIXES = ("_old", "_v2", "_backup", "_draft", "_2023")


@dataclass(frozen=True)
class Mutation:
    kind: str
    site: int
    """The ground-truth call changed, dropped, inserted before or swapped with the next."""
    detail: str
    calls: tuple[Call, ...] = field(hash=False)
    state: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    """Initial-state fields overridden per class (``missing_state``)."""
    first: int = 0
    """The first step of :attr:`calls` whose refusal the mutation causes (an inserted
    ``trading_logout`` or ``cd('..')`` that is itself refused does not count)."""
    only_there: bool = False
    """Whether the refusal must be at :attr:`first` (a changed argument is refused by
    the call it was given to)."""

    def caused(self, failed: int | None) -> bool:
        """Whether a first refusal at step ``failed`` is this mutation's doing."""
        if failed is None or failed < self.first:
            return False
        return failed == self.first or not self.only_there


def candidates(scenario: Scenario, rng: random.Random) -> list[Mutation]:
    """Every mutation of the scenario, in a fixed order (not yet executed)."""
    out = list(_missing_state(scenario))
    for i in range(len(scenario.calls)):
        for build in _PER_CALL:
            out.extend(build(scenario, i, rng))
    return out


def _missing_state(scenario: Scenario) -> Iterator[Mutation]:
    config = scenario.initial_config.get("TradingBot")
    if "TradingBot" not in scenario.classes or config is None:
        return
    calls = scenario.calls
    if config.get("authenticated"):
        yield Mutation("missing_state", 0, "starts logged out of trading", calls,
                       {"TradingBot": {"authenticated": False}})  # fmt: skip
    if config.get("market_status") == "Open" and any(c.tool == "withdraw_funds" for c in calls):
        yield Mutation("missing_state", 0, "starts with the market closed", calls,
                       {"TradingBot": {"market_status": "Closed"}})  # fmt: skip


def _drop(scenario: Scenario, i: int, rng: random.Random) -> Iterator[Mutation]:
    calls = scenario.calls
    if calls[i].tool in PREREQUISITES and i + 1 < len(calls):
        yield Mutation("drop_prerequisite", i, f"{calls[i].tool} dropped",
                       calls[:i] + calls[i + 1 :], first=i)  # fmt: skip


def _undo(scenario: Scenario, i: int, rng: random.Random) -> Iterator[Mutation]:
    calls, call = scenario.calls, scenario.calls[i]
    undo: Call | None = None
    if "TradingBot" in scenario.classes and _owner(scenario, call.tool) == "TradingBot" and i:
        undo = Call("trading_logout", {}, call.turn)
    entered = any(
        c.tool == "cd" and c.arguments.get("folder") not in _SPECIAL_FOLDERS for c in calls[:i]
    )
    if entered and call.tool != "cd" and _owner(scenario, call.tool) == "GorillaFileSystem":
        undo = Call("cd", {"folder": ".."}, call.turn)
    if undo is not None:
        yield Mutation("undone_prerequisite", i, f"{undo.tool} inserted before {call.tool}",
                       (*calls[:i], undo, *calls[i:]), first=i + 1)  # fmt: skip


def _swap(scenario: Scenario, i: int, rng: random.Random) -> Iterator[Mutation]:
    calls = scenario.calls
    if i + 1 < len(calls) and calls[i].tool != calls[i + 1].tool:
        later = replace(calls[i + 1], turn=calls[i].turn)
        yield Mutation("wrong_order", i, f"{calls[i + 1].tool} before {calls[i].tool}",
                       (*calls[:i], later, calls[i], *calls[i + 2:]), first=i)  # fmt: skip


def _past_limit(scenario: Scenario, i: int, rng: random.Random) -> Iterator[Mutation]:
    call = scenario.calls[i]
    changed: dict[str, Any] | None = None
    detail = ""
    args = call.arguments
    if call.tool in ("place_order", "withdraw_funds", "purchase_insurance", "set_budget_limit"):
        world = world_before(scenario, i)
        factor = round(rng.uniform(*FACTOR), 2)
        if call.tool == "place_order" and str(args.get("order_type", "")).lower() == "buy":
            balance = float(world.instances["TradingBot"].account_info.get("balance", 0))
            amount = math.ceil(balance * factor / float(args["price"]))
            changed, detail = {"amount": amount}, f"{amount} shares, past the balance"
        elif call.tool == "withdraw_funds":
            balance = float(world.instances["TradingBot"].account_info.get("balance", 0))
            changed = {"amount": round(balance * factor, 2)}
            detail = f"withdrawal {factor}x the balance"
        elif call.tool == "purchase_insurance":
            budget = world.instances["TravelAPI"].budget_limit
            if budget:
                changed = {"insurance_cost": round(float(budget) * factor, 2)}
                detail = f"insurance {factor}x the budget limit"
        elif call.tool == "set_budget_limit":
            changed, detail = _budget_past_card(scenario, i, world, factor)
    elif call.tool == "book_flight":
        dearer = [c for c in ("first", "business") if c != args.get("travel_class")]
        changed = {"travel_class": dearer[0]}
        detail = f"{dearer[0]} class instead of {args.get('travel_class')}"
    if changed is not None:
        yield Mutation("past_limit", i, f"{call.tool}: {detail}", _with(scenario, i, changed),
                       first=i, only_there=call.tool != "set_budget_limit")  # fmt: skip


def _budget_past_card(
    scenario: Scenario, i: int, world: Any, factor: float
) -> tuple[dict[str, Any] | None, str]:
    """A budget limit past the balance of the card that the next booking uses."""
    later = next((c for c in scenario.calls[i + 1 :] if c.tool == "book_flight"), None)
    if later is None:
        return None, ""
    card = world.instances["TravelAPI"].credit_card_list.get(later.arguments.get("card_id"))
    if not card or "balance" not in card:
        return None, ""
    limit = round(float(card["balance"]) * factor, 2)
    return {"budget_limit": limit}, f"budget {factor}x the balance of the card booked with"


def _unknown(scenario: Scenario, i: int, rng: random.Random) -> Iterator[Mutation]:
    call = scenario.calls[i]
    for name in ID_ARGUMENTS:
        value = call.arguments.get(name)
        if value is None or isinstance(value, bool) or value in _SPECIAL_FOLDERS:
            continue
        other = unknown_like(value, rng)
        if other != value:
            yield Mutation("unknown_id", i, f"{call.tool}: {name} {value!r} -> {other!r}",
                           _with(scenario, i, {name: other}), first=i, only_there=True)  # fmt: skip


def unknown_like(value: Any, rng: random.Random) -> Any:
    """A value of the same shape as ``value`` (its length, digits, extension)."""
    if isinstance(value, int):
        digits = len(str(abs(value))) or 1
        return rng.randrange(10 ** (digits - 1), 10**digits)
    text = str(value)
    if text.isalpha() and text.isupper() and len(text) <= 5:  # a ticker, an airport
        return "".join(rng.choice(string.ascii_uppercase) for _ in text)
    if any(ch.isdigit() for ch in text):
        return "".join(rng.choice(string.digits) if ch.isdigit() else ch for ch in text)
    path = PurePosixPath(text)
    return f"{path.stem}{rng.choice(_SUFFIXES)}{path.suffix}"


def _invalid(scenario: Scenario, i: int, rng: random.Random) -> Iterator[Mutation]:
    call = scenario.calls[i]
    rule = _INVALID.get(call.tool)
    if rule is None:
        return
    changed = rule(call.arguments, rng)
    if changed:
        shown = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        yield Mutation("invalid_value", i, f"{call.tool}: {shown}", _with(scenario, i, changed),
                       first=i, only_there=True)  # fmt: skip


def _negative(name: str) -> Callable[[Mapping[str, Any], random.Random], dict[str, Any]]:
    return lambda a, rng: {name: rng.choice((0, -abs(a.get(name) or 1)))}


def _name_with(name: str) -> Callable[[Mapping[str, Any], random.Random], dict[str, Any]]:
    return lambda a, rng: {name: f"{a.get(name, 'x')}{rng.choice(':?*|')}"}


_INVALID: dict[str, Callable[[Mapping[str, Any], random.Random], dict[str, Any]]] = {
    "divide": lambda a, rng: {"b": 0},
    **{t: (lambda a, rng: {"numbers": []})
       for t in ("mean", "standard_deviation", "sum_values", "min_value", "max_value")},
    "square_root": lambda a, rng: {"number": -abs(float(a.get("number") or 1)) or -1.0},
    "percentage": lambda a, rng: {"whole": 0},
    "compute_exchange_rate": lambda a, rng: {"target_currency": rng.choice(("CHF", "SEK", "KRW"))},
    "book_flight": lambda a, rng: rng.choice((
        {"travel_date": str(a.get("travel_date", "")).replace("-", "/")},
        {"travel_class": rng.choice(("premium", "coach"))},
    )),
    "get_flight_cost": lambda a, rng: {"travel_class": rng.choice(("premium", "coach"))},
    "place_order": _negative("amount"),
    "fund_account": _negative("amount"),
    "withdraw_funds": _negative("amount"),
    "wc": lambda a, rng: {"mode": rng.choice(("x", "lines", "b"))},
    "cd": lambda a, rng: (
        {} if a.get("folder") in _SPECIAL_FOLDERS else {"folder": f"{a['folder']}/{a['folder']}"}
    ),
    "touch": _name_with("file_name"),
    "mkdir": _name_with("dir_name"),
}  # fmt: skip


def _with(scenario: Scenario, i: int, changed: Mapping[str, Any]) -> tuple[Call, ...]:
    calls = scenario.calls
    call = calls[i]
    return (*calls[:i], replace(call, arguments={**call.arguments, **changed}), *calls[i + 1 :])


def _owner(scenario: Scenario, tool: str) -> str | None:
    for name in scenario.classes:
        if callable(getattr(simulator_class(name), tool, None)) and not tool.startswith("_"):
            return name
    return None


_PER_CALL = (_drop, _undo, _swap, _past_limit, _unknown, _invalid)
