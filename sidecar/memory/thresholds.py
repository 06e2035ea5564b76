"""Verdicts before a call, and the "may apply" hints of a lookup.

A learned condition *blocks* only when its failure is deterministic (or of unknown kind
and reproduced: two independent situations or more, contrasted with successes), it is
not ``warn_only``, and its evidence is independent, uncontested and unlikely to be
chance:

- at least ``min_support_block`` independent situations support it, and its confidence
  reaches ``min_confidence_block`` (when it rests on two numbers its failure messages
  state, ``min_support_stated`` situations, whatever its confidence);
- its failures came from at least ``min_sources_block`` sources (counted as witnesses:
  a token's reports and its traces are one, :func:`~sidecar.trust.sources.witness`), or from
  one of the ``trusted`` sources;
- at most ``max_contradictions_block`` successes contradict it (successes counted only
  from a trusted source, from one of its own sources, or from several sources: no
  single other source can contest a rule alone);
- chance explains it at most ``max_chance_block`` likely among the candidates tried,
  and it is *confirmed*: it still does with any one of its situations left out.

A *repeat* of a call that had succeeded earlier in the session, whose failure message
says the effect is there already ("The username already exists"), blocks from
``min_support_stated`` situations: the message's words are its evidence, as a stated
number's are.

The *very call* that failed deterministically (a learned condition on its whole argument
set, ``value:*``) blocks on sessions rather than situations: when at least
``min_support_block`` sessions met it, from independent sources, and no success of the
same call counts against it (whatever ``max_contradictions_block`` allows a
generalization); chance and confirmation judge generalizations, and this is none.
(Failures on one object are one situation, so without this rule a call repeated by agent
after agent would never be refused.)

A hand-written condition blocks on its author's word (kind deterministic, not
``warn_only``).  Any other learned condition *warns* only when its evidence says
something (a warning on a call that then succeeds is noise, and noise teaches people to
ignore the warnings that are right):

- its confidence reaches ``min_confidence_warn`` and its predicate holds in a larger
  share of the failing situations than of the success units (:func:`informative`);
- it was right on at least ``min_precision_warn`` of what it matched, counted by its
  own contradictions (the independent situations where it held and the call failed,
  against the successes where it held);
- chance explains it less than ``max_chance_warn`` (a rule the memory itself calls
  "likely by chance" says nothing about this call), unless it names the very call that
  failed (its whole argument set);
- on a tool that only reads (:func:`reads_only`: its catalog type is ``read``, as an
  MCP tool marked ``readOnlyHint`` is), it is *established*: at least
  ``min_support_block`` situations, confirmed, chance at most ``max_chance_block`` and
  no contradiction that counts.  A read that fails changes nothing; a warning on it
  must rest on more than a hunch.

The defaults were chosen on one domain's runs (τ²-bench retail) and are reported
unchanged on the others by ``benchmarks.bench_failures``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sidecar.memory.chance import chance, without_one
from sidecar.memory.conditions import FailureCondition, confidence
from sidecar.memory.evidence import Step
from sidecar.memory.families import Family, build_call, family_for
from sidecar.memory.features import call_features
from sidecar.memory.params import LearnParams
from sidecar.memory.predicate import is_number, token
from sidecar.memory.stats import items_of
from sidecar.memory.trace import Trace
from sidecar.memory.values import FeatureValue
from sidecar.trust.sources import is_trusted, witnesses

Decision = Literal["allow", "warn", "block"]
Level = Literal["warn", "block"]


TRUSTED: frozenset[str] = frozenset({"local"})
"""Sources trusted by default: the process itself (and the home's own token)."""

READ_TYPES: frozenset[str] = frozenset({"read", "search"})
"""Catalog types of tools that only read (``read``: an MCP tool marked ``readOnlyHint``,
a τ² ``READ`` tool; ``search``: the seed's lookups)."""


def reads_only(tool_type: str | None) -> bool:
    """Whether a tool of this catalog type changes nothing."""
    return (tool_type or "").strip().lower() in READ_TYPES


@dataclass(frozen=True)
class Thresholds:
    min_support_block: int = 2
    """Independent situations."""
    min_support_stated: int = 1
    """Independent situations, for a condition resting on two numbers its failure
    messages state (its chance and confirmation come from those numbers)."""
    max_contradictions_block: int = 0
    min_confidence_block: float = 0.6
    min_confidence_warn: float = 0.5
    min_precision_warn: float = 0.6
    """Of what a learned condition matched (its situations and its contradictions), the
    share that failed, at least."""
    max_chance_warn: float = 0.5
    max_chance_block: float = 0.05
    require_confirmation: bool = True
    min_sources_block: int = 2
    trusted: frozenset[str] = TRUSTED
    _levels: dict[tuple[int, bool], tuple[FailureCondition, Level | None]] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    def level(self, condition: FailureCondition, read_only: bool = False) -> Level | None:
        """The level a condition acts at, on a call of a tool that only reads when
        ``read_only`` (kept per condition object: a check of a call against a thousand
        conditions judges each once)."""
        key = (id(condition), read_only)
        found = self._levels.get(key)
        if found is not None and found[0] is condition:
            return found[1]
        if len(self._levels) > 100_000:
            self._levels.clear()
        level = self._level(condition)
        if level == "warn" and not self.warns(condition, read_only):
            level = None
        self._levels[key] = (condition, level)
        return level

    def warns(self, condition: FailureCondition, read_only: bool = False) -> bool:
        """Whether a condition that may warn says enough to (see the module docstring):
        a person's word always does."""
        if condition.source != "learned" or condition.vouched:
            return True
        # situations, not sessions: one task retried ten times is not ten times right
        matched = condition.support + condition.contradictions
        if matched and condition.support / matched < self.min_precision_warn:
            return False
        if condition.chance >= self.max_chance_warn and not exact_repeat(condition):
            return False  # chance judges generalizations; the very call is none
        return not read_only or self.established(condition)

    def established(self, condition: FailureCondition) -> bool:
        """Whether a learned condition's evidence is strong, whoever taught it."""
        return (
            condition.support >= self.min_support_block
            and condition.confirmations > 0
            and condition.chance <= self.max_chance_block
            and self.contradictions(condition) <= self.max_contradictions_block
        )

    def _level(self, condition: FailureCondition) -> Level | None:
        if condition.kind == "transient":
            return None
        if condition.vouched and not condition.warn_only:
            return "block"  # a person confirmed it
        if condition.kind == "deterministic" and not condition.warn_only:
            if condition.source == "manual":
                return "block"
            if self.blocks(condition):
                return "block"
        elif condition.kind == "unknown" and not condition.warn_only:
            # a failure of unknown kind that recurred in independent situations under the
            # same predicate, against successes, is deterministic by reproduction
            reproduced = condition.support >= 2 and condition.candidates > 0
            if condition.source == "learned" and reproduced and self.blocks(condition):
                return "block"
        if condition.source == "manual":
            return "warn"
        if condition.confidence >= self.min_confidence_warn and informative(condition):
            return "warn"
        return None

    def blocks(self, condition: FailureCondition) -> bool:
        """Whether a learned condition's evidence is enough to block (see the module
        docstring)."""
        # source_count counts witnesses (a token's reports and traces are one)
        independent = condition.source_count >= self.min_sources_block or any(
            is_trusted(s, self.trusted) for s in condition.sources
        )
        against = self.contradictions(condition)
        if exact_repeat(condition):
            # the very call, not a generalization of it: whatever its situations say of
            # other calls, this one failed in that many sessions and never succeeded
            return independent and condition.session_count >= self.min_support_block and not against
        if said_repeat(condition):
            # the message itself says the effect of the call made before is there already:
            # its words are the evidence, as a stated number's are
            return independent and condition.support >= self.min_support_stated and not against
        # a condition resting on two numbers its messages state draws its weight from
        # them: its situations are not what makes it likely
        stated = condition.aligned >= 2
        # every learned condition is judged against chance, those whose feature could
        # not beat chance at all (no candidate tried) included; hand-written ones are not
        judged = condition.source == "learned" or bool(condition.candidates) or stated
        return (
            independent
            and condition.support >= (self.min_support_stated if stated else self.min_support_block)
            and against <= self.max_contradictions_block
            and (stated or confidence(condition.support, against) >= self.min_confidence_block)
            and (not judged or condition.chance <= self.max_chance_block)
            and (not self.require_confirmation or not judged or condition.confirmations > 0)
        )

    def to_block(self, condition: FailureCondition, most: int = 50) -> int | None:
        """How many more independent situations, from sources other than the ones it has,
        a learned condition needs before it blocks, counted as each would come (one more
        failure where it holds, no new success against it): 0 when it blocks now;
        ``None`` when no number would do (its failure is not deterministic, it is
        warn-only or contradicted, or it needs more than ``most``)."""
        if condition.source != "learned" or condition.kind != "deterministic":
            return None
        if condition.warn_only or self.contradictions(condition) > self.max_contradictions_block:
            return None
        if self.level(condition) == "block":
            return 0
        for k in range(1, most + 1):
            if self.blocks(_with_more(condition, k, self.trusted)):
                return k
        return None

    def contradictions(self, condition: FailureCondition) -> int:
        """The contradictions that count against a condition: all of them when they
        came from a trusted source, from one of the condition's own witnesses, or from
        several witnesses (or their sources are not known); none when one other source
        alone brought them."""
        against = set(condition.contradiction_sources)
        trusted = any(is_trusted(s, self.trusted) for s in against)
        who = witnesses(against)  # one token by two routes is one source
        if len(who) != 1 or trusted or who & witnesses(condition.sources):
            return condition.contradictions
        return 0


def _with_more(condition: FailureCondition, k: int, trusted: frozenset[str]) -> FailureCondition:
    """``condition`` as ``k`` more failing situations where it holds would leave it: each
    from a source of its own, none contradicting it."""
    c = condition
    support, failing = c.support + k, max(c.failing, c.support) + k
    p = chance(support, failing, c.contradictions, c.units, c.candidates)
    if c.aligned >= 2:
        p = min(p, c.chance)  # what its messages state bounds chance as well
    left_out = without_one(support, failing, c.contradictions, c.units, c.candidates)
    confirmed = left_out <= LearnParams.confirm_chance
    return replace(
        c,
        support=support,
        failing=failing,
        session_count=c.session_count + k,
        source_count=c.source_count + k,
        sources=(*c.sources, *(f"another source {i}" for i in range(k))),
        chance=min(c.chance, p),
        confirmations=c.confirmations + k if confirmed else c.confirmations,
    )


def said_repeat(condition: FailureCondition) -> bool:
    """Whether a learned condition is a repeat of a call that already succeeded in the
    session, whose failure message says its effect is there already ("already exists";
    the family leaves any other repeat warn-only)."""
    p = condition.predicate
    return (
        condition.source == "learned"
        and p.feature == "again:call"
        and p.value is True
        and not condition.warn_only
    )


def exact_repeat(condition: FailureCondition) -> bool:
    """Whether a learned condition names the very call: its whole argument set."""
    p = condition.predicate
    return condition.source == "learned" and p.feature == "value:*" and p.op == "=="


def informative(condition: FailureCondition) -> bool:
    """Whether a learned condition's predicate holds in a larger share of its failure's
    situations than of the success units where it could be read (a warning must carry
    information: one as frequent among successes says nothing about this call)."""
    if not condition.units or not condition.failing:
        return True
    return condition.support / condition.failing > condition.contradictions / condition.units


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Accepted:
    """The argument values a tool accepted in successful calls of the sessions learned
    (the tables :class:`~sidecar.memory.stats.ToolStats` keeps: a full table keeps the
    values of smallest hash, so a value may be accepted and not known).  A condition
    saying an argument's value was never shown in the session (made up) does not hold
    for a value the tool accepted elsewhere; a success that only untrusted sources
    reported does not answer a condition a trusted source stands behind."""

    values: Mapping[str, Mapping[str, list[int]]] = field(default_factory=dict)
    trusted_mask: int = 0
    trusted: frozenset[str] = frozenset()

    def answers(
        self, condition: FailureCondition, argument: str, features: Mapping[str, FeatureValue]
    ) -> bool:
        """Whether the tool accepted ``argument``'s value in this call before."""
        for name in (f"value:{argument}", "value:*"):
            if name not in features:
                continue
            table = self.values.get(name) or {}
            entries = [table.get(token(v)) for v in items_of(features[name])]
            if not entries or any(e is None for e in entries):
                return False
            if any(is_trusted(s, self.trusted) for s in condition.sources):
                return all(e is not None and e[1] & self.trusted_mask for e in entries)
            return True
        return False


NOTHING_ACCEPTED = Accepted()


@dataclass(frozen=True)
class Reason:
    condition_id: str
    family: str
    level: Level
    explanation: str
    observed: str = ""
    """What the call (or the session) showed that made the condition hold."""
    condition: FailureCondition | None = field(default=None, compare=False, repr=False)
    """The condition itself, for wording the reason from its facts."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "condition_id": self.condition_id,
            "family": self.family,
            "level": self.level,
            "explanation": self.explanation,
            "observed": self.observed,
        }


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reasons: tuple[Reason, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "reasons": [r.to_dict() for r in self.reasons]}


ALLOW = Verdict("allow")


def assess(
    conditions: Iterable[FailureCondition],
    before: Sequence[Step] | Trace,
    tool: str,
    arguments: Mapping[str, Any],
    task_input: str | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    read_only: bool = False,
    accepted: Accepted = NOTHING_ACCEPTED,
) -> Verdict:
    """Whether to let ``tool(arguments)`` run after the steps ``before``: block reasons
    first, then warnings (``read_only``: the tool only reads; ``accepted``: the values
    the tool accepted before, :meth:`FailureMemory.accepted`).  Pass a :class:`Trace`
    kept up to date across a session to avoid re-indexing the earlier steps before
    every call."""
    reasons = reasons_for(
        conditions, before, tool, arguments, task_input, thresholds, read_only, accepted
    )
    return Verdict(decide(r.level for r in reasons), tuple(reasons)) if reasons else ALLOW


def decide(levels: Iterable[Level]) -> Decision:
    """The verdict of a set of reasons: any block blocks, any warning warns."""
    found = set(levels)
    return "block" if "block" in found else "warn" if found else "allow"


def reasons_for(
    conditions: Iterable[FailureCondition],
    before: Sequence[Step] | Trace,
    tool: str,
    arguments: Mapping[str, Any],
    task_input: str | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    read_only: bool = False,
    accepted: Accepted = NOTHING_ACCEPTED,
) -> list[Reason]:
    """The conditions that hold for ``tool(arguments)`` after ``before``, each at its
    level (``read_only``: the tool only reads; ``accepted``: :class:`Accepted`): block
    reasons first, then warnings (by family)."""
    relevant = [
        (c, lvl) for c in conditions if c.tool == tool and (lvl := thresholds.level(c, read_only))
    ]
    if not relevant:
        return []
    features = call_features(before, tool, arguments, task_input)
    reasons: list[Reason] = []
    tokens: dict[str, tuple[str, ...]] = {}
    earlier: dict[str, dict[str, FeatureValue]] = {}
    for condition, level in relevant:
        if condition.holds(features, tokens):
            family = family_for(condition.predicate.feature)
            if family.context_free and _held_before(condition, family, before, earlier):
                continue  # the same tool succeeded here with a call it holds for
            if _answered(condition, family, features, accepted):
                continue  # a value said to be made up that the tool accepted elsewhere
            observed = family.observed(condition.predicate, features)
            reach = _untried(condition, features) if level == "block" else None
            if reach is not None:
                # judged as a rule that may only warn (the quiet rules apply); the reason
                # carries that rule, so whoever re-judges the condition judges the same
                condition = replace(condition, warn_only=True)
                capped = thresholds.level(condition, read_only)
                if capped is None:
                    continue
                level = capped
                observed += f" (no call was seen between it and the failures, at {reach:g})"
            reasons.append(
                Reason(condition.condition_id, condition.family, level,
                       condition.explanation, observed, condition)
            )  # fmt: skip
    reasons.sort(key=lambda r: (r.level != "block", r.family))
    return reasons


def _answered(
    condition: FailureCondition,
    family: Family,
    features: Mapping[str, FeatureValue],
    accepted: Accepted,
) -> bool:
    """Whether a learned condition saying an argument's value is unfounded meets a value
    the tool accepted in another session (a person's word or a hand-written rule
    stands)."""
    if condition.source != "learned" or condition.vouched:
        return False
    argument = family.unfounded(condition.predicate)
    return argument is not None and accepted.answers(condition, argument, features)


def _untried(condition: FailureCondition, features: Mapping[str, FeatureValue]) -> float | None:
    """The failures' reach (:attr:`FailureCondition.reach`) when a learned threshold
    holds only for values between its failures and its successes: no call there was
    seen either way, so the condition warns rather than blocks (a person's word
    stands); else ``None``."""
    p, reach = condition.predicate, condition.reach
    if reach is None or condition.vouched:
        return None
    if p.op == "not_in":
        succeeded = [float(v) for v in p.value if is_number(v)]
        if not succeeded:
            return None
        low, high = (reach, min(succeeded)) if reach < min(succeeded) else (max(succeeded), reach)
    else:
        low, high = (reach, float(p.value)) if p.op == "<" else (float(p.value), reach)
    held = [float(v) for v in items_of(features.get(p.feature)) if is_number(v) and p.holds(v)]
    between = bool(held) and all(low < v < high for v in held)
    return reach if between else None


def _held_before(
    condition: FailureCondition,
    family: Family,
    before: Sequence[Step] | Trace,
    earlier: dict[str, dict[str, FeatureValue]],
) -> bool:
    """Whether ``condition`` holds for a call of its tool that succeeded earlier in the
    session, read by ``family`` from its arguments alone (``earlier``: those readings,
    by family and step, kept for the other conditions of this check)."""
    steps = before.steps if isinstance(before, Trace) else before
    for index, step in enumerate(steps):
        if step.tool != condition.tool or step.error is not None:
            continue
        key = f"{family.name}\x1f{index}"
        found = earlier.get(key)
        if found is None:
            found = earlier[key] = {}
            family.extract(build_call(Trace(), step.tool, step.arguments, None), found)
        if condition.holds(found):
            return True
    return False


def may_apply(
    conditions: Iterable[FailureCondition],
    before: Sequence[Step] | Trace,
    tool: str,
    task_input: str | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Reason]:
    """For a lookup, before the arguments are known: the conditions of ``tool`` that
    could hold for a plausible call in this session, because the session already holds
    what they need (a remembered bad value; an object with the failing field value).
    Conditions about the arguments alone (shape, grounding, sizes, relations) cannot be
    judged without them and are not reported.  A lookup changes nothing: its hints are
    held to what a read's warnings are (:meth:`Thresholds.warns`)."""
    trace = before if isinstance(before, Trace) else Trace(before, task_input)
    out: list[Reason] = []
    for condition in conditions:
        if condition.tool != tool:
            continue
        level = thresholds.level(condition, read_only=True)
        if level is None:
            continue
        predicate = condition.predicate
        evidence = family_for(predicate.feature).session_evidence(predicate, trace, task_input)
        if evidence:
            out.append(
                Reason(
                    condition.condition_id,
                    condition.family,
                    level,
                    condition.explanation,
                    evidence,
                    condition,
                )
            )
    return out
