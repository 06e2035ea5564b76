"""The stated-number benchmark at tiny sizes: its result has every part, the fitting
search never spends more than its budget (``FIT_STEPS_PER_CALL`` per failing call
stating the number, per search), the adversarial group spends all of it and, lifted,
far more, and the run leaves the library's module as it found it.  No timing is
asserted."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from benchmarks import stated_cost
from sidecar.memory.families import stated

TINY = stated_cost.Sizes((10, 40), 10, 2, 1, (4, 6), 1, 6)


@cache
def result() -> dict[str, Any]:
    return stated_cost.measure(TINY, seed=3)


def test_the_result_has_every_part() -> None:
    found = result()
    wanted = [(shape, size) for shape in stated_cost.SHAPES for size in TINY.arguments]
    rows = found["extraction"]
    assert [r["shape"] for r in rows] == [shape for shape, _size in wanted]
    assert all(r["arguments"] >= size for r, (_shape, size) in zip(rows, wanted, strict=True))
    assert all(0 < r["expressions"] <= stated.MAX_EXPRESSIONS for r in found["extraction"])
    # the uncapped call is measured where the sizes allow it, and has more expressions
    [small, *_] = found["extraction"]
    assert small["uncapped_expressions"] > stated.MAX_EXPRESSIONS
    assert found["adversarial_call"] == {"expressions": 96, "counts": 48, "amounts": 48,
                                         "pairs": 2304}  # fmt: skip
    assert [(g["failures"], g["unfit_numbers"]) for g in found["groups"]] == [
        (4, 1), (6, 1), (6, stated.MAX_SLOTS)
    ]  # fmt: skip
    assert found["booking"]["failures"] > 0 and found["booking"]["slots_searched"] > 0
    page = stated_cost.markdown(found)
    assert page.count("| group |") == 2 and "| numbers |" in page and "| booking |" in page


def test_the_search_never_spends_more_than_its_budget() -> None:
    found = result()
    steps = stated.FIT_STEPS_PER_CALL
    for row in [*found["groups"], found["booking"]]:
        assert row["within_bound"] and 0 <= row["budget_used_max"] <= 1
        assert row["evaluations"] <= row["bound"] <= steps * row["failures"] * row["slots_searched"]


def test_the_adversarial_group_spends_the_whole_budget_and_more_when_lifted() -> None:
    """Every pair fits every call but the last: the default budget is spent to the last
    evaluation, and without it every pair is evaluated over every call."""
    steps = stated.FIT_STEPS_PER_CALL
    for row in result()["groups"]:
        searches = row["slots_searched"]
        assert searches == row["unfit_numbers"]
        assert row["evaluations"] == row["bound"] == steps * row["failures"] * searches
        assert row["budget_used_max"] == 1
        assert row["evaluations_lifted"] == row["pairs_lifted"] * row["failures"]
        assert row["evaluations_lifted"] > row["evaluations"]
        assert row["same_conditions_when_lifted"]


def test_the_run_leaves_the_library_as_it_found_it() -> None:
    before = (stated._fitted, stated._constant, stated.FIT_STEPS_PER_CALL, stated.MAX_EXPRESSIONS)
    result()
    after = (stated._fitted, stated._constant, stated.FIT_STEPS_PER_CALL, stated.MAX_EXPRESSIONS)
    assert after == before


def test_the_count_follows_a_smaller_budget() -> None:
    """Counted, not assumed: with one evaluation per failing call the search stops there."""
    memory = stated_cost.learned(stated_cost.adversarial_sessions(5, 1, seed=1))
    with stated_cost.budget(1), stated_cost.counting() as searches:
        stated_cost.derivation(memory, stated_cost.TOOL)
    [search] = searches.found
    assert search.stating == 5 and search.spent == 5 and search.pairs == 1
    assert searches.within(1) and not searches.within(0)


@pytest.mark.parametrize("unfit", [1, stated.MAX_SLOTS])
def test_no_plain_expression_equals_a_stated_total(unfit: int) -> None:
    """The adversary holds: the stated totals are fitted, never matched plainly (else
    the search would not run), and the fit fails only on the last call."""
    memory = stated_cost.learned(stated_cost.adversarial_sessions(3, unfit, seed=1))
    [calls] = stated_cost.stated_inputs(memory, stated_cost.TOOL)
    for slot in range(unfit):
        assert stated._plain(calls, slot) == []
        assert stated._plain(calls[:-1], slot) == []
    with stated_cost.budget(stated_cost.LIFTED), stated_cost.counting() as searches:
        stated_cost.search_alone([calls[:-1]], stated_cost.TOOL)
    # without the last call every pair fits: the search keeps the first MAX_TIED
    assert all(s.pairs == stated.MAX_TIED for s in searches.found)
