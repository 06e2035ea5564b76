"""From one failure group to its conditions: every candidate predicate with its
independent support, its contradictions, how likely chance explains it among the
candidates tried, and whether it holds up with each of its situations left out.

A *group* is the failing calls of one tool with one normalized signature; the tool's
success statistics (:mod:`sidecar.memory.stats`) are what each candidate is contrasted
with.  The families (:mod:`sidecar.memory.families`) propose the candidates and judge
what is particular to them; this module counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sidecar.classify import Kind
from sidecar.memory.candidates import (
    FailureRecord,
    Variation,
    candidates,
    group_candidates,
    observe,
)
from sidecar.memory.chance import chance, without_one
from sidecar.memory.conditions import MAX_EXAMPLE_SESSIONS, FailureCondition, confidence, explain
from sidecar.memory.families import family_for
from sidecar.memory.families.base import Candidate
from sidecar.memory.independence import Situations
from sidecar.memory.params import LearnParams
from sidecar.memory.predicate import Predicate, is_number, token
from sidecar.memory.stats import SOURCE_BITS, ToolStats, items_of, source_bit, source_names
from sidecar.trust.sources import is_trusted, witnesses


@dataclass
class Group:
    tool: str
    signature: str
    kind: Kind
    failures: list[FailureRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Judging:
    """What a group's candidates are judged with."""

    stats: ToolStats
    """The tool's successes."""
    cardinality: Mapping[str, set[str]]
    rules: Variation
    params: LearnParams
    sources: list[str]
    trusted: frozenset[str] = frozenset()

    def trusted_mask(self) -> int:
        """The bits of the trusted sources (:func:`~sidecar.memory.stats.source_bit`)."""
        mask = 0
        for i, name in enumerate(self.sources[:SOURCE_BITS]):
            if is_trusted(name, self.trusted):
                mask |= source_bit(i)
        return mask


def derive_conditions(group: Group, judging: Judging) -> list[FailureCondition]:
    """The conditions of one failure group, each with its evidence and its chance."""
    stats = judging.stats
    records = sorted(group.failures, key=lambda r: r.identity)
    situations = Situations([(r.session, r.marks, r.text) for r in records])
    evidence, stated = _evidence(group, records, situations, judging)
    named = {n for r in records for n in r.named}
    named |= {
        p.feature
        for p, _calls in evidence.values()
        if family_for(p.feature).signature_names(p, group.signature)
    }
    aligned = [
        key
        for key, (p, _calls) in evidence.items()
        if p.feature in named or f"{p.feature}\x1f{token(p.value)}" in named
    ]
    failing = situations.count()
    counts = {key: family_for(p.feature).counts(p, stats) for key, (p, _c) in evidence.items()}
    ignored = _ignored(evidence, counts, records, judging)
    supports = {key: situations.count(calls) for key, (_p, calls) in evidence.items()}
    # a feature is tried when one of its predicates could beat chance at all: the
    # units it marks (failing situations and successes) are at most half of them;
    # filtering on that margin alone does not bias the test of association (one the
    # messages bound is judged by that bound: not one more test the others pay for)
    tried = {
        key[0]
        for key in evidence
        if key not in stated and supports[key] + counts[key][0] <= (failing + counts[key][2]) / 2
    }
    trial = Trial(
        failing=failing,
        # predicates on one feature are nested or exclusive: the tests are the features
        candidates=len(tried),
        named=len({key[0] for key in aligned} & tried),
    )
    out: list[FailureCondition] = []
    for key, (predicate, holding) in evidence.items():
        condition = _condition(
            group, predicate, records, sorted(holding), supports[key], counts[key],
            trial, key in aligned, named, judging, ignored.get(key, 0), stated.get(key),
        )  # fmt: skip
        if condition is not None:
            out.append(condition)
    return _superseded(out, failing)


def _superseded(conditions: list[FailureCondition], failing: int) -> list[FailureCondition]:
    """The group's rules less those an exact one makes redundant.  A relation between
    two numbers the messages state, holding in every failing situation with no success
    against it, is the failure's own rule; the group's other rules that successes
    contradict only approximate it (a price compared with a payment where the message
    says the total was owed), and would warn on exactly the calls it lets through."""
    exact = any(
        c.family == "stated" and c.aligned >= 2 and c.support >= failing and not c.contradictions
        for c in conditions
    )
    if not exact:
        return conditions
    return [c for c in conditions if c.family == "stated" or not c.contradictions]


Key = tuple[str, str, str]


def _evidence(
    group: Group, records: list[FailureRecord], situations: Situations, judging: Judging
) -> tuple[dict[Key, tuple[Predicate, set[int]]], dict[Key, Candidate]]:
    """Every candidate predicate of a failure group with the calls it holds for: the
    ones observed in the calls' features, and the ones proposed across the group (with
    what a failure message states about them)."""
    stats = judging.stats
    evidence: dict[Key, tuple[Predicate, set[int]]] = {}
    stated: dict[Key, Candidate] = {}
    limit = judging.params.max_observations_per_group
    for name, value, calls in observe(records, limit):
        for predicate in candidates(name, value, stats, judging.cardinality, judging.rules):
            key = (predicate.feature, str(predicate.op), token(predicate.value))
            evidence.setdefault(key, (predicate, set()))[1].update(calls)
    where = [situations.find(i) for i in range(len(records))]
    for proposed in group_candidates(group.tool, records, stats, where):
        p = proposed.predicate
        key = (p.feature, str(p.op), token(p.value))
        evidence.setdefault(key, (p, set()))[1].update(proposed.calls)
        if proposed.chance is not None:
            stated[key] = proposed
    return evidence, stated


