"""Sizes and comparisons: the length of a list argument (``len:{a}``) or of a collection
field of the object an argument names (``len:{a}.{f}``); two list arguments of the same
length, sharing an element, or holding one value at one index (``same_len:``,
``overlap:``, ``same_at:``); a quantity exceeding a numeric field of another argument's
object (``cmp:{q}>{b}.{f}``: more items than the order holds).
"""

from __future__ import annotations

from itertools import combinations
from typing import ClassVar

from sidecar.memory.families.base import Call, Family, Features, number, quality
from sidecar.memory.predicate import Predicate
from sidecar.memory.values import canonical

MAX_COMPARISONS = 48
"""``cmp:`` features per call, at most (a cross product of quantities and fields)."""

_PAIRS = {
    "same_len": ("have the same length", "differ in length"),
    "overlap": ("share an element", "share no element"),
    "same_at": ("hold the same value at some position", "differ at every position"),
}


class Numeric(Family):
    name: ClassVar[str] = "numeric"
    rank: ClassVar[int] = 5
    prefixes: ClassVar[tuple[str, ...]] = ("len", "same_len", "overlap", "same_at", "cmp")

    def extract(self, call: Call, out: Features) -> None:
        for name in call.names:
            if call.is_list(name):
                out[f"len:{name}"] = len(call.arguments[name])
        for name, view in call.views.items():
            for fld, size in view.sizes.items():
                out[f"len:{name}.{fld}"] = size
        _list_pairs(call, out)
        _comparisons(call, out)

    def describe(self, predicate: Predicate) -> str:
        prefix, rest = predicate.prefix, predicate.rest
        if prefix == "len" and "." in rest:
            arg, _, fld = rest.partition(".")
            return quality(f"the object {arg} refers to has", f"a {fld} size", predicate)
        if prefix == "len":
            return quality(f"{rest} has", "a length", predicate)
        if prefix in _PAIRS:
            a, _, b = rest.partition("|")
            words = _PAIRS[prefix]
            return f"{a} and {b} {words[0] if predicate.value else words[1]}"
        quantity, _, target = rest.partition(">")
        arg, _, fld = target.partition(".")
        verb = "exceeds" if predicate.value else "does not exceed"
        return f"{quantity} {verb} the {fld} of the object {arg} refers to"


def _list_pairs(call: Call, out: Features) -> None:
    lists = [n for n in call.names if call.is_list(n)]
    for a, b in combinations(lists, 2):
        left = [canonical(v) for v in call.arguments[a]]
        right = [canonical(v) for v in call.arguments[b]]
        out[f"same_len:{a}|{b}"] = len(left) == len(right)
        out[f"overlap:{a}|{b}"] = bool(set(left) & set(right))
        out[f"same_at:{a}|{b}"] = any(x == y for x, y in zip(left, right, strict=False))


def _comparisons(call: Call, out: Features) -> None:
    if not call.views:
        return
    quantities: list[tuple[str, str, float]] = []  # (argument it comes from, name, value)
    for name in call.names:
        value = call.arguments[name]
        amount = number(value)
        if amount is not None:
            quantities.append((name, name, amount))
        elif isinstance(value, list | tuple):
            quantities.append((name, f"len({name})", float(len(value))))
    for name, elements in call.element_views.items():
        if len(elements) != len(call.arguments[name]):
            continue  # a sum over some elements only would mislead
        numeric: dict[str, float] = {}
        for view in elements:
            for fld, raw in view.scalars.items():
                amount = number(raw)
                if amount is not None:
                    numeric[fld] = numeric.get(fld, 0.0) + amount
        quantities += [(name, f"sum({name}.{f})", total) for f, total in numeric.items()]
    made = 0
    for source, label, quantity in quantities:
        for other, view in call.views.items():
            if other == source:
                continue
            for fld, raw in view.scalars.items():
                amount = number(raw)
                if amount is None:
                    continue
                out[f"cmp:{label}>{other}.{fld}"] = quantity > amount
                made += 1
                if made >= MAX_COMPARISONS:
                    return


FAMILY = Numeric()
