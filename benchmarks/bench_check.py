"""Question: how much faster is the compiled plan check than the seed's linear
``check_prefix_collision``, and does its cost stay flat as the archive grows from 1k to
1M chains?

Per size, a seeded archive of chains of 2-4 tools over a fixed 10,000-tool vocabulary is
built directly as ``ArchivedConstraint`` objects (no Parquet) and, in the same order, as
the seed's ``ChainArchive``.  Two kinds of plans are checked:

- ``safe``: 3-5 tools that appear in no archived chain (the seed must read every chain
  to clear a plan; most plans an agent checks are safe);
- ``colliding``: the fatal sequence (2-4 tools) of an archived chain picked uniformly
  (the seed stops at the first chain whose prefix matches: that chain or an earlier one).

Every size is built first, then measured in one pass that takes plan ``i`` of each size
in turn (machine drift hits all sizes alike, so growth is not drift): the seed's scan
once per plan, the compiled seed-parity verdict (``ConstraintMatcher.seed_verdict``)
and the compiled sequence check (``ConstraintMatcher.check``, the default mode) 40
times each, median.  Every seed verdict is compared with the compiled one (parity).
GC is frozen during the pass so that collections of the large archives do not land in
the timings of either side.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import quick_main
from benchmarks.harness.progress import progress, steps
from benchmarks.harness.results import machine, md_table, md_targets, pyplot, save_figure, target
from benchmarks.harness.timing import ratio
from benchmarks.seed import ChainArchive, seed_archive, seed_check

if TYPE_CHECKING:
    from sidecar.model import ArchivedConstraint
    from sidecar.rules.matcher import ConstraintMatcher

VOCABULARY = 10_000
FULL_SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000, 100_000)
KINDS = ("safe", "colliding")
MODES = ("compiled_seed_verdict", "compiled_check")


def make_constraints(n: int, rng: random.Random) -> list[ArchivedConstraint]:
    from sidecar.model import ArchivedConstraint

    out = []
    for i in range(n):
        seq = tuple(f"tool_{t}" for t in rng.sample(range(VOCABULARY), rng.randint(2, 4)))
        out.append(
            ArchivedConstraint(
                chain_id=f"{i:032x}",
                sequence=seq,
                rule=f"IF {seq[-2]} ran THEN {seq[-1]} fails (#{i})",
                signature=f"HTTP 413 at step {len(seq)}",
                when=(),
                gapped=False,
                pointer=f"cold://chains/{i:032x}",
                order=i,
            )
        )
    return out


def make_plans(
    constraints: Sequence[ArchivedConstraint], per_kind: int, rng: random.Random
) -> dict[str, list[tuple[str, ...]]]:
    safe = [
        tuple(f"fresh_{rng.randrange(VOCABULARY)}" for _ in range(rng.randint(3, 5)))
        for _ in range(per_kind)
    ]
    colliding = [rng.choice(constraints).sequence for _ in range(per_kind)]
    return {"safe": safe, "colliding": colliding}


def _time_ns(fn: Callable[[], Any], reps: int) -> float:
    """Median wall time of one call, in microseconds, over ``reps`` calls."""
    samples = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000.0


Plans = dict[str, list[tuple[str, ...]]]


@dataclass
class Built:
    """One archive size, in both forms, with its plans."""

    n: int
    matcher: ConstraintMatcher
    archive: ChainArchive
    plans: Plans
    compile_s: float


def build(n: int, per_kind: int, seed: int) -> Built:
    from sidecar.rules.matcher import ConstraintMatcher

    rng = random.Random(f"check:{seed}:{n}")
    constraints = make_constraints(n, rng)
    t0 = time.perf_counter()
    matcher = ConstraintMatcher(constraints)
    compile_s = time.perf_counter() - t0
    archive = seed_archive((c.sequence, c.signature, c.rule) for c in constraints)
    return Built(n, matcher, archive, make_plans(constraints, per_kind, rng), compile_s)


def measure(built: Sequence[Built], reps: int) -> dict[int, dict[str, Any]]:
    """Every size in one pass, interleaved plan by plan (plan ``i`` of each size in
    turn), so that machine drift lands on every size alike: the seed's scan once per
    plan (it takes milliseconds), each compiled check ``reps`` times (microseconds)."""
    samples: dict[int, dict[str, dict[str, list[float]]]] = {
        b.n: {k: {name: [] for name in ("seed", *MODES)} for k in KINDS} for b in built
    }
    mismatches = dict.fromkeys((b.n for b in built), 0)
    blocked = {b.n: {k: {"seed": 0, "check": 0} for k in KINDS} for b in built}
    gc.collect()
    gc.freeze()
    try:
        for b in built:  # warm both sides up
            for plan in b.plans["safe"][:2] + b.plans["colliding"][:2]:
                seed_check(b.archive, plan)
                _time_ns(partial(b.matcher.seed_verdict, plan), reps)
                _time_ns(partial(b.matcher.check, plan), reps)
        for kind in KINDS:
            for i in range(min(len(b.plans[kind]) for b in built)):
                for b in built:
                    plan, per = b.plans[kind][i], samples[b.n][kind]
                    start = time.perf_counter_ns()
                    verdict = seed_check(b.archive, plan)
                    per["seed"].append((time.perf_counter_ns() - start) / 1000.0)
                    mismatches[b.n] += b.matcher.seed_verdict(plan) != verdict
                    blocked[b.n][kind]["seed"] += not verdict[0]
                    blocked[b.n][kind]["check"] += not b.matcher.check(plan).safe
                    per["compiled_seed_verdict"].append(
                        _time_ns(partial(b.matcher.seed_verdict, plan), reps)
                    )
                    per["compiled_check"].append(_time_ns(partial(b.matcher.check, plan), reps))
    finally:
        gc.unfreeze()
    out: dict[int, dict[str, Any]] = {}
    for b in built:
        kinds: dict[str, Any] = {}
        for kind in KINDS:
            p50 = {name: statistics.median(v) for name, v in samples[b.n][kind].items()}
            kinds[kind] = {
                "p50_us": {name: round(v, 3) for name, v in p50.items()},
                "speedup_vs_seed": {m: ratio(p50["seed"], p50[m], 1) for m in MODES},
                "blocked": blocked[b.n][kind],
                "plans": len(samples[b.n][kind]["seed"]),
            }
        out[b.n] = {
            "archived_chains": b.n,
            "compile_s": round(b.compile_s, 2),
            "compile_us_per_chain": round(b.compile_s * 1e6 / b.n, 2),
            "parity_mismatches": mismatches[b.n],
            "kinds": kinds,
            "speedup_vs_seed": min(kinds[k]["speedup_vs_seed"][m] for k in KINDS for m in MODES),
        }
    return out


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    started = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    per_kind = 30 if quick else 20
    built = []
    for n in steps("check: sizes compiled", sizes):
        progress(f"check: compiling {n:,} archived chains")
        built.append(build(n, per_kind, seed))
    progress("check: measuring every size, interleaved")
    measured = measure(built, reps=40)
    del built
    gc.collect()
    runs = [measured[n] for n in sizes]
    small, large = runs[0], runs[-1]
    growth = {
        kind: {
            m: ratio(large["kinds"][kind]["p50_us"][m], small["kinds"][kind]["p50_us"][m])
            for m in MODES
        }
        for kind in KINDS
    }
    worst_growth = max(g for per in growth.values() for g in per.values())
    targets = _targets(measured.get(100_000), small, large, worst_growth, runs)
    return {
        "benchmark": "check",
        "question": "compiled plan check vs the seed's linear prefix scan, 1k to 1M chains",
        "machine": machine(),
        "params": {
            "sizes": list(sizes),
            "vocabulary": VOCABULARY,
            "plans_per_kind": per_kind,
            "compiled_reps_per_plan": 40,
            "seed": seed,
        },
        "runs": runs,
        "speedup_vs_seed": {str(r["archived_chains"]): r["speedup_vs_seed"] for r in runs},
        "growth": growth,
        "growth_worst": worst_growth,
        "targets": targets,
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _targets(
    at_100k: dict[str, Any] | None,
    small: dict[str, Any],
    large: dict[str, Any],
    worst_growth: float,
    runs: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    return [
        target(
            "check: speedup vs the seed's linear scan at 100k chains",
            ">= 1000 (slowest plan kind, both compiled modes)",
            at_100k["speedup_vs_seed"] if at_100k else None,
            at_100k["speedup_vs_seed"] >= 1000 if at_100k else None,
        ),
        target(
            f"check: growth p50({large['archived_chains']:,}) / p50({small['archived_chains']:,})",
            "<= 2 (worst plan kind and mode)",
            worst_growth,
            worst_growth <= 2,
        ),
        target(
            "check: seed parity (compiled seed_verdict == the seed's answer)",
            "0 mismatches",
            sum(r["parity_mismatches"] for r in runs),
            all(r["parity_mismatches"] == 0 for r in runs),
        ),
    ]


def markdown(result: dict[str, Any]) -> str:
    rows = []
    for r in result["runs"]:
        for kind in KINDS:
            k = r["kinds"][kind]
            rows.append(
                [
                    r["archived_chains"],
                    kind,
                    k["p50_us"]["seed"],
                    k["p50_us"]["compiled_seed_verdict"],
                    k["p50_us"]["compiled_check"],
                    k["speedup_vs_seed"]["compiled_seed_verdict"],
                    k["speedup_vs_seed"]["compiled_check"],
                    f"{k['blocked']['seed']}/{k['blocked']['check']} of {k['plans']}",
                ]
            )
    growth_rows = [[kind, *(result["growth"][kind][m] for m in MODES)] for kind in KINDS]
    return "\n".join(
        [
            "## Plan check: compiled vs the seed's linear scan",
            "",
            md_table(
                [
                    "archived chains",
                    "plans",
                    "seed p50 µs",
                    "compiled seed_verdict p50 µs",
                    "compiled check p50 µs",
                    "speedup (seed_verdict)",
                    "speedup (check)",
                    "blocked seed/check",
                ],
                rows,
            ),
            "",
            "Growth of the compiled p50 from the smallest to the largest archive:",
            "",
            md_table(["plans", *MODES], growth_rows),
            "",
            md_table(
                ["archived chains", "compile s", "µs per chain", "parity mismatches"],
                [
                    [
                        r["archived_chains"],
                        r["compile_s"],
                        r["compile_us_per_chain"],
                        r["parity_mismatches"],
                    ]
                    for r in result["runs"]
                ],
            ),
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    sizes = [r["archived_chains"] for r in result["runs"]]
    styles = {"safe": "-", "colliding": "--"}
    for kind in KINDS:
        for name, label in (
            ("seed", "seed linear scan"),
            ("compiled_seed_verdict", "compiled (seed parity)"),
            ("compiled_check", "compiled check (sequence)"),
        ):
            values = [r["kinds"][kind]["p50_us"][name] for r in result["runs"]]
            ax.plot(sizes, values, styles[kind], marker="o", label=f"{label}, {kind}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("archived chains")
    ax.set_ylabel("p50 per check (µs)")
    ax.set_title("Plan check cost as the archive grows")
    ax.legend(fontsize=7)
    return [save_figure(plt, fig, out_dir / "check.png")]


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
