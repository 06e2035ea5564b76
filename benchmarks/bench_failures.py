"""Question: on real agent runs, how many repeat failures does a failure memory catch
before the call, and what does it cost successful runs?

Data: the τ²-bench retail and telecom runs of ``tau2-trajectories`` (see
:mod:`benchmarks.tau2`).  Protocol, per seed: the tasks are shuffled and dealt into
``--folds`` folds (all runs of a task in one fold); for each fold, a fresh system learns
every other fold's runs one at a time (in a seeded order), then each held-out run is
replayed call by call and the system is asked before every call, with the steps before
it and what the agent had been told so far.  A *real repeat failure* is a held-out
failing call whose (tool, normalized signature) occurred in training.

Systems (:mod:`benchmarks.failure_systems`): ``plain_index`` (always allows),
``seed_prefix`` (the seed's prefix check), ``sequence_memory`` (today's fatal
sequences) and ``call_memory`` (:mod:`sidecar.memory` with its default thresholds).

Reported per system, pooled over seeds and folds and per (seed, fold): repeats caught
before the call (warn or block; block only), block precision (blocked calls that really
failed), successful runs (reward 1) with a wrongly blocked call / with any blocked call,
warned calls in successful runs as a share of their calls, and constraints contradicted
on held-out calls.  For ``call_memory`` also: each family's catches and costs, each
family left out in turn, the decision thresholds swept, what the learned conditions
look like per family, the lookup hints (``may_apply``), and the repeats it misses.
Timing: ``call_memory``'s check against ``sequence_memory``'s in the same replay, and a
30-step session checked against 100 conditions of one tool.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_DATASETS,
    emit,
    interleaved,
    machine,
    md_table,
    md_targets,
    progress,
    pyplot,
    ratio,
    save_figure,
    summary,
    target,
)
from benchmarks.failure_systems import (
    CallMemory,
    Check,
    SequenceMemory,
    decide,
    learned_failures,
    make_systems,
)
from benchmarks.tau2 import Corpus, Run, load, missing_files
from sidecar.memory import FAMILIES, FailureMemory, LearnParams, Step, Thresholds, Trace, assess
from sidecar.memory import normalize_signature as signature_of

FOLDS = 5
QUICK_SEEDS = 1
FULL_SEEDS = 5
Decision = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Call:
    seed: int
    fold: int
    run: int
    """Index of the run in the corpus."""
    step: int
    failed: bool
    repeat: bool
    """A failure whose (tool, normalized signature) occurred in training."""
    run_succeeded: bool
    check: Check
    hinted: str | None = None
    """``call_memory``: the level of the strongest "may apply" hint a lookup of the tool
    would have carried here (``None``: no hint)."""


@dataclass
class Replay:
    calls: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))
    timings_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    index_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """``call_memory``: the time to index the step before each call into the run's trace."""
    learn_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Per system, the time to take in each training session."""
    trained: list[dict[str, Any]] = field(default_factory=list)
    evicted: dict[tuple[int, int], set[str]] = field(default_factory=dict)
    """``sidecar``: the tools its eviction removed after each (seed, fold)'s training."""


def folds_of(runs: Sequence[Run], k: int, seed: int) -> list[list[int]]:
    """Run indexes per fold; the runs of one task always share a fold."""
    tasks = sorted({r.task for r in runs})
    random.Random(f"folds:{seed}").shuffle(tasks)
    fold_of = {task: i % k for i, task in enumerate(tasks)}
    out: list[list[int]] = [[] for _ in range(k)]
    for i, run in enumerate(runs):
        out[fold_of[run.task]].append(i)
    return out


LEARN_SWEEP: dict[str, LearnParams] = {
    **{f"call_memory[max_categorical={n}]": LearnParams(max_categorical=n) for n in (4, 48, 10**6)},
    "call_memory[independence=session]": LearnParams(independence="session"),
    "call_memory[max_categorical=1000000, independence=session]": LearnParams(
        max_categorical=10**6, independence="session"
    ),
}
"""Variants of the learner replayed beside the default one: how many distinct values a
bound-object field may show and still count as a state (12 by default), and whether
sessions acting on one object count once (the default) or each."""


