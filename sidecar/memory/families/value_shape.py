"""Shapes: the character-class shape of an id-like argument (``shape:{a}``, per element
of a list), never seen to succeed: ``#A9{7}`` where every success had ``#9{7}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from sidecar.memory.families.base import Call, Family, Features, Rules, novel, quality
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
            shapes: list[Scalar] = [shape(k) for k in keys]
            if call.is_list(name):
                out[f"shape:{name}"] = shapes
                call.anchors[f"shape:{name}"] = keys
            else:
                out[f"shape:{name}"] = shapes[0]

    def candidates(
        self,
        name: str,
        item: Any,
        stats: ToolStats,
        cardinality: Mapping[str, set[str]],
        rules: Rules,
    ) -> Iterable[Predicate]:
        if isinstance(item, bool) or item is None:
            yield Predicate(name, "==", item)
            return
        yield from novel(name, item, stats, rules)

    def describe(self, predicate: Predicate) -> str:
        return quality(f"{predicate.rest} has", "a shape", predicate)


FAMILY = ValueShape()
