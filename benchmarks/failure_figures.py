"""The failures benchmark's figures from its replays: pooled and fold by fold, by domain and
with each domain left out, by family and threshold, what the eviction made impossible,
the timing of the checks, and the targets."""

from __future__ import annotations

import gc
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.failure_domains import (
    Split,
)
from benchmarks.failure_metrics import (
    Call,
    assess_targets,
    by_domain,
    decisions_of,
    family_figures,
    headline,
    hint_figures,
    metrics,
    misses,
    unblocked,
    warned_by_rule,
    without_family,
    wrongly_blocked,
)
from benchmarks.failure_systems import (
    SequenceMemory,
    decide,
)
from benchmarks.harness.results import target
from benchmarks.harness.timing import interleaved, ratio, summary
from benchmarks.tau2 import Corpus
from sidecar.memory import FAMILIES, FailureMemory, LearnParams, Thresholds, Trace, assess

SAME_SITUATION = "call_memory[independence=session]"


SWEEP: tuple[Thresholds, ...] = tuple(
    Thresholds(s, c, 0.0, w) for s in (1, 2, 3) for c in (0, 1) for w in (0.34, 0.5, 0.67, 1.01)
)
"""(min support to block, max contradictions to block, -, min confidence to warn)."""


# ---- timing ------------------------------------------------------------------------------
SYNTHETIC_SIZES = (100, 1000)


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
    splits: list[Split] = field(default_factory=list)


def made_impossible(corpus: Corpus, replayed: Replay, domain: str | None = None) -> dict[str, Any]:
    """Held-out successful runs (of ``domain``, or of any) that call a tool the sidecar's
    eviction removed after training on the other folds: tasks the eviction would have
    made impossible."""
    runs = corpus.runs
    impossible: list[dict[str, Any]] = []
    successful = 0
    for split in replayed.splits:
        gone = replayed.evicted.get((split.seed, split.fold), set())
        for i in split.test:
            if not runs[i].succeeded or domain not in (None, runs[i].domain):
                continue
            successful += 1
            used = {s.tool for s in runs[i].steps} & gone
            if used:
                impossible.append({"seed": split.seed, "fold": split.fold, "run": runs[i].run_id,
                                   "evicted_tools_used": sorted(used)})  # fmt: skip
    evicted = [len(v) for v in replayed.evicted.values()]
    return {
        "successful_runs": successful,
        "made_impossible": len(impossible),
        "examples": impossible[:10],
        "tools_evicted_per_fold": {"min": min(evicted, default=0), "max": max(evicted, default=0)},
    }


