"""Question: on agent runs from several domains, how many repeat failures does a
failure memory catch before the call, what does it cost successful runs, and does it
hold on a domain whose figures were not used to choose it?

Data (:mod:`benchmarks.failure_domains`): the τ²-bench retail and telecom runs of
``tau2-trajectories`` (:mod:`benchmarks.tau2`) and the ``bfcl`` domain, sessions of
BFCL's TravelAPI, TradingBot, GorillaFileSystem and MathAPI simulators (ground truths
and seeded mutations the simulator refuses, :mod:`benchmarks.bfcl`); ``--domains``
picks some (``--domains retail`` to choose defaults on retail alone).

Protocols, per seed, all split by task (all runs of a task on one side):

- *pooled folds*: the tasks of every selected domain are shuffled and dealt into
  ``--folds`` folds; for each fold, a fresh system learns every other fold's runs one
  at a time (in a seeded order), then each held-out run is replayed call by call and
  the system is asked before every call, with the steps before it and what the agent
  had been told so far.  Figures pooled, and per domain (the held-out calls of each
  domain's runs);
- *leave one domain out* (two or more domains): for each domain D, D's tasks are dealt
  into folds; a fresh ``call_memory`` (and ``sequence_memory``, the baseline) learns
  every run of the other domains plus D's other folds and is scored on D's held-out
  fold.  Thresholds and families are the library's defaults: nothing is chosen on D;
- *same-situation ablation*: the learner with ``LearnParams(independence="session")``
  (repeated runs of one task counted as independent evidence) beside the default,
  in both protocols, when ``LearnParams`` has that field (the output says when not).

A *real repeat failure* is a held-out failing call whose (tool, normalized signature)
occurred in training.

Systems (:mod:`benchmarks.failure_systems`): ``plain_index`` (always allows),
``seed_prefix`` (the seed's prefix check), ``sequence_memory`` (today's fatal
sequences), ``call_memory`` (:mod:`sidecar.memory` with its default thresholds) and
``sidecar`` (the same memory through the public library, with eviction).

Reported per system, pooled over seeds and folds and per (seed, fold): repeats caught
before the call (warn or block; block only), block precision (blocked calls that really
failed), successful runs (reward 1) with a wrongly blocked call / with any blocked call,
warned calls in successful runs as a share of their calls, and constraints contradicted
on held-out calls; per domain and left out, the same for ``call_memory``.  For
``call_memory`` also: each family's catches and costs (pooled, and per domain left
out), each family left out in turn, the decision thresholds swept, what the learned
conditions look like per family, the lookup hints (``may_apply``), and the repeats it
misses.  Timing: ``call_memory``'s check against ``sequence_memory``'s in the same
replay, and a 30-step session checked against 100 and 1,000 conditions of one tool.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_DATASETS
from benchmarks.failure_domains import (
    DOMAINS,
    Split,
    leave_one_domain_out,
    load_domains,
    missing,
    parse_domains,
    pooled_splits,
)
from benchmarks.failure_metrics import (
    FAMILY_KEYS,
    GOAL_NAMES,
    GOALS,
    HEADLINE,
    Call,
    assess_targets,
    by_domain,
    decisions_of,
    family_figures,
    headline,
    hint_figures,
    met,
    metrics,
    misses,
    unblocked,
    without_family,
    wrongly_blocked,
)
from benchmarks.failure_systems import (
    CallMemory,
    SequenceMemory,
    decide,
    learned_failures,
    make_systems,
)
from benchmarks.harness.progress import progress
from benchmarks.harness.results import emit, machine, target
from benchmarks.harness.timing import interleaved, ratio, summary
from benchmarks.prequential import CHECKPOINTS, first_block_targets, replay_all
from benchmarks.prequential import figures as stream_figures
from benchmarks.tau2 import Corpus, Run
from sidecar.memory import FAMILIES, FailureMemory, LearnParams, Step, Thresholds, Trace, assess
from sidecar.memory import normalize_signature as signature_of

__all__ = ["FAMILY_KEYS", "GOALS", "GOAL_NAMES", "HEADLINE", "Call", "hint_figures", "met",
           "metrics"]  # fmt: skip
FOLDS = 5
QUICK_SEEDS = 1
FULL_SEEDS = 5


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


def same_situation_variants() -> tuple[dict[str, LearnParams], str | None]:
    """The learner variant that counts repeated runs of one task as independent
    evidence, when :class:`LearnParams` has the field for it; else a note saying so."""
    if "independence" in {f.name for f in fields(LearnParams)}:
        return {SAME_SITUATION: LearnParams(**{"independence": "session"})}, None
    return {}, (
        "LearnParams has no field 'independence': the same-situation ablation is not run "
        "(this learner counts each session, except that sessions showing one bound object "
        "count once: count_objects_once)"
    )


SAME_SITUATION = "call_memory[independence=session]"


def replay(
    corpus: Corpus, seeds: Sequence[int], k: int, variants: Mapping[str, LearnParams] | None = None
) -> Replay:
    """Pooled folds over every run of ``corpus``, with every system."""
    chosen = dict(variants or {})
    return replay_splits(
        corpus, pooled_splits(corpus.runs, k, seeds), lambda: make_systems(chosen, corpus.tools)
    )


def lodo_systems(variants: Mapping[str, LearnParams]) -> list[Any]:
    """What the leave-one-domain-out replay asks: the call memory at its defaults (and
    its variants), and the sequence memory as the baseline."""
    extra = [CallMemory(params=p, name=n) for n, p in variants.items()]
    return [SequenceMemory(), CallMemory(), *extra]


def replay_splits(
    corpus: Corpus, splits: Sequence[Split], systems_for: Callable[[], list[Any]]
) -> Replay:
    """Each split's training runs learned by fresh systems, its test runs replayed."""
    out = Replay()
    runs = corpus.runs
    for split in splits:
        systems = systems_for()
        seen: set[tuple[str, str]] = set()
        for i in split.training:
            session = runs[i].session()
            for system in systems:
                start = time.perf_counter()
                system.learn(session)
                elapsed = (time.perf_counter() - start) * 1000.0
                out.learn_ms[system.name].append(elapsed)
            seen |= {(s.tool, signature_of(s.error or "")) for _, s in learned_failures(session)}
        for system in systems:
            if hasattr(system, "after_training"):
                start = time.perf_counter()
                system.after_training()
                out.learn_ms[system.name].append((time.perf_counter() - start) * 1000.0)
                out.evicted[(split.seed, split.fold)] = set(system.evicted)
        row = _trained(split.seed, split.fold, systems, len(split.training), len(split.test))
        out.trained.append({"held_out": split.held_out, **row} if split.held_out else row)
        where = f" (held out: {split.held_out})" if split.held_out else ""
        progress(
            f"failures: seed {split.seed} fold {split.fold}{where}: "
            f"{len(split.training)} runs learned"
        )
        for i in split.test:
            for system in systems:
                _replay_run(out, system, (split.seed, split.fold, i), runs[i], seen)
        for system in systems:
            if hasattr(system, "close"):
                system.close()
    out.splits = list(splits)
    return out


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


