"""Remembered values: the argument set, one argument, or one element of a list argument
that failed before (``value:*``, ``value:{a}``, ``elem:{a}``).

A remembered value is the cause only when it is the whole call or the failure message
names it; otherwise it warns at most.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from sidecar.memory.families.base import (
    Call,
    Family,
    Features,
    Variation,
    all_named,
    ids_named,
    short,
)
from sidecar.memory.predicate import Predicate, token
from sidecar.memory.stats import ToolStats
from sidecar.memory.trace import Trace
from sidecar.memory.values import FeatureValue, canonical, is_id_like, is_scalar, key_of


class BadValue(Family):
    name: ClassVar[str] = "bad_value"
    rank: ClassVar[int] = 0
    prefixes: ClassVar[tuple[str, ...]] = ("value", "elem")
    remembered_values: ClassVar[bool] = True
    context_free: ClassVar[bool] = True

    def extract(self, call: Call, out: Features) -> None:
        out["value:*"] = canonical(dict(call.arguments))
        for name in call.names:
            value = call.arguments[name]
            if len(call.names) > 1:
                out[f"value:{name}"] = canonical(value)
            if call.is_list(name):
                out[f"elem:{name}"] = [canonical(v) for v in value if is_scalar(v)]

    def candidates(
        self,
        name: str,
        item: Any,
        stats: ToolStats,
        cardinality: Mapping[str, set[str]],
        rules: Variation,
    ) -> Iterable[Predicate]:
        yield Predicate(name, "==", item)

    def describe(self, predicate: Predicate) -> str:
        rest, value = predicate.rest, predicate.value
        if predicate.prefix == "elem":
            return f"{rest} includes {short(value)}"
        if rest == "*":
            return f"its arguments are {short(value, 100)}"
        return f"{rest} is {short(value)}"

    def warn_only(self, predicate: Predicate, stats: ToolStats, named: set[str]) -> bool:
        if stats.seen_succeeding(predicate.feature, predicate.value) is None:
            return True  # whether it ever succeeded is not known
        # a value is the cause only when it is the whole call or the error names it
        tagged = f"{predicate.feature}\x1f{token(predicate.value)}"
        return predicate.feature != "value:*" and tagged not in named

    def named(
        self, features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str,
        amounts: Mapping[str, float],
    ) -> list[str]:  # fmt: skip
        out: list[str] = []
        for name, raw in arguments.items():
            _ids, hits = ids_named(raw, error)
            out += [f"elem:{name}\x1f{token(canonical(v))}" for v in hits]
            if all_named(raw, error) and f"value:{name}" in features:
                out.append(f"value:{name}\x1f{token(features[f'value:{name}'])}")
        return out

    def session_evidence(self, predicate: Predicate, trace: Trace, task_input: str | None) -> str:
        if predicate.op != "==":
            return ""
        keys = _id_keys(predicate.value, whole=predicate.rest == "*")
        if keys and all(trace.seen(k, task_input) for k in keys):
            return f"the session holds {', '.join(keys[:3])}"
        return ""


def _id_keys(value: Any, whole: bool) -> list[str]:
    """The id-like values a remembered value needs the session to hold (every one of
    them, for a whole argument set)."""
    if whole and isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return []
        items: list[Any] = []
        stack = [parsed]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif is_id_like(item):
                items.append(item)
        return [k for k in (key_of(v) for v in items) if k]
    key = key_of(value)
    return [key] if key and is_id_like(value) else []


FAMILY = BadValue()
