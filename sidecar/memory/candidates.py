"""From a group's failing calls to candidate predicates, with their evidence.

A failing call is kept as a :class:`FailureRecord`: its features (derived, never the
raw outputs), the remembered values its error text names, and for features read per
element of a list argument, the element each value comes from.

The evidence of a predicate is the set of failing calls it holds for, each seen as
(session, anchor, tick).  The *anchor* says what makes two failures independent
evidence (:func:`anchor`), and the support is the number of distinct sessions,
counting sessions that show the same anchor once: two sessions refunding the same
unpaid invoice are one piece of evidence that unpaid invoices cannot be refunded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.memory.conditions import Predicate, token
from sidecar.memory.features import FAMILIES, FeatureValue, family_of
from sidecar.memory.stats import ToolStats, is_number
from sidecar.memory.values import canonical, is_id_like, key_of


@dataclass
class FailureRecord:
    session: str
    tick: int
    features: dict[str, FeatureValue]
    named: list[str] = field(default_factory=list)
    """``feature\\x1ftoken`` of the remembered values the error text names."""
    anchors: dict[str, list[str]] = field(default_factory=dict)
    """For a feature read per element of a list argument: the element of each value."""


def named_values(
    features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str
) -> list[str]:
    """The remembered-value features whose value the error text names ("Item 55501 is
    out of stock"): the failure is about that value, not merely with it."""
    out: list[str] = []
    for name, raw in arguments.items():
        items = raw if isinstance(raw, list | tuple) else [raw]
        ids = [v for v in items if is_id_like(v)]
        hits = [v for v in ids if (key_of(v) or "") in error]
        out += [f"elem:{name}\x1f{token(canonical(v))}" for v in hits]
        if ids and len(hits) == len(ids) and f"value:{name}" in features:
            out.append(f"value:{name}\x1f{token(features[f'value:{name}'])}")
    return out


def anchor(record: FailureRecord, feature: str, index: int) -> str:
    """What makes two failures independent evidence for a predicate on ``feature``: a
    remembered value is evidence per session; a feature of one argument, per distinct
    value (or list element) of that argument; a feature of several, per argument set."""
    prefix, _, rest = feature.partition(":")
    if prefix in ("value", "elem"):
        return record.session
    listed = record.anchors.get(feature)
    if listed is not None and index < len(listed):
        return listed[index]
    if prefix in ("grounded", "shape", "bound", "obj", "len"):
        own = record.features.get(f"value:{rest.split('.', 1)[0]}")
        if own is not None:
            return token(own)
    return token(record.features.get("value:*"))


@dataclass
class Evidence:
    """The failing calls one value (or one predicate) was seen in."""

    value: Any
    events: list[tuple[str, str, int]] = field(default_factory=list)
    """(session, anchor, tick) per failing call."""

    def after(self, tick: int) -> Evidence | None:
        events = [e for e in self.events if e[2] > tick]
        return Evidence(self.value, events) if events else None

    @property
    def sessions(self) -> set[str]:
        return {e[0] for e in self.events}

    @property
    def last_tick(self) -> int:
        return max(e[2] for e in self.events)

    def support(self) -> int:
        return min(len(self.sessions), len({e[1] for e in self.events}))


def observe(
    records: Iterable[FailureRecord], limit: int, per_object: bool = True
) -> list[tuple[str, Evidence]]:
    """Each (feature, value) the failing calls showed, with its evidence: the ``limit``
    best supported, chosen before any success is looked at (so that no success can
    promote a condition past the cut).  Without ``per_object`` every session is its own
    anchor."""
    seen: dict[tuple[str, str], Evidence] = {}
    for record in records:
        for name, value in record.features.items():
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                found = seen.get((name, token(item)))
                if found is None:
                    found = seen[(name, token(item))] = Evidence(item)
                mark = anchor(record, name, i) if per_object else record.session
                found.events.append((record.session, mark, record.tick))
    ranked = sorted(seen, key=lambda k: (-seen[k].support(), FAMILIES.index(family_of(k[0])), k))
    return [(k[0], seen[k]) for k in ranked[:limit]]


@dataclass(frozen=True)
class Rules:
    max_categorical: int
    max_not_in: int


def candidates(
    name: str,
    item: Any,
    stats: ToolStats,
    cardinality: Mapping[str, set[str]],
    rules: Rules,
) -> Iterable[Predicate]:
    """The predicates that one value of a failing call's feature satisfies:

    - a remembered value (``value:``, ``elem:``): ``== value``;
    - a boolean or null: ``== value`` (only ``False`` for ``grounded:`` and ``bound:``:
      a grounded, bound value explains nothing);
    - a shape: ``not_in`` the shapes seen succeeding;
    - a number: ``>`` the largest / ``<`` the smallest seen succeeding; an integer of a
      categorical feature also ``==`` and ``not_in``;
    - a string of a categorical feature: ``== value`` and ``not_in`` the values seen
      succeeding.  An object field is categorical while it has shown at most
      ``max_categorical`` values; beyond that it is an identifier or a name.
    """
    family = family_of(name)
    if family == "bad_value":
        yield Predicate(name, "==", item)
        return
    if isinstance(item, bool) or item is None:
        if not (name.startswith(("grounded:", "bound:")) and item is not False):
            yield Predicate(name, "==", item)
        return
    if family == "value_shape":
        yield from _novel(name, item, stats, rules)
        return
    categorical = not name.startswith("obj:") or (
        len(cardinality.get(name, ())) <= rules.max_categorical
    )
    if is_number(item):
        low, high = stats.extremes.get(name, (None, None))
        if high is not None and item > high:
            yield Predicate(name, ">", high)
        if low is not None and item < low:
            yield Predicate(name, "<", low)
        if not isinstance(item, int) or not categorical:
            return  # a measured quantity: thresholds only
    elif not categorical:
        return
    yield Predicate(name, "==", item)
    yield from _novel(name, item, stats, rules)


def _novel(name: str, item: Any, stats: ToolStats, rules: Rules) -> Iterable[Predicate]:
    succeeded = stats.succeeded(name)
    if not succeeded or len(succeeded) > rules.max_not_in:
        return
    if token(item) not in stats.values.get(name, {}):
        yield Predicate(name, "not_in", tuple(sorted(succeeded, key=token)))