# ---- per domain, left out ----------------------------------------------------------------
def domain_figures(
    corpus: Corpus, replayed: Replay, domains: Sequence[str], names: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Per domain, the named systems' figures on that domain's held-out calls."""
    out: dict[str, dict[str, Any]] = {}
    for domain in domains:
        out[domain] = {}
        for name in names:
            calls = by_domain(corpus, replayed.calls.get(name, []), domain)
            out[domain][name] = metrics(calls, decisions_of(calls))
    return out


def lodo_figures(
    corpus: Corpus, replayed: Replay, domains: Sequence[str], thresholds: Thresholds
) -> dict[str, Any]:
    """Leave one domain out: per held-out domain (each scored on its own test folds
    only) and pooled over them, every system's figures; for ``call_memory`` also the
    families, the per-fold figures and the repeats by signature."""
    names = list(replayed.calls)
    systems = {
        name: {
            "pooled": metrics(calls, decisions_of(calls)),
            "by_domain": {
                d: metrics(part, decisions_of(part))
                for d in domains
                for part in [by_domain(corpus, calls, d)]
            },
        }
        for name, calls in replayed.calls.items()
    }
    mine = replayed.calls["call_memory"]
    per_fold = []
    for split in replayed.splits:
        test = set(split.test)
        part = [c for c in mine if (c.seed, c.fold) == (split.seed, split.fold) and c.run in test]
        per_fold.append({"held_out": split.held_out, "seed": split.seed, "fold": split.fold,
                         **headline(metrics(part, decisions_of(part)))})  # fmt: skip
    learned = [
        {k: row[k] for k in ("held_out", "seed", "fold", "train_runs", "held_runs")}
        | {k: row["call_memory"][k] for k in ("conditions", "block_level", "warn_level")}
        for row in replayed.trained
    ]
    return {
        "protocol": "for each domain D: D's tasks dealt into folds; each fold scored with "
        "systems that learned every other domain's runs and D's other folds; library "
        "defaults (thresholds, families) throughout",
        "systems_replayed": names,
        "systems": systems,
        "families": {d: family_figures(by_domain(corpus, mine, d), thresholds) for d in domains},
        "per_fold": per_fold,
        "learned": learned,
        "misses": misses(corpus, mine),
        "not_blocked": unblocked(corpus, mine, thresholds),
        "wrongly_blocked": wrongly_blocked(corpus, mine, thresholds),
        "warned_by_rule": {
            d: warned_by_rule(by_domain(corpus, mine, d), thresholds) for d in domains
        },
    }


def situation_figures(
    corpus: Corpus,
    pooled: Replay,
    lodo: Replay | None,
    domains: Sequence[str],
    note: str | None,
) -> dict[str, Any]:
    """The same-situation ablation: the default learner beside the one that counts
    repeated runs of one task as independent, pooled and per domain, in both protocols."""
    out: dict[str, Any] = {"available": note is None, "variant": SAME_SITUATION}
    if note is not None:
        return out | {"note": note}
    for label, replayed in (("pooled_folds", pooled), ("leave_one_domain_out", lodo)):
        if replayed is None:
            continue
        rows: dict[str, Any] = {}
        for name in ("call_memory", SAME_SITUATION):
            calls = replayed.calls[name]
            rows[name] = {"all": headline(metrics(calls, decisions_of(calls)))}
            for d in domains:
                part = by_domain(corpus, calls, d)
                rows[name][d] = headline(metrics(part, decisions_of(part)))
        out[label] = rows
    return out


def synthetic_timing(corpus: Corpus, repeat: int) -> dict[str, Any]:
    """A 30-step session checked against 100 and 1,000 conditions of one tool: the
    session is the longest retail run's first 30 steps (the longest run's when retail is
    not selected; repeated if shorter); the conditions are those learned from every run
    for the tool with the most, padded with copies that test other values.  Baseline in
    the same run: the sequence memory's (uncached) check of the same plan."""
    memory = FailureMemory()
    chains = SequenceMemory()
    for run in corpus.runs:
        memory.add_session(run.session())
        chains.learn(run.session())
    tool = Counter(c.tool for c in memory.conditions()).most_common(1)[0][0]
    learned = memory.conditions(tool)
    pool = [r for r in corpus.runs if r.domain == "retail"] or corpus.runs
    longest = max(pool, key=lambda r: len(r.steps))
    steps = (list(longest.steps) * 30)[:30]
    example = next(s for r in corpus.runs for s in r.steps if s.tool == tool)
    arguments = dict(example.arguments)
    told = longest.told_before[-1] if longest.told_before else None
    trace = Trace(steps)
    matcher = chains.matcher()
    plan = [s.tool for s in steps] + [tool]
    inputs = (arguments, told)
    out: dict[str, Any] = {"tool": tool, "steps": len(steps), "learned": len(learned)}
    for size in SYNTHETIC_SIZES:
        conditions = _padded(learned, size)
        gc.collect()
        samples = interleaved(
            {
                "call_memory_incremental": partial(assess, conditions, trace, tool, *inputs),
                "call_memory_from_scratch": partial(assess, conditions, steps, tool, *inputs),
                "sequence_memory": partial(matcher.check, plan),
            },
            repeat=repeat,
        )
        stats = {name: summary(s) for name, s in samples.items()}
        base = stats["sequence_memory"]["p50_ms"]
        out[str(size)] = {
            "conditions": len(conditions),
            "timings": stats,
            "incremental_vs_sequence_p50": ratio(stats["call_memory_incremental"]["p50_ms"], base),
            "from_scratch_vs_sequence_p50": ratio(
                stats["call_memory_from_scratch"]["p50_ms"], base
            ),
        }
    return out


def _padded(learned: Sequence[Any], size: int) -> list[Any]:
    conditions = list(learned)
    n = 0
    while len(conditions) < size:
        base = learned[n % len(learned)]
        if base.predicate.op == "==":
            base = replace(base, predicate=replace(base.predicate, value=f"synthetic-{n}"))
        conditions.append(base)
        n += 1
    return conditions[:size]


def run_params(
    dataset: Path, chosen: Sequence[str], folds: int, seeds: list[int]
) -> dict[str, Any]:
    return {
        "dataset": str(dataset),
        "domains": list(chosen),
        "folds": folds,
        "seeds": seeds,
        "thresholds": _thresholds(Thresholds()),
    }