def _ignored(
    evidence: Mapping[tuple[str, str, str], tuple[Predicate, set[int]]],
    counts: dict[tuple[str, str, str], tuple[int, int, int]],
    records: list[FailureRecord],
    judging: Judging,
) -> dict[tuple[str, str, str], int]:
    """Against a candidate a trusted source stands behind (one of the failing calls it
    holds for came from one), successes only untrusted sources reported are not
    counted: they leave its contradictions and its success units, and are kept as
    ``ignored`` (rewrites ``counts``; returns the ignored per candidate).  Successes
    whose sources are not known (a prerequisite's absence) still count."""
    if not judging.trusted:
        return {}
    trusted = judging.trusted_mask()
    out: dict[tuple[str, str, str], int] = {}
    for key, (_predicate, holding) in evidence.items():
        contradictions, mask, units = counts[key]
        if not contradictions or not mask or mask & trusted:
            continue
        if any(is_trusted(records[i].source, judging.trusted) for i in holding):
            counts[key] = (0, mask, max(0, units - contradictions))
            out[key] = contradictions
    return out


def _condition(
    group: Group,
    predicate: Predicate,
    records: list[FailureRecord],
    calls: list[int],
    support: int,
    counts: tuple[int, int, int],
    trial: Trial,
    aligned: bool,
    named: set[str],
    judging: Judging,
    ignored: int = 0,
    stated: Candidate | None = None,
) -> FailureCondition | None:
    family_ = family_for(predicate.feature)
    warn_only = family_.warn_only(predicate, judging.stats, named)
    if family_.absent(predicate) and predicate.feature not in named:
        warn_only = True  # missing from the session, and the failure does not say so
    contradictions, mask, units = counts
    conf = confidence(support, contradictions)
    if conf < judging.params.min_confidence_kept:
        return None
    sessions = sorted({records[i].session for i in calls})
    sources = sorted({records[i].source for i in calls})
    args = (support, trial.failing, contradictions, units, trial.candidates)
    p = chance(*args, named_family=trial.named if aligned else 0)
    left_out = without_one(*args, named_family=trial.named if aligned else 0)
    if stated is not None and stated.chance is not None:
        # what the message states bounds chance as well as the contrast does
        p = min(p, stated.chance)
        left_out = min(left_out, 1.0 if stated.confirm is None else stated.confirm)
    # one situation confirms nothing, unless two numbers its message states do
    several = support > 1 or (stated is not None and stated.aligned >= 2)
    confirmed = several and left_out <= judging.params.confirm_chance
    condition = FailureCondition(
        tool=group.tool,
        signature=group.signature,
        predicate=predicate,
        kind=group.kind,
        family=family_.name,
        support=support,
        contradictions=contradictions,
        confidence=conf,
        warn_only=warn_only,
        sessions=tuple(sessions)[:MAX_EXAMPLE_SESSIONS],
        session_count=len(sessions),
        source_count=len(witnesses(sources)),  # a token's reports and traces: one
        sources=tuple(sources)[:MAX_EXAMPLE_SESSIONS],
        failing=trial.failing,
        units=units,
        candidates=trial.candidates,
        chance=round(p, 6),
        confirmations=support if confirmed else 0,
        contradiction_sources=source_names(mask, judging.sources)[:MAX_EXAMPLE_SESSIONS],
        ignored=ignored,
        stated=stated.note if stated is not None else "",
        aligned=stated.aligned if stated is not None else 0,
        reach=_reach(predicate, [records[i] for i in calls]),
    )
    return replace(condition, explanation=explain(condition))


def _reach(predicate: Predicate, records: Sequence[FailureRecord]) -> float | None:
    """The failing value nearest the successes, for a threshold or a number never seen
    to succeed whose failures all lie on one side of the successes (else ``None``)."""
    values = [
        float(v)
        for r in records
        for v in items_of(r.features.get(predicate.feature))
        if is_number(v) and predicate.holds(v)
    ]
    if not values or predicate.op == "==":
        return None
    if predicate.op != "not_in":
        return max(values) if predicate.op == "<" else min(values)
    succeeded = [float(v) for v in predicate.value if is_number(v)]
    if not succeeded or len(succeeded) < len(predicate.value):
        return None
    if max(values) < min(succeeded):
        return max(values)
    return min(values) if min(values) > max(succeeded) else None


@dataclass(frozen=True)
class Trial:
    """What every candidate of one failure is judged against."""

    failing: int
    """Independent situations of the failure."""
    candidates: int
    named: int
    """Candidates the failure message pointed at."""
