"""Prerequisites: the tools that succeeded earlier in the session (the feature
``prior``; a predicate on ``prior:{T}`` is whether ``T`` did).  A tool that had succeeded
before (nearly) every success of this one is a prerequisite a failing call may lack; a
tool that had succeeded before failing calls may have undone the state the call needs
(a logout, a mode switch back).

Either is proposed only when the failing calls it explains are at least
:data:`MIN_SITUATIONS` situations: one failure without a login says little about a
prerequisite; and an undoing call only when no success of the tool came after it.  A
prerequisite rule never holds for a call whose tool already succeeded in the session
without the prerequisite before it (``prior:<own>``: the tools that had succeeded before
the tool's own first success there): the session itself showed the tool does not need
it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from sidecar.memory.families.base import Call, Candidate, Failing, Family, Features, Variation
from sidecar.memory.predicate import Predicate
from sidecar.memory.stats import ToolStats
from sidecar.memory.values import FeatureValue, Scalar

PREREQUISITE_SHARE = 0.8
"""A tool is a prerequisite candidate when at least this share of the successes had it
succeed before them."""
MIN_SITUATIONS = 2
"""Failing situations a prerequisite (or an undoing call) must explain to be proposed."""
FEATURE = "prior"
OWN = f"{FEATURE}:<own>"
"""The tools that had succeeded before the tool's own first success in the session
(absent until it succeeded there)."""


class Prerequisite(Family):
    name: ClassVar[str] = "prerequisite"
    rank: ClassVar[int] = 8
    prefixes: ClassVar[tuple[str, ...]] = (FEATURE,)
    tallied: ClassVar[bool] = False

    def extract(self, call: Call, out: Features) -> None:
        succeeded = call.trace.succeeded
        out[FEATURE] = list[Scalar](sorted(succeeded))
        own = succeeded.get(call.tool)
        if own is not None:
            out[OWN] = list[Scalar](sorted(t for t, at in succeeded.items() if at < own))

    def candidates(
        self,
        name: str,
        item: Any,
        stats: ToolStats,
        cardinality: Mapping[str, set[str]],
        rules: Variation,
    ) -> Iterable[Predicate]:
        return ()  # proposed by the group: see group_candidates

    def group_candidates(
        self, tool: str, calls: Sequence[Failing], stats: ToolStats
    ) -> list[Candidate]:
        """``prior:T == False`` for a tool ``T`` that had succeeded before (nearly)
        every success of this tool, with the failing calls in whose session it had not;
        ``prior:T == True`` for a tool that had succeeded before failing calls and
        before no success; each when those calls are :data:`MIN_SITUATIONS` situations
        or more."""
        out: list[Candidate] = []

        def propose(predicate: Predicate, held: list[int]) -> None:
            if len({calls[i].situation for i in held}) >= MIN_SITUATIONS:
                out.append(Candidate(predicate, held))

        if stats.units:
            for done in sorted(stats.prior):
                if done == tool or stats.with_prior(done)[0] < PREREQUISITE_SHARE * stats.units:
                    continue
                missing = Predicate(f"{FEATURE}:{done}", "==", False)
                lacking = [i for i, f in enumerate(calls) if self.holds(missing, f.features, None)]
                propose(missing, lacking)
        earlier = {t for f in calls for t in _earlier(f.features)} - {tool}
        for done in sorted(earlier):
            if stats.with_prior(done)[0]:
                continue  # the tool succeeded after it: it undid nothing the tool needs
            preceded = [i for i, f in enumerate(calls) if done in _earlier(f.features)]
            propose(Predicate(f"{FEATURE}:{done}", "==", True), preceded)
        return out

    def holds(
        self,
        predicate: Predicate,
        features: Mapping[str, FeatureValue],
        tokens: dict[str, tuple[str, ...]] | None,
    ) -> bool:
        if FEATURE not in features:
            return False  # a call whose session's context is not known: no earlier calls
        if predicate.value is False and OWN in features:
            own = features[OWN]
            if predicate.rest not in (own if isinstance(own, list) else []):
                return False  # the tool succeeded here before without it
        return predicate.holds(predicate.rest in _earlier(features))

    def observed(self, predicate: Predicate, features: Mapping[str, FeatureValue]) -> str:
        done = predicate.rest in _earlier(features)
        return f"{'a' if done else 'no'} successful {predicate.rest} call before"

    def counts(self, predicate: Predicate, stats: ToolStats) -> tuple[int, int, int]:
        if predicate.value is True:
            contradictions, mask = stats.with_prior(predicate.rest)
        else:
            contradictions, mask = stats.without_prior(predicate.rest), 0
        return contradictions, mask, stats.units

    def absent(self, predicate: Predicate) -> bool:
        return predicate.value is False

    def signature_names(self, predicate: Predicate, signature: str) -> bool:
        return names_tool(signature, predicate.rest)

    def describe(self, predicate: Predicate) -> str:
        done = "succeeded" if predicate.value else "had not succeeded"
        return f"{predicate.rest} {done} earlier in the session"


def _earlier(features: Mapping[str, FeatureValue]) -> list[Any]:
    value = features.get(FEATURE)
    return value if isinstance(value, list) else []


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


FAMILY = Prerequisite()
