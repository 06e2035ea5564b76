"""What a tool's succeeding calls leave behind: per feature, the values seen succeeding
and counts that only ever grow.

A success is never stored as such; it updates, for each of its features:

- the table of values seen succeeding (calls, last tick), bounded: a new value that
  arrives when the table is full is not recorded, unless it has failed before (so that
  "failed and not succeeded since" stays exact for every remembered value);
- ``novel``: how many successes came with a value not yet in the table while the table
  held some (what a "never seen to succeed" predicate would have wrongly matched);
- ``extremes`` and ``beyond``: the smallest and largest numbers, and how many successes
  went below / above the ones before them;
- ``since``: when the feature first succeeded (a failure before that cannot show that a
  value was never seen to succeed: nothing had been).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.memory.conditions import Predicate, token
from sidecar.memory.features import FeatureValue, family_of


def items_of(value: FeatureValue) -> list[Any]:
    return value if isinstance(value, list) else [value]


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass
class ToolStats:
    successes: int = 0
    values: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    """feature -> token -> [calls, last tick]"""
    failed: set[str] = field(default_factory=set)
    """``feature\\x1ftoken`` of remembered values that have failed."""
    novel: dict[str, int] = field(default_factory=dict)
    extremes: dict[str, list[float]] = field(default_factory=dict)
    beyond: dict[str, list[int]] = field(default_factory=dict)
    """feature -> [successes below the smallest before them, above the largest]"""
    since: dict[str, int] = field(default_factory=dict)
    _decoded: dict[str, list[Any]] = field(default_factory=dict, repr=False, compare=False)

    def record_success(
        self, features: Mapping[str, FeatureValue], tick: int, cap: int, bad_value_cap: int
    ) -> None:
        self.successes += 1
        self._decoded.clear()
        for name, value in features.items():
            bad_value = family_of(name) == "bad_value"
            table = self.values.setdefault(name, {})
            items = items_of(value)
            keys = {token(v) for v in items}
            self.since.setdefault(name, tick)
            if not bad_value:
                if table and any(k not in table for k in keys):
                    self.novel[name] = self.novel.get(name, 0) + 1
                self._extremes(name, items)
            limit = bad_value_cap if bad_value else cap
            for key in keys:
                entry = table.get(key)
                if entry is None:
                    if len(table) >= limit and f"{name}\x1f{key}" not in self.failed:
                        continue
                    entry = table[key] = [0, 0]
                entry[0] += 1
                entry[1] = tick

    def record_failure(self, features: Mapping[str, FeatureValue]) -> None:
        for name, value in features.items():
            if family_of(name) == "bad_value":
                self.failed.update(f"{name}\x1f{token(v)}" for v in items_of(value))

    def _extremes(self, name: str, items: list[Any]) -> None:
        numbers = [float(v) for v in items if is_number(v)]
        if not numbers:
            return
        low, high = min(numbers), max(numbers)
        bounds = self.extremes.get(name)
        if bounds is None:
            self.extremes[name] = [low, high]
            return
        counts = self.beyond.setdefault(name, [0, 0])
        if low < bounds[0]:
            counts[0] += 1
            bounds[0] = low
        if high > bounds[1]:
            counts[1] += 1
            bounds[1] = high

    # ---- queries --------------------------------------------------------------------
    def succeeded(self, feature: str) -> list[Any]:
        """The values of ``feature`` seen succeeding (decoded once per change)."""
        found = self._decoded.get(feature)
        if found is None:
            found = [json.loads(k) for k in self.values.get(feature, {})]
            self._decoded[feature] = found
        return found

    def succeeded_after(self, feature: str, value: Any, tick: int) -> bool:
        entry = self.values.get(feature, {}).get(token(value))
        return entry is not None and entry[1] > tick

    def contradictions(self, predicate: Predicate) -> int:
        """Succeeding calls the predicate matches.  A novelty predicate ("never seen to
        succeed") or a threshold ("beyond anything seen to succeed") is built from the
        successes and matches none of them by construction; it is counted prequentially
        instead: each success against the successes before it, i.e. how often the
        predicate, had it been in force, would have stopped a call that then succeeded."""
        if predicate.op == "==":
            entry = self.values.get(predicate.feature, {}).get(token(predicate.value))
            return entry[0] if entry else 0
        if predicate.op == "not_in":
            return self.novel.get(predicate.feature, 0)
        below, above = self.beyond.get(predicate.feature, (0, 0))
        return above if predicate.op == ">" else below

    # ---- persistence ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "successes": self.successes,
            "values": self.values,
            "failed": sorted(self.failed),
            "novel": self.novel,
            "extremes": self.extremes,
            "beyond": self.beyond,
            "since": self.since,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolStats:
        return cls(
            successes=int(data["successes"]),
            values={k: dict(v) for k, v in data["values"].items()},
            failed=set(data["failed"]),
            novel=dict(data["novel"]),
            extremes={k: list(v) for k, v in data["extremes"].items()},
            beyond={k: list(v) for k, v in data["beyond"].items()},
            since=dict(data["since"]),
        )