SWEEP: tuple[Thresholds, ...] = tuple(
    Thresholds(s, c, 0.0, w) for s in (1, 2, 3) for c in (0, 1) for w in (0.34, 0.5, 0.67, 1.01)
)
"""(min support to block, max contradictions to block, -, min confidence to warn)."""


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


def lodo_replay(
    corpus: Corpus,
    domains: Sequence[str],
    seeds: Sequence[int],
    k: int,
    variants: Mapping[str, LearnParams],
) -> Replay:
    splits = [s for d in domains for s in leave_one_domain_out(corpus.runs, d, k, seeds)]
    return replay_splits(corpus, splits, lambda: lodo_systems(variants))


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


# ---- timing ------------------------------------------------------------------------------
SYNTHETIC_SIZES = (100, 1000)


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


# ---- the run -----------------------------------------------------------------------------
def run(
    quick: bool,
    seed: int = 7,
    dataset: Path = DEFAULT_DATASETS,
    folds: int = FOLDS,
    seeds: int | None = None,
    domains: str | Sequence[str] | None = None,
    bfcl_runs: int | None = None,
    bfcl_seed: int = 0,
    apibank_runs: int | None = None,
    prequential: str | None = None,
) -> dict[str, Any]:
    """``prequential``: through what the runs arriving one by one are checked and
    reported: ``sidecar`` (the library: ``check_call``, then ``report``; the default of
    the full size), ``call_memory`` (the memory alone: the same learner without the
    library's persistence and redaction, ten times faster; the default of the quick
    size), or ``none`` (not replayed)."""
    started = time.perf_counter()
    chosen = parse_domains(domains)
    corpus, corpus_notes = load_domains(dataset, chosen, bfcl_seed, bfcl_runs, apibank_runs)
    seed_list = [seed + i for i in range(seeds or (QUICK_SEEDS if quick else FULL_SEEDS))]
    progress(
        f"failures: {len(corpus.runs)} runs ({', '.join(chosen)}), {folds} folds, seeds {seed_list}"
    )
    situation, situation_note = same_situation_variants()
    variants = {**LEARN_SWEEP, **situation}
    result = replay(corpus, seed_list, folds, variants)
    defaults = Thresholds()
    systems: dict[str, Any] = {}
    per_fold: dict[str, list[dict[str, Any]]] = {}
    learn_sweep: dict[str, Any] = {}
    for name, calls in result.calls.items():
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
    mine = result.calls["call_memory"]
    sweep = []
    for t in SWEEP:
        decisions = [decide(c.check.holding, t) for c in mine]
        sweep.append({"thresholds": _thresholds(t), **headline(metrics(mine, decisions))})
    impossible = made_impossible(corpus, result)
    impossible_by_domain = {d: made_impossible(corpus, result, d) for d in chosen}
    per_domain = domain_figures(corpus, result, chosen, ("call_memory", "sidecar",
                                                          "sequence_memory"))  # fmt: skip
    lodo: dict[str, Any] | None = None
    lodo_replayed: Replay | None = None
    if len(chosen) > 1:
        lodo_replayed = lodo_replay(corpus, chosen, seed_list, folds, situation)
        lodo = lodo_figures(corpus, lodo_replayed, chosen, defaults)
    through = prequential or ("call_memory" if quick else "sidecar")
    preq = prequential_figures(corpus, chosen, seed_list, through, defaults)
    replay_timing = {name: summary(ms) for name, ms in result.timings_ms.items()}
    synthetic = synthetic_timing(corpus, repeat=50 if quick else 300)
    per_domain_targets: list[dict[str, Any]] = []
    for d in chosen:
        if lodo is not None:
            figures, label = lodo["systems"]["call_memory"]["by_domain"][d], f"{d} left out"
        else:
            figures, label = per_domain[d]["call_memory"], f"{d}, pooled folds"
        per_domain_targets += assess_targets(
            figures, f"call_memory, {label}", impossible_by_domain[d]["made_impossible"]
        )
    if lodo is not None:
        per_domain_targets += assess_targets(
            lodo["systems"]["call_memory"]["pooled"], "call_memory, every domain left out"
        )
    timing_targets = [
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
    return {
        "benchmark": "failures",
        "question": "repeat failures caught before the call on agent runs of several "
        "domains, the cost to successful runs, and whether it holds on a domain left out",
        "machine": machine(),
        "params": {
            "dataset": str(dataset),
            "domains": list(chosen),
            "folds": folds,
            "seeds": seed_list,
            "thresholds": _thresholds(defaults),
        },
        "corpus": corpus_notes,
        "systems": systems,
        "per_domain": per_domain,
        "leave_one_domain_out": lodo
        or {"note": "one domain selected: nothing to leave out (the pooled folds are its folds)"},
        "same_situation": situation_figures(corpus, result, lodo_replayed, chosen, situation_note),
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
        "prequential": preq,
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
            *assess_targets(
                systems["sidecar"],
                "sidecar, pooled folds",
                impossible["made_impossible"],
                any_block=True,
            ),
            *assess_targets(systems["call_memory"], "call_memory, pooled folds", any_block=True),
            *per_domain_targets,
            *first_block_targets(preq.get("streams", {})),
            *timing_targets,
        ],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def prequential_figures(
    corpus: Corpus, domains: Sequence[str], seeds: Sequence[int], through: str, t: Thresholds
) -> dict[str, Any]:
    """The runs arriving one by one (:mod:`benchmarks.prequential`), through the library
    or the memory alone, or nothing when ``through`` is ``none``."""
    if through == "none":
        return {"note": "not replayed (prequential='none')"}
    if through not in ("sidecar", "call_memory"):
        raise ValueError(f"prequential is sidecar, call_memory or none; got {through!r}")
    replayed = replay_all(corpus, domains, seeds, through)
    return {
        "protocol": "runs arrive one at a time; each call is checked before its run is "
        "reported; a real repeat is a failing call whose (tool, signature) occurred in a run "
        "that arrived before it",
        "through": through,
        "checkpoints": list(CHECKPOINTS),
        "streams": stream_figures(corpus, replayed, t),
    }


def _thresholds(t: Thresholds) -> dict[str, Any]:
    return {
        "min_support_block": t.min_support_block,
        "max_contradictions_block": t.max_contradictions_block,
        "min_confidence_block": t.min_confidence_block,
        "min_confidence_warn": t.min_confidence_warn,
    }


# ---- output ------------------------------------------------------------------------------
def markdown(result: dict[str, Any]) -> str:
    from benchmarks.failure_report import markdown as report

    return report(result)


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    from benchmarks.failure_report import plot as draw

    return draw(result, out_dir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="quick", action="store_true", default=True)
    size.add_argument("--full", dest="quick", action="store_false")
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    add_domain_options(parser)
    parser.add_argument("--folds", type=int, default=FOLDS)
    parser.add_argument("--seeds", type=int, help=f"default {QUICK_SEEDS} quick, {FULL_SEEDS} full")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--markdown", type=Path, help="write the Markdown here")
    args = parser.parse_args(argv)
    dataset = args.dataset.resolve()
    lost = missing(dataset, args.domains)
    if lost:
        raise SystemExit(f"bench_failures: missing {', '.join(lost)} (datasets: {dataset})")
    result = run(args.quick, args.seed, dataset, args.folds, args.seeds, args.domains,
                 args.bfcl_runs, args.bfcl_seed, args.apibank_runs,
                 args.prequential)  # fmt: skip
    words = sys.argv[1:] if argv is None else argv
    result["command"] = " ".join(["python -m benchmarks.bench_failures", *words])
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(result))
    emit(result, args.out)


