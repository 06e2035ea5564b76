"""Question: what does the failure memory's search for expressions over the numbers a
refusal states cost per failure, at worst-case sizes, and does its work budget bound it?

Three parts, one run, every time a median with its same-run baseline
(:mod:`sidecar.memory.families.stated` is what is measured):

- **Extraction per call.** ``expressions(build_call(...))`` for untrusted calls of 10
  to 3,000 arguments, two shapes (:data:`SHAPES`): integer arguments (each one both an
  amount and a count) beside lists of objects naming catalog entries, booleans and an
  account, after a trace whose outputs hold numeric fields and maps; and booleans beside
  lists.  The baseline is ``build_call`` alone on the same call.  Where the sizes allow
  it, the first shape with ``MAX_EXPRESSIONS`` lifted: what the cap saves.
- **The group search per failure.** Groups of 10 to 100 failing calls of one tool, each
  in its own situation, built against the fitting search: every call shows the same 96
  expressions (48 counts, 48 amounts: 2,304 ``A + c*B`` pairs), no expression equals
  the stated total, and every pair fits every call but the last (whose total is one
  more), so a search without a budget evaluates every pair over every call.  Timed:
  ``FailureMemory.conditions(tool)`` (its cache cleared before each) and the stated
  family's ``group_candidates`` alone, with the default ``FIT_STEPS_PER_CALL`` and with
  it lifted; the evaluations spent are counted in a separate, untimed pass (the
  module's ``_fitted`` and ``_constant`` wrapped) against the bound
  ``FIT_STEPS_PER_CALL x failing calls stating the number``, per slot searched.  One more
  group states ``MAX_SLOTS`` numbers none of which fits: each slot has its own budget.
- **A real domain.** The booking desk (:mod:`benchmarks.booking`, every run learned):
  per failing ``book_reservation`` call kept, the whole derivation of that tool's
  conditions and the stated family's share of it; and whether lifting the budget
  changes a single condition.

``python -m benchmarks.stated_cost [--quick] [--out FILE]`` prints the JSON;
``python -m benchmarks.run stated`` writes it with its page and plot.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness.progress import progress
from benchmarks.harness.results import emit, machine, target
from benchmarks.harness.timing import interleaved, ratio, summary, timed
from benchmarks.stated_report import markdown, plot
from sidecar.memory import FailureMemory, Session, Step
from sidecar.memory.families import stated
from sidecar.memory.families.base import Failing, build_call
from sidecar.memory.independence import Situations
from sidecar.memory.stats import ToolStats
from sidecar.memory.trace import Trace

__all__ = ["markdown", "measure", "plot", "run"]
"""The page and the plot are the report module's, named here for ``benchmarks.run``."""

TOOL = "pay"
LIFTED = 10**12
"""A budget no search reaches: every pair is evaluated over every call."""
LISTS, FLAGS, AMOUNTS = 6, 6, 40
"""The adversarial call: 6 lists and 6 flags make 6 + 6 + 36 counts; 40 amounts and 8
products of an amount by a list's length fill the rest of the 96 expressions."""
TOTAL = 98765.43
"""The stated total: no expression of the adversarial call equals it."""
SUCCESSES = 20
"""Successful calls of the adversarial tool, so that candidates are judged against some."""
BOOKING_TOOL = "book_reservation"


@dataclass(frozen=True)
class Sizes:
    arguments: tuple[int, ...]
    """Arguments of the extraction calls (:data:`SHAPES`)."""
    uncapped_up_to: int
    """Extraction with MAX_EXPRESSIONS lifted, up to this many arguments (it grows with
    their square)."""
    extraction_repeat: int
    flags_repeat: int
    """Rounds of the ``flags_lists`` calls (seconds each at thousands of arguments)."""
    failures: tuple[int, ...]
    """Failing calls per adversarial group."""
    repeat: int
    """Timed rounds of each group and of the booking derivation."""
    booking_tasks: int


QUICK = Sizes((10, 100, 1_000, 3_000), 100, 21, 3, (10, 50, 100), 5, 72)
FULL = Sizes((10, 100, 1_000, 3_000), 1_000, 101, 7, (10, 50, 100), 21, 72)


