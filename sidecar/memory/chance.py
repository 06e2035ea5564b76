"""How likely chance alone explains a learned condition.

A condition says "the tool fails with this signature when P holds".  Its evidence: of
the ``failing`` independent situations of the failure, P held in ``support``; of the
``units`` success units of the tool, P held in ``contradictions``.  If P had nothing to
do with the failure, the situations where it holds would be a random draw from the
whole: the probability that at least ``support`` of the failing situations fall among
the ``support + contradictions`` units where P holds is a hypergeometric tail (Fisher's
exact test, one-sided).

The learner tries many candidate predicates for each failure; some incidental feature
always separates two failures from a handful of successes.  So the tail is multiplied
by the number of candidate *features* tried (Bonferroni; the predicates on one feature
are nested or exclusive, so the feature is the unit of testing): the reported *chance*
is the probability that the best of that many unrelated features would look this good.
Candidates that the failure message itself points at (the values and amounts it names)
form a second, small family: their chance is the tail times twice that family's size
(half the error budget each), when that is smaller.

*Confirmation* is the same question asked without each supporting situation in turn
(leave one situation out): a condition that the other situations still make likelier
real than chance, whichever one is left out, predicts each of its situations from the
others.  A condition seen in two situations is confirmed only when one of them alone,
against the successes, already beats the odds.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb, floor, log10


@lru_cache(maxsize=65536)
def tail(population: int, marked: int, draws: int, hits: int) -> float:
    """P(X >= hits) for X hypergeometric: ``draws`` taken without replacement from
    ``population`` units of which ``marked`` are marked."""
    if hits <= 0:
        return 1.0
    marked = min(marked, population)
    draws = min(draws, population)
    top = min(marked, draws)
    if hits > top:
        return 0.0
    total = comb(population, draws)
    favourable = sum(comb(marked, x) * comb(population - marked, draws - x)
                     for x in range(hits, top + 1))  # fmt: skip
    return min(1.0, favourable / total)


def chance(
    support: int,
    failing: int,
    contradictions: int,
    units: int,
    candidates: int,
    named_family: int = 0,
) -> float:
    """The probability that chance explains ``support`` of ``failing`` situations with
    ``contradictions`` of ``units`` success units, among ``candidates`` tried (or the
    ``named_family`` the failure message pointed at, when the candidate is one)."""
    contradictions = min(contradictions, units)
    p = tail(failing + units, support + contradictions, failing, support)
    family = max(1, candidates)
    if named_family:
        family = min(family, 2 * named_family)
    return min(1.0, p * family)


def without_one(
    support: int,
    failing: int,
    contradictions: int,
    units: int,
    candidates: int,
    named_family: int = 0,
) -> float:
    """:func:`chance` with one supporting situation left out (every supporting
    situation plays the same part in the counts, so one computation serves all)."""
    if support <= 1:
        return 1.0
    return chance(support - 1, failing - 1, contradictions, units, candidates, named_family)


def one_in(p: float) -> str:
    """``p`` in words: "1 chance in ~40", "1 chance in ~3,000", "even odds"."""
    if p >= 0.5:
        return "likely by chance"
    n = 1.0 / p if p > 0 else float("inf")
    if n == float("inf") or n > 1e9:
        return "1 chance in over a billion"
    digits = floor(log10(n))
    rounded = round(n, -max(0, digits - 1)) if digits >= 1 else round(n)
    return f"1 chance in ~{int(rounded):,}"
