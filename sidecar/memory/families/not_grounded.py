"""Grounding: every id-like value of an argument occurs in an earlier output, argument
or the task input (``grounded:{a}``).  An ungrounded id is one the agent may have made
up; it is evidence only when the failure message speaks of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from sidecar.memory.families.base import Call, Family, Features, all_named
from sidecar.memory.predicate import Predicate
from sidecar.memory.values import FeatureValue


class NotGrounded(Family):
    name: ClassVar[str] = "not_grounded"
    rank: ClassVar[int] = 1
    prefixes: ClassVar[tuple[str, ...]] = ("grounded",)

    def extract(self, call: Call, out: Features) -> None:
        for name, keys in call.keys_of.items():
            out[f"grounded:{name}"] = len(call.seen[name]) == len(keys)

    def proposes_flag(self, name: str, value: bool | None) -> bool:
        return value is False  # a grounded value explains nothing

    def describe(self, predicate: Predicate) -> str:
        where = "earlier output, argument or the task input"
        return f"{predicate.rest} appears in {'an' if predicate.value else 'no'} {where}"

    def absent(self, predicate: Predicate) -> bool:
        return predicate.value is False

    def named(
        self, features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str,
        amounts: Mapping[str, float],
    ) -> list[str]:  # fmt: skip
        return [f"grounded:{n}" for n, raw in arguments.items() if all_named(raw, error)]


FAMILY = NotGrounded()
