"""A predicate over one call feature: the test a failure condition applies.

``op`` is ``==``, ``not_in`` (the value is a list), ``>`` or ``<``; a list-valued feature
satisfies the predicate when one of its values does.  Which features exist, and what a
predicate on each means, is the business of the condition families
(:mod:`sidecar.memory.families`); this module knows only values and operators.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, cast

from sidecar.memory.values import FeatureValue

Op = Literal["==", "not_in", ">", "<"]
OPS: tuple[Op, ...] = ("==", "not_in", ">", "<")


def token(value: Any) -> str:
    """The comparison key of a scalar: its JSON text (``"1"`` and ``1`` differ)."""
    kind = type(value)
    if kind in _SCALARS:
        # keyed by exact type: 1, 1.0 and True are equal keys of a cache, not one token
        return _scalar_token(kind.__name__, value)
    return _dumps(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_SCALARS = frozenset({str, int, float, bool, type(None)})


@lru_cache(maxsize=1 << 16)
def _scalar_token(kind: str, value: Any) -> str:
    """Learning and checking ask for the tokens of the same few values again and again
    (a tool's statuses, ids seen in many sessions): each is dumped once."""
    del kind  # part of the cache's key only
    return _dumps(value)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Predicate:
    feature: str
    op: Op
    value: Any
    """A scalar; a list of scalars for ``not_in``."""
    _keys: frozenset[str] = field(default=frozenset(), compare=False, repr=False, hash=False)
    _key: str = field(default="", compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, got {self.op!r}")
        if self.op == "==":
            object.__setattr__(self, "_key", token(self.value))
        if self.op == "not_in":
            if not isinstance(self.value, list | tuple):
                raise ValueError("not_in needs a list of values")
            object.__setattr__(self, "value", tuple(self.value))  # hashable, like the rest
            object.__setattr__(self, "_keys", frozenset(token(v) for v in self.value))
        elif self.op in (">", "<") and not is_number(self.value):
            raise ValueError(f"{self.op} needs a number, got {self.value!r}")

    @property
    def prefix(self) -> str:
        """The feature's kind: ``obj`` of ``obj:order_id.status``."""
        return self.feature.split(":", 1)[0]

    @property
    def rest(self) -> str:
        """The feature without its kind: ``order_id.status``."""
        return self.feature.partition(":")[2]

    def holds(self, value: FeatureValue) -> bool:
        if isinstance(value, list):
            return any(self._holds(v) for v in value)
        return self._holds(value)

    def holds_tokens(self, value: FeatureValue, keys: Sequence[str]) -> bool:
        """:meth:`holds`, given the tokens of ``value``'s items (computed once per call
        for every condition that reads the feature)."""
        if self.op == "==":
            return self._key in keys
        if self.op == "not_in":
            return any(k not in self._keys for k in keys)
        return self.holds(value)

    def _holds(self, value: Any) -> bool:
        if self.op == "==":
            return token(value) == self._key
        if self.op == "not_in":
            return token(value) not in self._keys
        if not is_number(value):
            return False
        return bool(value > self.value if self.op == ">" else value < self.value)

    def to_dict(self) -> dict[str, Any]:
        value = list(self.value) if self.op == "not_in" else self.value
        return {"feature": self.feature, "op": self.op, "value": value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Predicate:
        feature, op = data.get("feature"), data.get("op")
        if not isinstance(feature, str) or ":" not in feature:
            raise ValueError("a predicate needs a feature name such as 'obj:invoice_id.state'")
        value = data.get("value")
        if op == "not_in" and isinstance(value, list):
            value = tuple(value)
        return cls(feature, cast(Op, op), value)