# ---- the budget and what it spends ------------------------------------------------------
@contextmanager
def budget(steps: int) -> Iterator[None]:
    """``FIT_STEPS_PER_CALL`` set to ``steps`` for the block (the library reads it at
    each search), restored after."""
    kept = stated.FIT_STEPS_PER_CALL
    stated.FIT_STEPS_PER_CALL = steps
    try:
        yield
    finally:
        stated.FIT_STEPS_PER_CALL = kept


@dataclass
class Search:
    """One fitting search (one slot of one group): the failing calls stating the slot's
    number, the (pair, call) evaluations it spent, the pairs it tried."""

    slot: int
    stating: int
    spent: int = 0
    pairs: int = 0


@dataclass
class Searches:
    found: list[Search] = field(default_factory=list)

    def spent(self) -> int:
        return sum(s.spent for s in self.found)

    def bound(self, steps: int) -> int:
        """What the default budget allows: ``steps`` per failing call stating the
        number, per slot searched."""
        return sum(steps * s.stating for s in self.found)

    def within(self, steps: int) -> bool:
        return all(s.spent <= steps * s.stating for s in self.found)

    def used(self, steps: int) -> float:
        """The largest share of its budget one search spent (1: a search was cut)."""
        return max((s.spent / (steps * s.stating) for s in self.found if s.stating), default=0.0)


@contextmanager
def counting() -> Iterator[Searches]:
    """The module's ``_fitted`` and ``_constant`` wrapped to count, not changed: the
    evaluations a ``_constant`` call spent are what it took from the budget list
    (never below zero: the step that finds it spent is no evaluation)."""
    fitted, constant = stated._fitted, stated._constant
    out = Searches()

    def counted_fitted(calls: Sequence[Failing], slot: int, exclude: set[str]) -> list[str]:
        stating = sum(1 for c in calls if len(stated._numbers(c)) > slot)
        out.found.append(Search(slot, stating))
        return fitted(calls, slot, exclude)

    def counted_constant(
        stating: Sequence[tuple[Failing, Sequence[float]]], a: str, b: str, left: list[int]
    ) -> float | None:
        before = left[0]
        try:
            return constant(stating, a, b, left)
        finally:
            out.found[-1].spent += before - max(left[0], 0)
            out.found[-1].pairs += 1

    stated._fitted, stated._constant = counted_fitted, counted_constant  # type: ignore[assignment]
    try:
        yield out
    finally:
        stated._fitted, stated._constant = fitted, constant


# ---- 1. extraction per call -------------------------------------------------------------
SHAPES = ("numbers", "flags_lists")
"""``numbers``: integer arguments (each an amount and a count) beside four lists of
objects, four booleans and an account; ``flags_lists``: half booleans, half lists (each
boolean is multiplied by each list's length before the cap is looked at)."""


def extraction_call(shape: str, size: int, seed: int) -> tuple[Trace, dict[str, Any]]:
    """An untrusted call of ``size`` arguments of the shape, after an account (its
    numeric fields and a map of limits) and a catalog were read."""
    rng = random.Random(f"stated-cost:{seed}:{shape}:{size}")
    limits = {"daily": 500.0, "monthly": 4_000.0}
    account: dict[str, Any] = {"account_id": "acct_1001", "limits": limits}
    account |= {f"limit_{k}": round(rng.uniform(1, 5_000), 2) for k in range(24)}
    catalog = [
        {
            "sku": f"SKU{k:04d}",
            "variant": rng.choice(("red", "blue", "green")),
            "price": round(rng.uniform(1, 300), 2),
            "prices": {"standard": round(rng.uniform(1, 20), 2), "express": 25.0},
        }
        for k in range(12)
    ]
    trace = Trace(
        [
            Step("get_account", {"account_id": "acct_1001"}, json.dumps(account)),
            Step("search_items", {"query": "lamps"}, json.dumps({"items": catalog})),
        ]
    )
    if shape == "flags_lists":
        half = size // 2
        arguments: dict[str, Any] = {f"b{i:04d}": rng.random() < 0.5 for i in range(half)}
        arguments |= {f"l{i:04d}": [1, 2] for i in range(size - half)}
        return trace, arguments
    arguments = {f"n{i:04d}": rng.randint(0, 999) for i in range(size)}
    for k in range(4):
        picked = rng.sample(catalog, 3)
        # sku and variant name the catalog's entry; its prices are read through `shipping`
        arguments[f"basket_{k}"] = [
            {"sku": c["sku"], "variant": c["variant"], "quantity": rng.randint(1, 5)}
            for c in picked
        ]
        arguments[f"option_{k}"] = rng.random() < 0.5
    arguments |= {"account_id": "acct_1001", "shipping": "express"}
    return trace, arguments