def add_domain_options(parser: argparse.ArgumentParser) -> None:
    """``--domains``, ``--bfcl-runs``, ``--bfcl-seed`` (shared with ``benchmarks.run``)."""

    def domains(text: str) -> tuple[str, ...]:
        try:
            return parse_domains(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parser.add_argument(
        "--domains",
        type=domains,
        default=DOMAINS,
        help=f"comma-separated, of {','.join(DOMAINS)} (default: all; 'retail' to choose "
        "defaults on retail alone)",
    )
    parser.add_argument(
        "--bfcl-runs",
        type=int,
        default=None,
        help="bfcl: mutation runs per scenario (default 3)",
    )
    parser.add_argument(
        "--bfcl-seed",
        type=int,
        default=0,
        help="bfcl, apibank: the seed of the mutations (default 0)",
    )
    parser.add_argument(
        "--apibank-runs",
        type=int,
        default=None,
        help="apibank: mutation runs per dialogue (default 1)",
    )
    parser.add_argument(
        "--prequential",
        choices=("sidecar", "call_memory", "none"),
        default=None,
        help="runs arriving one by one, checked and reported through the library (the "
        "default of --full), the memory alone (ten times faster; the default of --quick), "
        "or not replayed",
    )


if __name__ == "__main__":
    main()
