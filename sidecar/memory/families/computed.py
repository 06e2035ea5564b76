"""Computed quantities against amounts (``qty:{q}?{t}``, valued ``<``, ``=`` or ``>``):
sums over the fields of list items (``sum(a.g)``) and over the entries they name
(``sum(a->g)``), times a count (``*len(b)``), against numeric arguments, other
quantities and numeric fields of the objects the call names.  A failure message that
states one of the amounts points at the comparison.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sidecar.memory.families.base import Call, Family, Features, number
from sidecar.memory.predicate import Predicate
from sidecar.memory.trace import ObjectView
from sidecar.memory.values import FeatureValue, is_scalar, key_of

MAX_QUANTITY_COMPARISONS = 64
"""``qty:`` features per call, at most."""
EQUAL_TOLERANCE = 0.005
"""Two amounts within half a cent (or 0.5 per mille) are equal."""
ALIGN_TOLERANCE = 0.005
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?")

Quantity = tuple[str, str, float]
"""(the argument it comes from, its label, its value)."""


class Computed(Family):
    name: ClassVar[str] = "computed"
    rank: ClassVar[int] = 7
    prefixes: ClassVar[tuple[str, ...]] = ("qty",)

    def extract(self, call: Call, out: Features) -> None:
        computed, amounts = _computed(call), _amounts(call)
        call.amounts.update({label: v for _s, label, v in (*computed, *amounts)})
        made = 0
        targets = [*computed, *amounts]
        for source, label, q in computed:
            for other, tlabel, t in targets:
                if other == source or _is_count(label) != _is_count(tlabel):
                    continue  # a count is compared with counts, an amount with amounts
                if _is_computed(tlabel) and tlabel < label:
                    continue  # each pair of computed quantities once
                out[f"qty:{label}?{tlabel}"] = compare(q, t)
                made += 1
                if made >= MAX_QUANTITY_COMPARISONS:
                    return

    def describe(self, predicate: Predicate) -> str:
        left, _, right = predicate.rest.partition("?")
        if predicate.op == "not_in":
            return f"{left} compares with {right} in a way never seen to succeed"
        verb = {"<": "is below", "=": "equals", ">": "exceeds"}.get(str(predicate.value))
        return f"{left} {verb or f'is {predicate.value}'} {right}"

    def named(
        self, features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str,
        amounts: Mapping[str, float],
    ) -> list[str]:  # fmt: skip
        """The comparisons one of whose amounts the message states ("total is 250,
        paid 200"): the relation the message itself describes."""
        stated = [float(m.group(0).replace(",", "")) for m in _NUMBER.finditer(error)]
        if not amounts or not stated:
            return []
        aligned = {
            label
            for label, value in amounts.items()
            if any(abs(value - n) <= max(ALIGN_TOLERANCE, ALIGN_TOLERANCE * abs(n)) for n in stated)
        }
        out: list[str] = []
        for name in features:
            if name.startswith("qty:"):
                left, _, right = name[4:].partition("?")
                if left in aligned or right in aligned:
                    out.append(name)
        return out


def _computed(call: Call) -> list[Quantity]:
    computed: list[Quantity] = []
    lists = [n for n in call.names if call.is_list(n)]
    for name in lists:
        value = call.arguments[name]
        computed.append((name, f"len({name})", float(len(value))))
        items = [v for v in value if isinstance(v, Mapping)]
        if items and len(items) == len(value):
            sums: dict[str, float] = {}
            for item in items:
                for fld, raw in item.items():
                    n = number(raw)
                    if n is not None:
                        sums[fld] = sums.get(fld, 0.0) + n
            full = {f for f in sums if all(number(i.get(f)) is not None for i in items)}
            computed += [(name, f"sum({name}.{f})", sums[f]) for f in sorted(full)]
    for name, group in sorted({**call.element_views, **call.entries}.items()):
        for fld, total in sorted(_numeric_fields(group, call.arguments).items()):
            computed.append((name, f"sum({name}->{fld})", total))
    for source, label, total in list(computed):
        if "->" not in label:
            continue
        # a price per entry named, times a count: what a total is made of
        computed += [
            (source, f"{label}*len({b})", total * len(call.arguments[b]))
            for b in lists
            if b != source
        ]
    return computed


def _amounts(call: Call) -> list[Quantity]:
    amounts: list[Quantity] = []
    for name in call.names:
        n = number(call.arguments[name])
        if n is not None:
            amounts.append((name, name, n))
    for name, view in sorted(call.views.items()):
        for fld, raw in sorted(view.scalars.items()):
            n = number(raw)
            if n is not None:
                amounts.append((name, f"{name}.{fld}", n))
    return amounts


def _numeric_fields(views: Sequence[ObjectView], arguments: Mapping[str, Any]) -> dict[str, float]:
    """Per numeric field (and map field read through a key argument) of ``views``, the
    sum over them, for the fields every view has."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    keys = {n: key_of(v) for n, v in arguments.items() if is_scalar(v) and key_of(v)}
    for view in views:
        for fld, raw in view.scalars.items():
            n = number(raw)
            if n is not None:
                totals[fld] = totals.get(fld, 0.0) + n
                counts[fld] = counts.get(fld, 0) + 1
        for fld, table in view.maps.items():
            for arg, key in keys.items():
                n = number(table.get(key)) if key is not None else None
                if n is not None:
                    label = f"{fld}[{arg}]"
                    totals[label] = totals.get(label, 0.0) + n
                    counts[label] = counts.get(label, 0) + 1
    return {f: t for f, t in totals.items() if counts[f] == len(views)}


def _is_count(label: str) -> bool:
    return label.startswith("len(")


def _is_computed(label: str) -> bool:
    return label.startswith(("sum(", "len("))


def compare(a: float, b: float) -> str:
    if abs(a - b) <= max(EQUAL_TOLERANCE, EQUAL_TOLERANCE * max(abs(a), abs(b)) / 10):
        return "="
    return "<" if a < b else ">"


FAMILY = Computed()