def replay(
    corpus: Corpus, seeds: Sequence[int], k: int, variants: Mapping[str, LearnParams] | None = None
) -> Replay:
    out = Replay()
    runs = corpus.runs
    for seed in seeds:
        for fold, held in enumerate(folds_of(runs, k, seed)):
            held_set = set(held)
            training = [i for i in range(len(runs)) if i not in held_set]
            random.Random(f"order:{seed}:{fold}").shuffle(training)
            systems = make_systems(dict(variants or {}), corpus.tools)
            seen: set[tuple[str, str]] = set()
            for i in training:
                session = runs[i].session()
                for system in systems:
                    start = time.perf_counter()
                    system.learn(session)
                    elapsed = (time.perf_counter() - start) * 1000.0
                    out.learn_ms[system.name].append(elapsed)
                seen |= {
                    (s.tool, signature_of(s.error or "")) for _, s in learned_failures(session)
                }
            for system in systems:
                if hasattr(system, "after_training"):
                    start = time.perf_counter()
                    system.after_training()
                    out.learn_ms[system.name].append((time.perf_counter() - start) * 1000.0)
                    out.evicted[(seed, fold)] = set(system.evicted)
            out.trained.append(_trained(seed, fold, systems, len(training), len(held)))
            progress(f"failures: seed {seed} fold {fold}: {len(training)} runs learned")
            for i in held:
                for system in systems:
                    _replay_run(out, system, (seed, fold, i), runs[i], seen)
            for system in systems:
                if hasattr(system, "close"):
                    system.close()
    return out


def made_impossible(
    corpus: Corpus, replayed: Replay, seeds: Sequence[int], k: int
) -> dict[str, Any]:
    """Held-out successful runs that call a tool the sidecar's eviction removed after
    training on the other folds: tasks the eviction would have made impossible."""
    runs = corpus.runs
    impossible: list[dict[str, Any]] = []
    successful = 0
    for seed in seeds:
        for fold, held in enumerate(folds_of(runs, k, seed)):
            gone = replayed.evicted.get((seed, fold), set())
            for i in held:
                if not runs[i].succeeded:
                    continue
                successful += 1
                used = {s.tool for s in runs[i].steps} & gone
                if used:
                    impossible.append({"seed": seed, "fold": fold, "run": runs[i].run_id,
                                       "evicted_tools_used": sorted(used)})  # fmt: skip
    evicted = [len(v) for v in replayed.evicted.values()]
    return {
        "successful_runs": successful,
        "made_impossible": len(impossible),
        "examples": impossible[:10],
        "tools_evicted_per_fold": {"min": min(evicted, default=0), "max": max(evicted, default=0)},
    }


def _replay_run(
    out: Replay, system: Any, where: tuple[int, int, int], run: Run, seen: set[tuple[str, str]]
) -> None:
    before: list[Step] = []
    for j, step in enumerate(run.steps):
        call = Step(step.tool, step.arguments)
        if isinstance(system, CallMemory):
            # a runtime indexes a step when its result arrives, not before the next call
            start = time.perf_counter()
            system.trace_for(before)
            out.index_ms[system.name].append((time.perf_counter() - start) * 1000.0)
        start = time.perf_counter()
        check = system.check(before, call, run.told_before[j])
        out.timings_ms[system.name].append((time.perf_counter() - start) * 1000.0)
        hinted = (
            system.hint(before, step.tool, run.told_before[j])
            if isinstance(system, CallMemory) and system.name == "call_memory"
            else None
        )
        failed = step.error is not None
        repeat = failed and (step.tool, signature_of(step.error or "")) in seen
        out.calls[system.name].append(Call(*where, j, failed, repeat, run.succeeded, check, hinted))
        before.append(step)


