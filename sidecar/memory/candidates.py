"""From a group's failing calls to candidate predicates, with the calls they hold for.

A failing call is kept as a :class:`FailureRecord`: its features (derived, never the
raw outputs), the features its error text points at, the objects it acts on and its
task text (what makes two failing calls one situation), and its source.

The candidates of a group are generated from the values its failing calls showed
(:func:`observe`, :func:`candidates`) and from what every success of the tool had
that a failing call lacks (:func:`prerequisites`).  Each candidate is a test; the
learner counts them all, because the more candidates are tried, the likelier one of
them separates the failures from the successes by chance (:mod:`sidecar.memory.chance`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.memory.conditions import Predicate, token
from sidecar.memory.features import FAMILIES, FeatureValue, family_of
from sidecar.memory.stats import ToolStats, is_number
from sidecar.memory.values import canonical, is_id_like, key_of

PREREQUISITE_SHARE = 0.8
"""A tool is a prerequisite candidate when at least this share of the successes had it
succeed before them."""
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?")
ALIGN_TOLERANCE = 0.005


@dataclass
class FailureRecord:
    session: str
    position: int
    """The step's index in its session (with the session, the call's identity)."""
    features: dict[str, FeatureValue]
    named: list[str] = field(default_factory=list)
    """Features the error text points at: ``feature\\x1ftoken`` of remembered values it
    names, and ``qty:`` features whose amounts it states."""
    anchors: dict[str, list[str]] = field(default_factory=dict)
    marks: list[str] = field(default_factory=list)
    """The objects the call acts on (grounded id-like argument values)."""
    text: list[int] | None = None
    """MinHash of the task text (:func:`sidecar.memory.independence.minhash`)."""
    source: str = "local"

    @property
    def identity(self) -> str:
        return f"{self.session}\x1f{self.position}"


def named_values(
    features: Mapping[str, FeatureValue],
    arguments: Mapping[str, Any],
    error: str,
    amounts: Mapping[str, float] | None = None,
) -> list[str]:
    """The features the error text points at:

    - remembered-value features whose value it names ("Item 55501 is out of stock"):
      the failure is about that value, not merely with it;
    - ``qty:`` comparisons one of whose amounts the message states ("total is 250,
      paid 200"): the relation the message itself describes."""
    out: list[str] = []
    for name, raw in arguments.items():
        items = raw if isinstance(raw, list | tuple) else [raw]
        ids = [v for v in items if is_id_like(v)]
        hits = [v for v in ids if (key_of(v) or "") in error]
        out += [f"elem:{name}\x1f{token(canonical(v))}" for v in hits]
        if ids and len(hits) == len(ids):
            # the message names the very values: what they name is the matter
            out += [f"grounded:{name}", f"bound:{name}"]
            if f"value:{name}" in features:
                out.append(f"value:{name}\x1f{token(features[f'value:{name}'])}")
    stated = [float(m.group(0).replace(",", "")) for m in _NUMBER.finditer(error)]
    if amounts and stated:
        aligned = {
            label
            for label, value in amounts.items()
            if any(abs(value - n) <= max(ALIGN_TOLERANCE, ALIGN_TOLERANCE * abs(n)) for n in stated)
        }
        for name in features:
            if name.startswith("qty:"):
                left, _, right = name[4:].partition("?")
                if left in aligned or right in aligned:
                    out.append(name)
    return out


def observe(records: list[FailureRecord], limit: int) -> list[tuple[str, Any, list[int]]]:
    """Each (feature, value) the failing calls showed, with the calls that showed it:
    the ``limit`` shown by most calls, chosen before any success is looked at (so that
    no success can promote a candidate past the cut)."""
    seen: dict[tuple[str, str], tuple[Any, list[int]]] = {}
    for i, record in enumerate(records):
        for name, value in record.features.items():
            if name == "prior":
                continue
            for item in value if isinstance(value, list) else [value]:
                key = (name, token(item))
                found = seen.get(key)
                if found is None:
                    seen[key] = (item, [i])
                elif found[1][-1] != i:
                    found[1].append(i)
    ranked = sorted(seen, key=lambda k: (-len(seen[k][1]), FAMILIES.index(family_of(k[0])), k))
    return [(k[0], seen[k][0], seen[k][1]) for k in ranked[:limit]]


@dataclass(frozen=True)
class Rules:
    max_categorical: int
    max_not_in: int


CATEGORICAL_PREFIXES = ("obj:", "entry:")
"""Features read from objects: categorical (a state) only while they show few values."""


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
      succeeding.  A field of an object or entry is categorical while it has shown at
      most ``max_categorical`` values; beyond that it is an identifier or a name.
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
    categorical = not name.startswith(CATEGORICAL_PREFIXES) or (
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
    if not succeeded or len(succeeded) > rules.max_not_in or not stats.complete(name):
        return
    if token(item) not in stats.values.get(name, {}):
        yield Predicate(name, "not_in", tuple(sorted(succeeded, key=token)))


def prerequisites(records: list[FailureRecord], stats: ToolStats) -> list[tuple[str, list[int]]]:
    """``prior:T == False`` candidates: a tool ``T`` that had succeeded before (nearly)
    every success of this tool, with the failing calls in whose session it had not."""
    if not stats.units:
        return []
    out: list[tuple[str, list[int]]] = []
    for tool in sorted(stats.prior):
        if stats.with_prior(tool)[0] < PREREQUISITE_SHARE * stats.units:
            continue
        lacking = [
            i for i, r in enumerate(records) if tool not in _as_list(r.features.get("prior"))
        ]
        if lacking:
            out.append((f"prior:{tool}", lacking))
    return out


def undoing(records: list[FailureRecord]) -> list[tuple[str, list[int]]]:
    """``prior:T == True`` candidates: a tool ``T`` that had succeeded before failing
    calls (a logout, a mode switch back): what undid the state the call needs."""
    out: list[tuple[str, list[int]]] = []
    tools = sorted({t for r in records for t in _as_list(r.features.get("prior"))})
    for tool in tools:
        preceded = [i for i, r in enumerate(records) if tool in _as_list(r.features.get("prior"))]
        out.append((f"prior:{tool}", preceded))
    return out


_GENERIC = frozenset({"get", "set", "list", "update", "show", "view", "find", "the", "info"})
_NAME_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def names_tool(signature: str, tool: str) -> bool:
    """Whether a failure message speaks of ``tool``: a word of its name (``login`` of
    ``trading_login``, ``authenticate`` of ``authenticate_travel``), or its stem, in the
    message read without spaces ("please log in" holds ``login``)."""
    text = re.sub(r"[^a-z0-9]", "", signature.lower())
    for part in _NAME_PART.findall(tool):
        word = part.lower()
        if len(word) < 4 or word in _GENERIC:
            continue
        if word in text or (len(word) >= 6 and word[:-2] in text):
            return True
    return False


ABSENCE = ("grounded:", "bound:", "prior:")
"""Features that say something is missing from the session: a value it never showed,
an object it never fetched, a call it never made."""


def absent(predicate: Predicate) -> bool:
    """Whether a predicate says something is missing from the session (the agent may
    know it from elsewhere: such a condition blocks only when the failure message
    speaks of what is missing)."""
    return predicate.feature.startswith(ABSENCE) and predicate.value is False


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
