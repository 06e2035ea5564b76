"""Numeric arguments as quantities (``arg:{a}``): an amount, a price, a count passed to
the tool, beyond anything seen to succeed (``amount < 1``: every success paid at least
one; ``insurance_cost > 500``).  Thresholds only: an exact number is a remembered value
(:mod:`~sidecar.memory.families.bad_value`), not a quantity's validity; and an argument
named as an identifier (``id``, ``order_id``) holds a name, not a quantity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from sidecar.memory.families.base import Call, Family, Features, Variation, number
from sidecar.memory.predicate import Predicate
from sidecar.memory.stats import ToolStats

PREFIX = "arg"


class Amount(Family):
    name: ClassVar[str] = "amount"
    rank: ClassVar[int] = 10
    prefixes: ClassVar[tuple[str, ...]] = (PREFIX,)
    context_free: ClassVar[bool] = True

    def extract(self, call: Call, out: Features) -> None:
        for name in call.names:
            value = number(call.arguments[name])
            if value is not None and not _identifier(name):
                out[f"{PREFIX}:{name}"] = value

    def candidates(
        self,
        name: str,
        item: Any,
        stats: ToolStats,
        cardinality: Mapping[str, set[str]],
        rules: Variation,
    ) -> Iterable[Predicate]:
        value = number(item)
        low, high = stats.extremes.get(name, (None, None))
        if value is None:
            return
        if high is not None and value > high:
            yield Predicate(name, ">", high)
        if low is not None and value < low:
            yield Predicate(name, "<", low)

    def describe(self, predicate: Predicate) -> str:
        more = "above" if predicate.op == ">" else "below"
        return (
            f"the argument {predicate.rest} is {more} {predicate.value!r}, "
            "beyond any seen to succeed"
        )


def _identifier(name: str) -> bool:
    low = name.lower()
    return low == "id" or low.endswith(("_id", "id", "_ids"))


FAMILY = Amount()