def _trained(
    seed: int, fold: int, systems: Sequence[Any], n_train: int, n_held: int
) -> dict[str, Any]:
    row: dict[str, Any] = {"seed": seed, "fold": fold, "train_runs": n_train, "held_runs": n_held}
    for system in systems:
        if isinstance(system, CallMemory) and system.name == "call_memory":
            start = time.perf_counter()
            conditions = system.memory.conditions()  # derived now, from every group
            derive_ms = (time.perf_counter() - start) * 1000.0
            level = system.thresholds.level
            row[system.name] = {
                "derive_all_conditions_ms": round(derive_ms, 2),
                "conditions": len(conditions),
                "block_level": sum(level(c) == "block" for c in conditions),
                "warn_level": sum(level(c) == "warn" for c in conditions),
                "contradicted": sum(c.contradictions > 0 for c in conditions),
                "by_family": {
                    f: dict(Counter(level(c) or "none" for c in conditions if c.family == f))
                    for f in FAMILIES
                },
                "memory": system.memory.summary(),
            }
        elif hasattr(system, "__len__"):
            row[system.name] = {"constraints": len(system)}
    return row


# ---- metrics -----------------------------------------------------------------------------
def metrics(calls: Sequence[Call], decisions: Sequence[Decision]) -> dict[str, Any]:
    """The figures of one system over ``calls`` (``decisions`` aligned with them)."""
    pairs = list(zip(calls, decisions, strict=True))
    repeats = [d for c, d in pairs if c.repeat]
    failures = [d for c, d in pairs if c.failed]
    blocked = [c for c, d in pairs if d[0] == "block"]
    ok_calls = [(c, d) for c, d in pairs if c.run_succeeded]
    ok_runs = {(c.seed, c.run) for c, _ in ok_calls}
    wrong_runs = {(c.seed, c.run) for c, d in ok_calls if d[0] == "block" and not c.failed}
    any_block_runs = {(c.seed, c.run) for c, d in ok_calls if d[0] == "block"}
    warned = sum(d[0] == "warn" for _, d in ok_calls)
    contradicted = {i for c, d in pairs if d[0] == "block" and not c.failed for i in d[1]}
    really_failed = sum(c.failed for c in blocked)
    return {
        "calls": len(calls),
        "failures": len(failures),
        "failures_caught": sum(d[0] != "allow" for d in failures),
        "repeats": len(repeats),
        "repeats_caught": sum(d[0] != "allow" for d in repeats),
        "repeats_blocked": sum(d[0] == "block" for d in repeats),
        "catch_rate": _share(sum(d[0] != "allow" for d in repeats), len(repeats)),
        "block_catch_rate": _share(sum(d[0] == "block" for d in repeats), len(repeats)),
        "blocks": len(blocked),
        "blocks_failed": really_failed,
        "block_precision": _share(really_failed, len(blocked)),
        "successful_runs": len(ok_runs),
        "successful_runs_wrongly_blocked": len(wrong_runs),
        "successful_runs_wrongly_blocked_share": _share(len(wrong_runs), len(ok_runs)),
        "successful_runs_any_block": len(any_block_runs),
        "successful_runs_any_block_share": _share(len(any_block_runs), len(ok_runs)),
        "calls_in_successful_runs": len(ok_calls),
        "warned_calls_in_successful_runs": warned,
        "warned_share_in_successful_runs": _share(warned, len(ok_calls)),
        "constraints_contradicted_on_held_out": len(contradicted),
    }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


HEADLINE = (
    "repeats",
    "catch_rate",
    "block_catch_rate",
    "block_precision",
    "blocks",
    "successful_runs_wrongly_blocked_share",
    "warned_share_in_successful_runs",
)


def headline(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in HEADLINE}


def family_figures(calls: Sequence[Call], thresholds: Thresholds) -> dict[str, dict[str, int]]:
    """Per family: the repeats its conditions flag and block, the failing calls it blocks,
    and its blocks and warnings on calls that did not fail."""
    out: dict[str, dict[str, int]] = {}
    for family in FAMILIES:
        row: Counter[str] = Counter()
        for call in calls:
            levels = {thresholds.level(c) for c in call.check.holding if c.family == family}
            top = "block" if "block" in levels else "warn" if "warn" in levels else None
            if top is None:
                continue
            if call.repeat:
                row["repeats_flagged"] += 1
                row["repeats_blocked"] += top == "block"
            if call.failed:
                row["failures_blocked"] += top == "block"
            else:
                row[f"{top}s_on_ok_calls"] += 1
                row[f"{top}s_on_ok_calls_in_successful_runs"] += call.run_succeeded
        out[family] = {k: row[k] for k in FAMILY_KEYS}
    return out


