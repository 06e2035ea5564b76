"""Per-item quantities for the numbers a refusal states: an item of a list argument
against the entry it names ("gift card balance is not enough: balance 527, required
674", where 674 is what one payment item asks of the card it names and 527 that card's
balance).

A sum over the items would mix the card's part with the others'.  For each numeric
field ``f`` of the items and each numeric field ``g`` of the entries they name, the
item whose ``f`` exceeds its entry's ``g`` the most (``f - g`` largest, the first on a
tie) gives two expressions: ``worst(a:f-g).f`` and ``worst(a:f-g)->g``.  A relation
between them ("the balance is below what is asked") then says that some item asks more
of its entry than the entry holds, and it does not hold when every item fits.
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.memory.families.base import Call, number
from sidecar.memory.values import is_id_like, key_of

MAX_PAIRS = 8
"""(item field, entry field) pairs read per list argument, at most."""

Quantity = tuple[str, str, float]
"""(the argument it comes from, its label, its value)."""


def item_gaps(call: Call) -> list[Quantity]:
    """The two expressions of the worst item, per list argument and pair of fields."""
    out: list[Quantity] = []
    for name in call.names:
        items = _linked(call, name) if call.is_list(name) else []
        if not items:
            continue
        pairs = 0
        for f in _numeric_fields([item for item, _s in items]):
            for g in _numeric_fields([dict(scalars) for _i, scalars in items], every=False):
                if pairs >= MAX_PAIRS:
                    break
                pairs += 1
                out += _worst(name, f, g, items)
    return out


def _linked(call: Call, name: str) -> list[tuple[Mapping[str, object], Mapping[str, object]]]:
    """The items of a list argument with the scalars of the object each names: the
    entry it describes, else the object one of its ids is the identity of (a payment
    item's ``payment_id`` names a card)."""
    out: list[tuple[Mapping[str, object], Mapping[str, object]]] = []
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
            out.append((item, view.scalars))
    return out


def _numeric_fields(objects: list[Mapping[str, object]], every: bool = True) -> list[str]:
    """Fields holding a number in every object (``every``) or in some."""
    sets = [{k for k, v in o.items() if number(v) is not None} for o in objects]
    if not sets:
        return []
    found = set.intersection(*sets) if every else set.union(*sets)
    return sorted(found)


def _worst(
    name: str, f: str, g: str, items: list[tuple[Mapping[str, object], Mapping[str, object]]]
) -> list[Quantity]:
    best: tuple[float, float] | None = None
    for item, scalars in items:
        asked, held = number(item.get(f)), number(scalars.get(g))
        if asked is None or held is None:
            continue  # an entry without the field (a card with no balance) asks nothing of it
        if best is None or asked - held > best[0] - best[1]:
            best = (asked, held)
    if best is None:
        return []
    label = f"worst({name}:{f}-{g})"
    return [(name, f"{label}.{f}", best[0]), (name, f"{label}->{g}", best[1])]
