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
failed), warning precision (warned calls that really failed), successful runs (reward
1) with a wrongly blocked call / with any blocked call, warned calls in successful runs
as a share of their calls, and constraints contradicted on held-out calls; per domain
and left out, the same for ``call_memory``.  For ``call_memory`` also: each family's
catches and costs (pooled, and per domain left out), each family left out in turn, the
decision thresholds swept, what the learned conditions look like per family, the
lookup hints (``may_apply``), the repeats it misses, and the rules behind its warnings
(the 10 that warned on the most calls of successful runs, pooled and per domain left
out, each with its warning precision).  Timing: ``call_memory``'s check against
``sequence_memory``'s in the same replay, and a 30-step session checked against 100 and
1,000 conditions of one tool.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
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
from benchmarks.failure_figures import (
    SAME_SITUATION,
    Replay,
    domain_figures,
    domain_targets,
    lodo_figures,
    made_impossible,
    memory_figures,
    pooled_figures,
    pooled_targets,
    run_params,
    situation_figures,
    synthetic_timing,
    timing_figures,
    timing_targets,
)
from benchmarks.failure_metrics import (
    FAMILY_KEYS,
    GOAL_NAMES,
    GOALS,
    HEADLINE,
    Call,
    hint_figures,
    met,
    metrics,
)
from benchmarks.failure_risk import figures as risk_figures
from benchmarks.failure_risk import targets as risk_targets
from benchmarks.failure_systems import (
    CallMemory,
    SequenceMemory,
    learned_failures,
    make_systems,
    reads_of,
)
from benchmarks.harness.progress import progress
from benchmarks.harness.results import emit, machine
from benchmarks.prequential import CHECKPOINTS, first_block_targets, replay_all
from benchmarks.prequential import figures as stream_figures
from benchmarks.tau2 import Corpus, Run
from sidecar.memory import FAMILIES, LearnParams, Step, Thresholds
from sidecar.memory import normalize_signature as signature_of

__all__ = ["FAMILY_KEYS", "GOALS", "GOAL_NAMES", "HEADLINE", "Call", "hint_figures", "met",
           "metrics"]  # fmt: skip
FOLDS = 5
QUICK_SEEDS = 1
FULL_SEEDS = 5


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


def replay(
    corpus: Corpus, seeds: Sequence[int], k: int, variants: Mapping[str, LearnParams] | None = None
) -> Replay:
    """Pooled folds over every run of ``corpus``, with every system."""
    chosen = dict(variants or {})
    return replay_splits(
        corpus, pooled_splits(corpus.runs, k, seeds), lambda: make_systems(chosen, corpus.tools)
    )


def lodo_systems(variants: Mapping[str, LearnParams], tools: Sequence[Any] = ()) -> list[Any]:
    """What the leave-one-domain-out replay asks: the call memory at its defaults (and
    its variants), and the sequence memory as the baseline."""
    reads = reads_of(tools)
    extra = [CallMemory(params=p, name=n, reads=reads) for n, p in variants.items()]
    return [SequenceMemory(), CallMemory(reads=reads), *extra]


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


def lodo_replay(
    corpus: Corpus,
    domains: Sequence[str],
    seeds: Sequence[int],
    k: int,
    variants: Mapping[str, LearnParams],
) -> Replay:
    splits = [s for d in domains for s in leave_one_domain_out(corpus.runs, d, k, seeds)]
    return replay_splits(corpus, splits, lambda: lodo_systems(variants, corpus.tools))


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
    started, chosen = time.perf_counter(), parse_domains(domains)
    corpus, corpus_notes = load_domains(dataset, chosen, bfcl_seed, bfcl_runs, apibank_runs)
    seed_list = [seed + i for i in range(seeds or (QUICK_SEEDS if quick else FULL_SEEDS))]
    progress(f"failures: {len(corpus.runs)} runs ({', '.join(chosen)}), {folds} folds, "
             f"seeds {seed_list}")  # fmt: skip
    situation, situation_note = same_situation_variants()
    result = replay(corpus, seed_list, folds, variants := {**LEARN_SWEEP, **situation})
    systems, per_fold, learn_sweep = pooled_figures(result.calls, variants, seed_list, folds)
    impossible = made_impossible(corpus, result)
    per_domain, impossible_by_domain, lodo_replayed, lodo = _by_domain(
        corpus, result, chosen, seed_list, folds, situation
    )
    through = prequential or ("call_memory" if quick else "sidecar")
    preq = prequential_figures(corpus, chosen, seed_list, through, Thresholds())
    synthetic = synthetic_timing(corpus, repeat=50 if quick else 300)
    risk = risk_figures(corpus, chosen, seed_list, folds)
    memory = memory_figures(corpus, result, systems, learn_sweep, impossible,
                             impossible_by_domain, lodo)  # fmt: skip
    return {
        "benchmark": "failures",
        "question": "repeat failures caught before the call on agent runs of several "
        "domains, the cost to successful runs, and whether it holds on a domain left out",
        "machine": machine(),
        "params": run_params(dataset, chosen, folds, seed_list),
        "corpus": corpus_notes,
        "systems": systems,
        "per_domain": per_domain,
        "leave_one_domain_out": lodo or {"note": NOTHING_LEFT_OUT},
        "same_situation": situation_figures(corpus, result, lodo_replayed, chosen, situation_note),
        "per_fold": per_fold,
        **memory,
        "prequential": preq,
        "session_risk": risk,
        "timing": timing_figures(result, synthetic),
        "targets": [
            *pooled_targets(systems, impossible),
            *domain_targets(chosen, lodo, per_domain, impossible_by_domain),
            *first_block_targets(preq.get("streams", {})),
            *timing_targets(synthetic),
            *risk_targets(risk),
        ],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


NOTHING_LEFT_OUT = "one domain selected: nothing to leave out (the pooled folds are its folds)"


def _by_domain(
    corpus: Corpus,
    result: Replay,
    chosen: Sequence[str],
    seed_list: Sequence[int],
    folds: int,
    situation: Mapping[str, LearnParams],
) -> tuple[dict[str, Any], dict[str, Any], Replay | None, dict[str, Any] | None]:
    """Each domain's figures in the pooled folds and what its eviction made impossible;
    with more than one domain, each left out in turn (the replay and its figures;
    ``None`` with one domain)."""
    per_domain = domain_figures(corpus, result, chosen, ("call_memory", "sidecar",
                                                          "sequence_memory"))  # fmt: skip
    impossible = {d: made_impossible(corpus, result, d) for d in chosen}
    if len(chosen) < 2:
        return per_domain, impossible, None, None
    lodo_replayed = lodo_replay(corpus, chosen, seed_list, folds, situation)
    lodo = lodo_figures(corpus, lodo_replayed, chosen, Thresholds())
    return per_domain, impossible, lodo_replayed, lodo


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
        help="bfcl, apibank, booking: the seed of the mutations (default 0)",
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