FAMILY_KEYS = (
    "repeats_flagged",
    "repeats_blocked",
    "failures_blocked",
    "blocks_on_ok_calls",
    "warns_on_ok_calls",
    "blocks_on_ok_calls_in_successful_runs",
    "warns_on_ok_calls_in_successful_runs",
)


def without_family(calls: Sequence[Call], family: str, thresholds: Thresholds) -> dict[str, Any]:
    decisions = [
        decide([c for c in call.check.holding if c.family != family], thresholds) for call in calls
    ]
    return headline(metrics(calls, decisions))


SWEEP: tuple[Thresholds, ...] = tuple(
    Thresholds(s, c, 0.0, w) for s in (1, 2, 3) for c in (0, 1) for w in (0.34, 0.5, 0.67, 1.01)
)
"""(min support to block, max contradictions to block, -, min confidence to warn)."""


def hint_figures(calls: Sequence[Call]) -> dict[str, Any]:
    """The lookup hints: for the tool about to be called, before its arguments exist,
    whether a condition may apply (any level; block level only)."""
    repeats = [c for c in calls if c.repeat]
    ok = [c for c in calls if c.run_succeeded and not c.failed]
    out: dict[str, Any] = {}
    for name, levels in (("any", ("warn", "block")), ("block_level", ("block",))):
        hinted_repeats = sum(c.hinted in levels for c in repeats)
        out[name] = {
            "repeats_hinted": hinted_repeats,
            "repeats_hinted_share": _share(hinted_repeats, len(repeats)),
            "ok_calls_in_successful_runs_hinted_share": _share(
                sum(c.hinted in levels for c in ok), len(ok)
            ),
        }
    return out


def misses(corpus: Corpus, calls: Sequence[Call]) -> list[dict[str, Any]]:
    """Real repeats by (tool, signature): how many, how many flagged, how many blocked."""
    rows: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for call in calls:
        if call.repeat:
            step = corpus.runs[call.run].steps[call.step]
            row = rows[(step.tool, signature_of(step.error or ""))]
            row["repeats"] += 1
            row["caught"] += call.check.decision != "allow"
            row["blocked"] += call.check.decision == "block"
    return [
        {"tool": tool, "signature": sig, **{k: row[k] for k in ("repeats", "caught", "blocked")}}
        for (tool, sig), row in sorted(rows.items(), key=lambda kv: -kv[1]["repeats"])
    ]


def assess_targets(
    m: Mapping[str, Any], name: str = "call_memory", impossible: int | None = None
) -> list[dict[str, Any]]:
    catch, precision = m["catch_rate"], m["block_precision"]
    wrong, warned = m["successful_runs_wrongly_blocked_share"], m["warned_share_in_successful_runs"]
    anyblock = m["successful_runs_any_block_share"]
    out = [
        target(f"{name}: real repeats caught before the call (warn or block)", ">= 0.5",
               catch, catch is not None and catch >= 0.5),
        target(f"{name}: block precision", ">= 0.8", precision,
               precision is not None and precision >= 0.8),
        target(f"{name}: successful runs with a wrongly blocked call", "<= 0.01", wrong,
               wrong is not None and wrong <= 0.01),
        target(f"{name}: successful runs with any blocked call", "<= 0.01", anyblock,
               anyblock is not None and anyblock <= 0.01,
               "includes blocks of calls that really failed in a run that then recovered"),
        target(f"{name}: warned calls in successful runs", "<= 0.05", warned,
               warned is not None and warned <= 0.05),
    ]  # fmt: skip
    if impossible is not None:
        out.append(
            target(f"{name}: successful runs made impossible by eviction", "= 0", impossible,
                   impossible == 0)
        )  # fmt: skip
    return out


