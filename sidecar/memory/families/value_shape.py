"""Shapes: the character-class shape of an id-like argument (``shape:{a}``, per element
of a list), never seen to succeed: ``#A9{7}`` where every success had ``#9{7}``.

A value an earlier output gave as an object's identity (a token a login returned, an
order id a listing showed) has no shape read: the system made it, not the agent, and
its shape says nothing about whether the call may succeed (random tokens vary in shape
from one login to the next).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from sidecar.memory.families.base import Call, Family, Features, Variation, novel, quality
from sidecar.memory.predicate import Predicate
from sidecar.memory.stats import ToolStats
from sidecar.memory.values import Scalar, shape


class ValueShape(Family):
    name: ClassVar[str] = "value_shape"
    rank: ClassVar[int] = 2
    prefixes: ClassVar[tuple[str, ...]] = ("shape",)
    context_free: ClassVar[bool] = True

    def extract(self, call: Call, out: Features) -> None:
        for name, keys in call.keys_of.items():
            bound = call.bound.get(name) or [None] * len(keys)
            made = [k for k, obj in zip(keys, bound, strict=True) if obj is None]
            if not made:
                continue
            shapes: list[Scalar] = [shape(k) for k in made]
            if call.is_list(name):
                out[f"shape:{name}"] = shapes
                call.anchors[f"shape:{name}"] = made
            else:
                out[f"shape:{name}"] = shapes[0]

    def candidates(
        self,
        name: str,
        item: Any,
        stats: ToolStats,
        cardinality: Mapping[str, set[str]],
        rules: Variation,
    ) -> Iterable[Predicate]:
        if isinstance(item, bool) or item is None:
            yield Predicate(name, "==", item)
            return
        yield from novel(name, item, stats, rules)

    def describe(self, predicate: Predicate) -> str:
        return quality(f"{predicate.rest} has", "a shape", predicate)


FAMILY = ValueShape()