def extraction(sizes: Sizes, seed: int) -> list[dict[str, Any]]:
    rows = []
    for shape in SHAPES:
        repeat = sizes.extraction_repeat if shape == "numbers" else sizes.flags_repeat
        for size in sizes.arguments:
            rows.append(_extraction_row(shape, size, repeat, seed))
            if shape == "numbers" and size <= sizes.uncapped_up_to:
                rows[-1] |= _uncapped(shape, size, seed, rows[-1]["with_expressions_p50_ms"])
            progress(f"stated: extraction, {shape} at {size:,}: {rows[-1]['ratio']}x build_call")
    return rows


def _extraction_row(shape: str, size: int, repeat: int, seed: int) -> dict[str, Any]:
    trace, arguments = extraction_call(shape, size, seed)
    built = build_call(trace, TOOL, arguments, None)
    samples = interleaved(
        {
            "build_call": lambda: build_call(trace, TOOL, arguments, None),
            "with_expressions": lambda: stated.expressions(
                build_call(trace, TOOL, arguments, None)
            ),
            "expressions": lambda: stated.expressions(built),
        },
        repeat,
        warmup=1,
    )
    ms = {name: summary(s)["p50_ms"] for name, s in samples.items()}
    return {
        "shape": shape,
        "arguments": len(arguments),
        "expressions": len(stated.expressions(built)),
        "build_call_p50_ms": ms["build_call"],
        "with_expressions_p50_ms": ms["with_expressions"],
        "ratio": ratio(ms["with_expressions"], ms["build_call"]),
        "expressions_p50_ms": ms["expressions"],
    }


def _uncapped(shape: str, size: int, seed: int, capped_ms: float) -> dict[str, Any]:
    """The same call with MAX_EXPRESSIONS lifted (timed apart, after the capped rounds:
    hundreds of times slower at a thousand numbers, it would crowd a round robin)."""
    trace, arguments = extraction_call(shape, size, seed)
    kept = stated.MAX_EXPRESSIONS
    stated.MAX_EXPRESSIONS = 10**9
    try:
        labels = len(stated.expressions(build_call(trace, TOOL, arguments, None)))
        samples = timed(lambda: stated.expressions(build_call(trace, TOOL, arguments, None)), 3)
    finally:
        stated.MAX_EXPRESSIONS = kept
    ms = summary(samples)["p50_ms"]
    return {
        "uncapped_expressions": labels,
        "uncapped_p50_ms": ms,
        "uncapped_vs_capped": ratio(ms, capped_ms),
    }


# ---- 2. the adversarial group -----------------------------------------------------------
def adversarial_arguments() -> dict[str, Any]:
    arguments: dict[str, Any] = {f"l{k}": list(range(1, k + 3)) for k in range(LISTS)}
    arguments |= {f"f{k}": True for k in range(FLAGS)}
    arguments |= {f"a{k:02d}": round(10.37 * k + 1.13, 2) for k in range(AMOUNTS)}
    return arguments


def refusal(totals: Sequence[float], paid: float | None) -> str:
    """``Payment amount does not add up, total price is T, but paid P``; with no ``paid``
    every number is a total none fits (``..., fee T2, tax T3, but paid T4``)."""
    words = ("total price is", "fee", "tax", "but paid")
    numbers = [*totals, paid] if paid is not None else list(totals)
    said = ", ".join(f"{w} {n:.2f}" for w, n in zip(words, numbers, strict=False))
    return f"Payment amount does not add up, {said}"


def _task_text(rng: random.Random) -> str:
    # words no other session shares: each failing call is its own situation
    return "please " + " ".join(f"w{rng.randrange(10**9)}" for _ in range(12))