# ---- timing ------------------------------------------------------------------------------
def synthetic_timing(corpus: Corpus, repeat: int) -> dict[str, Any]:
    """A 30-step session checked against 100 conditions of one tool: the session is the
    longest retail run's first 30 steps (repeated if shorter); the conditions are those
    learned from every run for the tool with the most, padded with copies that test
    other values.  Baseline in the same run: the sequence memory's (uncached) check of
    the same plan."""
    memory = FailureMemory()
    chains = SequenceMemory()
    for run in corpus.runs:
        memory.add_session(run.session())
        chains.learn(run.session())
    tool = Counter(c.tool for c in memory.conditions()).most_common(1)[0][0]
    learned = memory.conditions(tool)
    conditions = list(learned)
    n = 0
    while len(conditions) < 100:
        base = learned[n % len(learned)]
        if base.predicate.op == "==":
            base = replace(base, predicate=replace(base.predicate, value=f"synthetic-{n}"))
        conditions.append(base)
        n += 1
    conditions = conditions[:100]
    longest = max((r for r in corpus.runs if r.domain == "retail"), key=lambda r: len(r.steps))
    steps = (list(longest.steps) * 30)[:30]
    example = next(s for r in corpus.runs for s in r.steps if s.tool == tool)
    arguments = dict(example.arguments)
    told = longest.told_before[-1] if longest.told_before else None
    trace = Trace(steps)
    matcher = chains.matcher()
    plan = [s.tool for s in steps] + [tool]
    gc.collect()
    samples = interleaved(
        {
            "call_memory_incremental": lambda: assess(conditions, trace, tool, arguments, told),
            "call_memory_from_scratch": lambda: assess(conditions, steps, tool, arguments, told),
            "sequence_memory": lambda: matcher.check(plan),
        },
        repeat=repeat,
    )
    stats = {name: summary(s) for name, s in samples.items()}
    base = stats["sequence_memory"]["p50_ms"]
    return {
        "tool": tool,
        "steps": len(steps),
        "conditions": len(conditions),
        "timings": stats,
        "incremental_vs_sequence_p50": ratio(stats["call_memory_incremental"]["p50_ms"], base),
        "from_scratch_vs_sequence_p50": ratio(stats["call_memory_from_scratch"]["p50_ms"], base),
    }


