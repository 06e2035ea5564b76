"""From a group's failing calls to candidate predicates, with the calls they hold for.

A failing call is kept as a :class:`FailureRecord`: its features (derived, never the
raw outputs), the features its error text points at, the objects it acts on and its
task text (what makes two failing calls one situation), and its source.

The candidates of a group are generated from the values its failing calls showed
(:func:`observe`, then each value's family proposes predicates) and from what the
group shows as a whole (a family's ``group_candidates``: the prerequisites every
success had that a failing call lacks).  Each candidate is a test; the learner counts
them all, because the more candidates are tried, the likelier one of them separates the
failures from the successes by chance (:mod:`sidecar.memory.chance`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.memory.families import Variation, families, family_for
from sidecar.memory.families.base import Candidate, Failing
from sidecar.memory.predicate import Predicate, token
from sidecar.memory.stats import ToolStats
from sidecar.memory.values import FeatureValue


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
    said: dict[str, Any] = field(default_factory=dict)
    """What each family read in the failure message (:meth:`Family.message`), by
    family name: the numbers it states, for one."""

    @property
    def identity(self) -> str:
        return f"{self.session}\x1f{self.position}"


def named_values(
    features: Mapping[str, FeatureValue],
    arguments: Mapping[str, Any],
    error: str,
    amounts: Mapping[str, float] | None = None,
) -> list[str]:
    """The features the error text points at, as each family reads it (remembered
    values it names, the ids it names, the amounts it states)."""
    out: list[str] = []
    for family in families():
        out += family.named(features, arguments, error, amounts or {})
    return out


def message_evidence(error: str) -> dict[str, Any]:
    """What each family reads in a failure message, by family name."""
    out: dict[str, Any] = {}
    for family in families():
        said = family.message(error)
        if said is not None:
            out[family.name] = said
    return out


def observe(records: list[FailureRecord], limit: int) -> list[tuple[str, Any, list[int]]]:
    """Each (feature, value) the failing calls showed, with the calls that showed it:
    the ``limit`` shown by most calls, chosen before any success is looked at (so that
    no success can promote a candidate past the cut)."""
    seen: dict[tuple[str, str], tuple[Any, list[int]]] = {}
    for i, record in enumerate(records):
        for name, value in record.features.items():
            if not family_for(name).tallied:
                continue
            for item in value if isinstance(value, list) else [value]:
                key = (name, token(item))
                found = seen.get(key)
                if found is None:
                    seen[key] = (item, [i])
                elif found[1][-1] != i:
                    found[1].append(i)
    ranked = sorted(seen, key=lambda k: (-len(seen[k][1]), family_for(k[0]).rank, k))
    return [(k[0], seen[k][0], seen[k][1]) for k in ranked[:limit]]


def candidates(
    name: str,
    item: Any,
    stats: ToolStats,
    cardinality: Mapping[str, set[str]],
    rules: Variation,
) -> Iterable[Predicate]:
    """The predicates that one value of a failing call's feature satisfies (its
    family's :meth:`~sidecar.memory.families.Family.candidates`)."""
    return family_for(name).candidates(name, item, stats, cardinality, rules)


def group_candidates(
    tool: str, records: list[FailureRecord], stats: ToolStats, situations: Sequence[int]
) -> list[Candidate]:
    """The predicates a group proposes as a whole, every family asked (``situations``:
    each record's situation)."""
    out: list[Candidate] = []
    for family in families():
        calls = [
            Failing(r.features, r.said.get(family.name), s)
            for r, s in zip(records, situations, strict=True)
        ]
        out += family.group_candidates(tool, calls, stats)
    return out


def absent(predicate: Predicate) -> bool:
    """Whether a predicate says something is missing from the session: a value it
    never showed, an object it never fetched, a call it never made (the agent may know
    it from elsewhere: such a condition blocks only when the failure message speaks of
    what is missing)."""
    return family_for(predicate.feature).absent(predicate)


__all__ = [
    "FailureRecord",
    "Variation",
    "absent",
    "candidates",
    "group_candidates",
    "message_evidence",
    "named_values",
    "observe",
]