def adversarial_sessions(failures: int, unfit: int, seed: int) -> list[Session]:
    """``failures`` failing calls of one tool, identical but for the last one's stated
    numbers (one more each), and the tool's successes.  ``unfit`` numbers are stated
    that no expression equals; with one, the paid amount equals ``a00`` (a plain
    expression: only the total is searched)."""
    rng = random.Random(f"stated-cost:{seed}:{failures}:{unfit}")
    arguments = adversarial_arguments()
    paid = arguments["a00"] if unfit == 1 else None
    out = []
    for i in range(failures):
        shift = 1.0 if i == failures - 1 else 0.0  # session ids sort it last
        totals = [TOTAL + 1000 * k + shift for k in range(unfit)]
        step = Step(TOOL, arguments, None, refusal(totals, paid))
        out.append(Session(f"adv-{i:04d}", (step,), "abandoned", _task_text(rng)))
    for i in range(SUCCESSES):
        right = {**arguments, "a00": arguments["a00"] + i}
        ok = Step(TOOL, right, json.dumps({"paid": True}))
        out.append(Session(f"ok-{i:04d}", (ok,), "completed", _task_text(rng)))
    return out


def learned(sessions: Sequence[Session]) -> FailureMemory:
    memory = FailureMemory()
    for s in sessions:
        memory.add_session(s)
    return memory


def stated_inputs(memory: FailureMemory, tool: str) -> list[list[Failing]]:
    """What the stated family's ``group_candidates`` reads of each of the tool's groups,
    built as the derivation builds it (records by identity, their situations)."""
    out = []
    # the memory's groups are what `conditions` derives from; no public view lists them
    for (name, _signature), group in sorted(memory._groups.items()):
        if name != tool or group.kind == "transient":
            continue
        records = sorted(group.failures, key=lambda r: r.identity)
        situations = Situations([(r.session, r.marks, r.text) for r in records])
        said = [r.said.get(stated.FAMILY.name) for r in records]
        out.append(
            [Failing(r.features, said[i], situations.find(i)) for i, r in enumerate(records)]
        )
    return out


def derivation(memory: FailureMemory, tool: str) -> list[dict[str, Any]]:
    """The tool's conditions derived afresh (the memory's per-tool cache dropped: a
    repeat would otherwise read it)."""
    memory._cache.pop(tool, None)
    return [c.to_dict() for c in memory.conditions(tool)]


def search_alone(groups: Sequence[Sequence[Failing]], tool: str) -> None:
    for calls in groups:
        stated.FAMILY.group_candidates(tool, calls, ToolStats())