# ---- the run -----------------------------------------------------------------------------
def run(
    quick: bool,
    seed: int = 7,
    dataset: Path = DEFAULT_DATASETS,
    folds: int = FOLDS,
    seeds: int | None = None,
) -> dict[str, Any]:
    started = time.perf_counter()
    corpus = load(dataset)
    seed_list = [seed + i for i in range(seeds or (QUICK_SEEDS if quick else FULL_SEEDS))]
    progress(f"failures: {len(corpus.runs)} runs, {folds} folds, seeds {seed_list}")
    result = replay(corpus, seed_list, folds, LEARN_SWEEP)
    defaults = Thresholds()
    systems: dict[str, Any] = {}
    per_fold: dict[str, list[dict[str, Any]]] = {}
    learn_sweep: dict[str, Any] = {}
    for name, calls in result.calls.items():
        if name in LEARN_SWEEP:
            decisions = [(c.check.decision, c.check.constraints) for c in calls]
            learn_sweep[name] = headline(metrics(calls, decisions))
            continue
        decisions = [(c.check.decision, c.check.constraints) for c in calls]
        systems[name] = metrics(calls, decisions)
        per_fold[name] = []
        for s in seed_list:
            for f in range(folds):
                part = [
                    (c, d)
                    for c, d in zip(calls, decisions, strict=True)
                    if (c.seed, c.fold) == (s, f)
                ]
                m = metrics([c for c, _ in part], [d for _, d in part])
                per_fold[name].append({"seed": s, "fold": f, **headline(m)})
    mine = result.calls["call_memory"]
    sweep = []
    for t in SWEEP:
        decisions = [decide(c.check.holding, t) for c in mine]
        sweep.append({"thresholds": _thresholds(t), **headline(metrics(mine, decisions))})
    impossible = made_impossible(corpus, result, seed_list, folds)
    replay_timing = {name: summary(ms) for name, ms in result.timings_ms.items()}
    synthetic = synthetic_timing(corpus, repeat=50 if quick else 300)
    incremental = synthetic["timings"]["call_memory_incremental"]["p50_ms"]
    return {
        "benchmark": "failures",
        "question": "repeat failures caught before the call on real agent runs, and the cost "
        "to successful runs",
        "machine": machine(),
        "params": {
            "dataset": str(dataset),
            "folds": folds,
            "seeds": seed_list,
            "thresholds": _thresholds(defaults),
        },
        "corpus": corpus.notes,
        "systems": systems,
        "per_fold": per_fold,
        "families": family_figures(mine, defaults),
        "without_family": {f: without_family(mine, f, defaults) for f in FAMILIES},
        "threshold_sweep": sweep,
        "learn_sweep": {
            "call_memory (defaults)": headline(systems["call_memory"]),
            **learn_sweep,
        },
        "lookup_hints": hint_figures(mine),
        "eviction": impossible,
        "learned": result.trained,
        "misses": misses(corpus, mine),
        "timing": {
            "replay_check_ms": replay_timing,
            "index_step_ms": summary(result.index_ms["call_memory"]),
            "learn_session_ms": {name: summary(ms) for name, ms in result.learn_ms.items()},
            "derive_all_conditions_ms": summary(
                [row["call_memory"]["derive_all_conditions_ms"] for row in result.trained]
            ),
            "replay_call_memory_vs_sequence_p50": ratio(
                replay_timing["call_memory"]["p50_ms"], replay_timing["sequence_memory"]["p50_ms"]
            ),
            "synthetic": synthetic,
        },
        "targets": [
            *assess_targets(systems["sidecar"], "sidecar", impossible["made_impossible"]),
            *assess_targets(systems["call_memory"]),
            target(
                "call_memory: check of 30 steps against 100 conditions (p50, incremental)",
                "< 1 ms",
                incremental,
                incremental < 1.0,
                "wall time here; the ratio to the sequence check is under timing",
            ),
        ],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _thresholds(t: Thresholds) -> dict[str, Any]:
    return {
        "min_support_block": t.min_support_block,
        "max_contradictions_block": t.max_contradictions_block,
        "min_confidence_block": t.min_confidence_block,
        "min_confidence_warn": t.min_confidence_warn,
    }


# ---- output ------------------------------------------------------------------------------
SYSTEM_KEYS = (
    "repeats",
    "repeats_caught",
    "repeats_blocked",
    "blocks",
    "block_precision",
    "successful_runs",
    "successful_runs_wrongly_blocked",
    "successful_runs_any_block",
    "warned_share_in_successful_runs",
    "constraints_contradicted_on_held_out",
)


def _cell(value: Any) -> Any:
    return "-" if value is None else value


def markdown(result: dict[str, Any]) -> str:
    systems = [[n, *(_cell(m[k]) for k in SYSTEM_KEYS)] for n, m in result["systems"].items()]
    folds = [
        [r["seed"], r["fold"], *(_cell(r[k]) for k in HEADLINE)]
        for r in result["per_fold"]["call_memory"]
    ]
    families = [[f, *(v[k] for k in FAMILY_KEYS)] for f, v in result["families"].items()]
    without = [[f, *(_cell(x) for x in v.values())] for f, v in result["without_family"].items()]
    sweep = [
        [
            t["thresholds"]["min_support_block"],
            t["thresholds"]["max_contradictions_block"],
            t["thresholds"]["min_confidence_warn"],
            *(_cell(t[k]) for k in HEADLINE[1:]),
        ]
        for t in result["threshold_sweep"]
    ]
    learned: dict[str, Counter[str]] = defaultdict(Counter)
    for row in result["learned"]:
        for family, levels in row["call_memory"]["by_family"].items():
            learned[family].update(levels)
    n_folds = len(result["learned"])
    learned_rows = [
        [f, *(round(learned[f][k] / n_folds, 1) for k in ("block", "warn", "none"))]
        for f in FAMILIES
    ]
    timing = result["timing"]
    synthetic = timing["synthetic"]
    hints = result["lookup_hints"]
    miss_rows = [
        [m["tool"], m["signature"], m["repeats"], m["caught"], m["blocked"]]
        for m in result["misses"]
    ]
    return "\n".join(
        [
            f"## Failure memory on τ² runs ({result['params']['folds']} folds by task, "
            f"seeds {result['params']['seeds']})",
            "",
            "Pooled over seeds and folds:",
            "",
            md_table(["system", *SYSTEM_KEYS], systems),
            "",
            "### call_memory per (seed, fold)",
            "",
            md_table(["seed", "fold", *HEADLINE], folds),
            "",
            "### Families (default thresholds)",
            "",
            md_table(["family", *FAMILY_KEYS], families),
            "",
            "Each family left out:",
            "",
            md_table(["left out", *HEADLINE], without),
            "",
            "Learned conditions per fold, by family and level (mean):",
            "",
            md_table(["family", "block", "warn", "kept, neither"], learned_rows),
            "",
            "### Threshold sweep",
            "",
            md_table(["min support", "max contradictions", "min conf warn", *HEADLINE[1:]], sweep),
            "",
            "Learner variants (distinct values a bound-object field may show and still be a "
            "state; sessions acting on one object counted once or each):",
            "",
            md_table(
                ["variant", *HEADLINE],
                [[n, *(_cell(v[k]) for k in HEADLINE)] for n, v in result["learn_sweep"].items()],
            ),
            "",
            "### Real repeats by (tool, signature)",
            "",
            md_table(["tool", "signature", "repeats", "caught", "blocked"], miss_rows),
            "",
            "Lookup hints (`may_apply` for the tool about to be called, before its arguments):",
            "",
            md_table(
                ["hint level", "repeats hinted", "share of repeats", "share of ok calls, ok runs"],
                [
                    [level, h["repeats_hinted"], _cell(h["repeats_hinted_share"]),
                     _cell(h["ok_calls_in_successful_runs_hinted_share"])]
                    for level, h in hints.items()
                ],
            ),
            "",
            f"Check time: replay p50 {timing['replay_check_ms']['call_memory']['p50_ms']} ms, "
            f"p99 {timing['replay_check_ms']['call_memory']['p99_ms']} ms "
            f"({timing['replay_call_memory_vs_sequence_p50']}x the sequence check at p50); "
            f"indexing each step into the run's trace as it completes: p50 "
            f"{timing['index_step_ms']['p50_ms']} ms, p99 {timing['index_step_ms']['p99_ms']} ms; "
            f"{synthetic['steps']} steps x {synthetic['conditions']} conditions: "
            f"{synthetic['timings']['call_memory_incremental']['p50_ms']} ms incremental, "
            f"{synthetic['timings']['call_memory_from_scratch']['p50_ms']} ms from scratch "
            f"({synthetic['incremental_vs_sequence_p50']}x / "
            f"{synthetic['from_scratch_vs_sequence_p50']}x the sequence check). Taking in a "
            f"session: p50 {timing['learn_session_ms']['call_memory']['p50_ms']} ms "
            f"(sequence memory {timing['learn_session_ms']['sequence_memory']['p50_ms']} ms); "
            f"deriving every condition after training: p50 "
            f"{timing['derive_all_conditions_ms']['p50_ms']} ms.",
            "",
            md_targets(result["targets"]),
            "",
        ]
    )  # fmt: skip


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    names = list(result["systems"])
    m = result["systems"]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.2
    series = (
        ("repeats caught", "catch_rate"),
        ("block precision", "block_precision"),
        ("ok runs wrongly blocked", "successful_runs_wrongly_blocked_share"),
    )
    for i, (label, key) in enumerate(series):
        xs = [j + (i - 1) * width for j in range(len(names))]
        ax.bar(xs, [m[n][key] or 0.0 for n in names], width, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1.05)
    ax.set_title("Failure memories on held-out τ² runs")
    ax.legend()
    return [save_figure(plt, fig, out_dir / "failures.png")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="quick", action="store_true", default=True)
    size.add_argument("--full", dest="quick", action="store_false")
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--folds", type=int, default=FOLDS)
    parser.add_argument("--seeds", type=int, help=f"default {QUICK_SEEDS} quick, {FULL_SEEDS} full")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--markdown", type=Path, help="write the Markdown here")
    args = parser.parse_args(argv)
    dataset = args.dataset.resolve()
    lost = missing_files(dataset)
    if lost:
        raise SystemExit(
            f"bench_failures: {', '.join(lost)} missing under {dataset}; use --dataset"
        )
    result = run(args.quick, args.seed, dataset, args.folds, args.seeds)
    words = sys.argv[1:] if argv is None else argv
    result["command"] = " ".join(["python -m benchmarks.bench_failures", *words])
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(result))
    emit(result, args.out)


if __name__ == "__main__":
    main()