def pooled_figures(
    calls_by_system: Mapping[str, list[Any]],
    variants: Mapping[str, LearnParams],
    seed_list: Sequence[int],
    folds: int,
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Each system's figures over the pooled folds, and fold by fold; the learning
    variants' headline figures."""
    systems: dict[str, Any] = {}
    per_fold: dict[str, list[dict[str, Any]]] = {}
    learn_sweep: dict[str, Any] = {}
    for name, calls in calls_by_system.items():
        decisions = decisions_of(calls)
        if name in variants:
            learn_sweep[name] = headline(metrics(calls, decisions))
            continue
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
    return systems, per_fold, learn_sweep


def memory_figures(
    corpus: Corpus,
    result: Replay,
    systems: dict[str, Any],
    learn_sweep: dict[str, Any],
    impossible: dict[str, Any],
    impossible_by_domain: dict[str, Any],
    lodo: dict[str, Any] | None,
) -> dict[str, Any]:
    """The call-level memory's figures: by family, by threshold and learning variant,
    the hints, the eviction it allows, what it learned, missed and wrongly blocked, and
    the rules behind its warnings (pooled folds; each domain left out)."""
    mine, defaults = result.calls["call_memory"], Thresholds()
    return {
        "families": family_figures(mine, defaults),
        "without_family": {f: without_family(mine, f, defaults) for f in FAMILIES},
        "threshold_sweep": _threshold_sweep(mine),
        "learn_sweep": {
            "call_memory (defaults)": headline(systems["call_memory"]),
            **learn_sweep,
        },
        "lookup_hints": hint_figures(mine),
        "eviction": impossible,
        "eviction_by_domain": impossible_by_domain,
        "learned": result.trained,
        "misses": misses(corpus, mine),
        "not_blocked": {
            "pooled_folds": unblocked(corpus, mine, defaults),
            **({"leave_one_domain_out": lodo["not_blocked"]} if lodo else {}),
        },
        "wrongly_blocked": {
            "pooled_folds": wrongly_blocked(corpus, mine, defaults),
            **({"leave_one_domain_out": lodo["wrongly_blocked"]} if lodo else {}),
        },
        "warned_by_rule": {
            "pooled_folds": warned_by_rule(mine, defaults),
            **({"leave_one_domain_out": lodo["warned_by_rule"]} if lodo else {}),
        },
    }


def pooled_targets(systems: dict[str, Any], impossible: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *assess_targets(
            systems["sidecar"],
            "sidecar, pooled folds",
            impossible["made_impossible"],
            any_block=True,
        ),
        *assess_targets(systems["call_memory"], "call_memory, pooled folds", any_block=True),
    ]


def _threshold_sweep(mine: list[Any]) -> list[dict[str, Any]]:
    sweep = []
    for t in SWEEP:
        decisions = [decide(c.check.holding, t, c.check.read_only) for c in mine]
        sweep.append({"thresholds": _thresholds(t), **headline(metrics(mine, decisions))})
    return sweep


def domain_targets(
    chosen: Sequence[str],
    lodo: dict[str, Any] | None,
    per_domain: dict[str, Any],
    impossible_by_domain: dict[str, Any],
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for d in chosen:
        if lodo is not None:
            figures, label = lodo["systems"]["call_memory"]["by_domain"][d], f"{d} left out"
        else:
            figures, label = per_domain[d]["call_memory"], f"{d}, pooled folds"
        out += assess_targets(
            figures, f"call_memory, {label}", impossible_by_domain[d]["made_impossible"]
        )
    if lodo is not None:
        out += assess_targets(
            lodo["systems"]["call_memory"]["pooled"], "call_memory, every domain left out"
        )
    return out


def timing_targets(synthetic: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        target(
            f"call_memory: check of 30 steps against {size:,} conditions (p50, incremental)",
            goal,
            p50,
            p50 <= limit,
            "wall time here; the ratio to the sequence check is under timing",
        )
        for size, goal, limit in ((100, "<= 1 ms", 1.0), (1000, "<= 2 ms", 2.0))
        for p50 in [synthetic[str(size)]["timings"]["call_memory_incremental"]["p50_ms"]]
    ]


def timing_figures(result: Replay, synthetic: dict[str, Any]) -> dict[str, Any]:
    replay_timing = {name: summary(ms) for name, ms in result.timings_ms.items()}
    return {
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
    }


def _thresholds(t: Thresholds) -> dict[str, Any]:
    return {
        "min_support_block": t.min_support_block,
        "max_contradictions_block": t.max_contradictions_block,
        "min_confidence_block": t.min_confidence_block,
        "min_confidence_warn": t.min_confidence_warn,
    }