def compare(memory: FailureMemory, tool: str, repeat: int) -> dict[str, Any]:
    """The derivation and the stated search alone, default budget and lifted, in one
    round robin; the evaluations each spends; whether lifting changed a condition."""
    groups = stated_inputs(memory, tool)
    failures = sum(len(g) for g in groups)
    steps = stated.FIT_STEPS_PER_CALL

    def under(allowed: int, fn: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            with budget(allowed):
                return fn()

        return call

    samples = interleaved(
        {
            "conditions": under(steps, lambda: derivation(memory, tool)),
            "conditions_lifted": under(LIFTED, lambda: derivation(memory, tool)),
            "stated": under(steps, lambda: search_alone(groups, tool)),
            "stated_lifted": under(LIFTED, lambda: search_alone(groups, tool)),
        },
        repeat,
        warmup=1,
    )
    ms = {name: summary(s)["p50_ms"] for name, s in samples.items()}
    with counting() as default:
        kept = derivation(memory, tool)
    with budget(LIFTED), counting() as lifted:
        everything = derivation(memory, tool)
    per = {f"{k}_ms_per_failure": round(v / max(1, failures), 4) for k, v in ms.items()}
    return {
        "failures": failures,
        **per,
        "conditions_lifted_vs_default": ratio(ms["conditions_lifted"], ms["conditions"]),
        "stated_lifted_vs_default": ratio(ms["stated_lifted"], ms["stated"]),
        "stated_share": ratio(ms["stated"], ms["conditions"]),
        "slots_searched": len(default.found),
        "evaluations": default.spent(),
        "bound": default.bound(steps),
        "within_bound": default.within(steps),
        "budget_used_max": round(default.used(steps), 4),
        "evaluations_lifted": lifted.spent(),
        "pairs_lifted": sum(s.pairs for s in lifted.found),
        "same_conditions_when_lifted": kept == everything,
    }


def group_part(sizes: Sizes, seed: int) -> list[dict[str, Any]]:
    cases = [(n, 1) for n in sizes.failures] + [(max(sizes.failures), stated.MAX_SLOTS)]
    rows = []
    for failures, unfit in cases:
        memory = learned(adversarial_sessions(failures, unfit, seed))
        row = {"unfit_numbers": unfit, **compare(memory, TOOL, sizes.repeat)}
        rows.append(row)
        lifted = row["conditions_lifted_vs_default"]
        progress(f"stated: {failures} failures, {unfit} unfit: lifted / default {lifted}")
    return rows


def expression_pairs() -> dict[str, int]:
    """The adversarial call's expressions, and the (amount, count) pairs the search has."""
    found = stated.expressions(build_call(Trace(), TOOL, adversarial_arguments(), None))
    counts = [label for label in found if label.startswith(("len(", "["))]
    amounts = len(found) - len(counts)
    return {
        "expressions": len(found),
        "counts": len(counts),
        "amounts": amounts,
        "pairs": len(counts) * amounts,
    }


# ---- 3. the booking desk ----------------------------------------------------------------
def booking_part(sizes: Sizes) -> dict[str, Any]:
    from benchmarks import booking

    runs = booking.build(0, tasks=sizes.booking_tasks)
    memory = learned([b.run.session() for b in runs])
    refused = sum(
        1 for b in runs for s in b.run.steps if s.tool == BOOKING_TOOL and s.error is not None
    )
    row = {"runs": len(runs), "failing_calls": refused}
    row |= compare(memory, BOOKING_TOOL, sizes.repeat)
    progress(f"stated: booking, {row['failures']} failures kept, stated {row['stated_share']}")
    return row


# ---- the run ----------------------------------------------------------------------------
def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    return measure(QUICK if quick else FULL, seed)


def measure(sizes: Sizes, seed: int) -> dict[str, Any]:
    steps = stated.FIT_STEPS_PER_CALL
    groups = group_part(sizes, seed)
    real = booking_part(sizes)
    return {
        "benchmark": "stated",
        "question": "what the failure memory's search for expressions over the numbers a "
        "refusal states costs per failure, at worst-case sizes, and whether its work "
        "budget bounds it",
        "machine": machine(),
        "params": {
            "seed": seed,
            "booking_tool": BOOKING_TOOL,
            "shapes": list(SHAPES),
            "fit_steps_per_call": steps,
            "max_expressions": stated.MAX_EXPRESSIONS,
            "max_slots": stated.MAX_SLOTS,
            "sizes": asdict(sizes),
        },
        "extraction": extraction(sizes, seed),
        "adversarial_call": expression_pairs(),
        "groups": groups,
        "booking": real,
        "targets": _targets(groups, real),
    }


def _targets(groups: Sequence[Mapping[str, Any]], real: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Verdicts on work, never on time: the budget holds, the adversary makes it bite, and
    the real domain loses no condition to it."""
    adversarial = [g for g in groups if g["unfit_numbers"] == 1]
    bounded = all(r["within_bound"] for r in [*groups, real])
    spent_more = all(r["evaluations_lifted"] > r["evaluations"] for r in adversarial)
    same = real["same_conditions_when_lifted"]
    return [
        target(
            "stated: evaluations per search <= FIT_STEPS_PER_CALL x failing calls",
            "every search",
            bounded,
            bounded,
        ),
        target(
            "stated: lifting the budget spends more on the adversarial group",
            "lifted > default",
            min(r["evaluations_lifted"] / max(1, r["evaluations"]) for r in adversarial),
            spent_more,
        ),
        target("stated: the budget cuts no booking condition", "same conditions", same, same),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    emit(run(args.quick, args.seed), args.out)


if __name__ == "__main__":
    main()
