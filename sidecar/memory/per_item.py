"""Per-item quantities for the numbers a refusal states: an item of a list argument
against the entry it names ("gift card balance is not enough: balance 527, required
674", where 674 is what one payment item asks of the card it names and 527 that card's
balance).

A sum over the items would mix the card's part with the others'.  For each quantity
``f`` an item asks (a numeric field of its own, or the length of another list argument:
the passengers a flight is asked seats for) and each quantity ``g`` the entry it names
holds (a numeric field, or a map field read through another argument that names one of
its keys: ``available_seats[cabin]``), the item whose ``f`` exceeds its entry's ``g``
the most (``f - g`` largest, the first on a tie) gives two expressions:
``worst(a:f-g).f`` and ``worst(a:f-g)->g``.  A relation
between them ("the balance is below what is asked") then says that some item asks more
of its entry than the entry holds, and it does not hold when every item fits.
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.memory.families.base import Call, number, scalar_keys
from sidecar.memory.families.computed import Quantity
from sidecar.memory.trace import ObjectView
from sidecar.memory.values import is_id_like, key_of

MAX_PAIRS = 8
"""(asked, held) pairs read per list argument, at most."""


def item_gaps(call: Call) -> list[Quantity]:
    """The two expressions of the worst item, per list argument and pair of fields."""
    keys = scalar_keys(call.arguments)
    counts = {n: float(len(call.arguments[n])) for n in call.names if call.is_list(n)}
    out: list[Quantity] = []
    for name in call.names:
        items = _linked(call, name) if call.is_list(name) else []
        if not items:
            continue
        others = {f"len({n})": v for n, v in counts.items() if n != name}
        rows = [(_asked(item, others), _held(view, keys, name)) for item, view in items]
        asked = sorted(set.intersection(*(set(a) for a, _h in rows)))
        held = sorted(set().union(*(set(h) for _a, h in rows)))
        pairs = [(f, g) for f in asked for g in held][:MAX_PAIRS]
        for f, g in pairs:
            out += _worst(name, f, g, rows)
    return out


def _asked(item: Mapping[str, object], counts: Mapping[str, float]) -> dict[str, float]:
    """What an item may ask of its entry: its numeric fields, and the length of another
    list argument (the passengers a flight is asked seats for)."""
    own = {f: n for f, v in item.items() if (n := number(v)) is not None}
    return {**own, **counts}


def _held(view: ObjectView, keys: Mapping[str, str], own: str) -> dict[str, float]:
    """What the entry holds: its numeric fields, and a map field read through another
    argument that names one of its keys (``available_seats[cabin]``)."""
    out = {f: n for f, v in view.scalars.items() if (n := number(v)) is not None}
    for fld, table in view.maps.items():
        for arg, key in keys.items():
            if arg != own and (n := number(table.get(key))) is not None:
                out[f"{fld}[{arg}]"] = n
    return out


def _linked(call: Call, name: str) -> list[tuple[Mapping[str, object], ObjectView]]:
    """The items of a list argument with the scalars of the object each names: the
    entry it describes, else the object one of its ids is the identity of (a payment
    item's ``payment_id`` names a card)."""
    out: list[tuple[Mapping[str, object], ObjectView]] = []
    described = {id(item): view for item, view in call.entry_found.get(name, ())}
    for item in call.items(name):
        if not isinstance(item, Mapping):
            continue
        view = described.get(id(item))
        if view is None:
            for field, value in sorted(item.items()):
                key = key_of(value) if is_id_like(value) else None
                obj = call.trace.binding(key, field) if key else None
                if obj is not None:
                    view = call.trace.view(obj)
                    break
        if view is not None:
            out.append((item, view))
    return out


def _worst(
    name: str, f: str, g: str, rows: list[tuple[dict[str, float], dict[str, float]]]
) -> list[Quantity]:
    best: tuple[float, float] | None = None
    for asks, holds in rows:
        asked, held = asks.get(f), holds.get(g)
        if asked is None or held is None:
            continue  # an entry without the field (a card with no balance) asks nothing of it
        if best is None or asked - held > best[0] - best[1]:
            best = (asked, held)
    if best is None:
        return []
    label = f"worst({name}:{f}-{g})"
    return [(name, f"{label}.{f}", best[0]), (name, f"{label}->{g}", best[1])]
