"""The development domains of ``bench_failures`` and the splits it replays over them.

Domains: ``retail`` and ``telecom`` (real τ²-bench agent runs, :mod:`benchmarks.tau2`),
``bfcl`` (BFCL's simulators, ground truths and seeded mutations, :mod:`benchmarks.bfcl`),
``apibank`` (API-Bank's dialogues, ground truths and seeded mutations,
:mod:`benchmarks.apibank`) and ``booking`` (a flight-booking desk simulated for this
benchmark, its ground truths and seeded mistakes, :mod:`benchmarks.booking`).  Their
runs are put in one corpus, the τ² runs in their file's order (so that τ² alone replays
as before), then the ``bfcl``, ``apibank`` and ``booking`` runs, each keeping its domain;
tool names are the systems' own (``get_order_details`` is a retail tool and a TradingBot
one: the pooled memory sees one tool).

Splits, always by task (all runs of a task on one side):

- *pooled folds*: every selected domain's tasks dealt into ``k`` folds; each fold is
  held out in turn and the system learns every other fold's runs;
- *leave one domain out*: for a held-out domain D, D's tasks are dealt into ``k``
  folds; each is held out in turn and the system learns every run of the other
  domains plus D's other folds.  Nothing is chosen on D: the thresholds and families
  are the library's defaults, fixed before.

The order in which a system learns its training runs is a seeded shuffle.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.tau2 import Corpus, Run

DOMAINS = ("retail", "telecom", "bfcl", "apibank", "booking")
TAU2_DOMAINS = ("retail", "telecom")


@dataclass(frozen=True)
class Split:
    seed: int
    fold: int
    training: tuple[int, ...]
    """Run indexes, in the order they are learned."""
    test: tuple[int, ...]
    held_out: str | None = None
    """The held-out domain (leave one domain out), ``None`` for pooled folds."""


def parse_domains(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"retail,bfcl"`` (or a list) as domains in corpus order; ``None``: all of them."""
    if text is None:
        return DOMAINS
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    unknown = sorted({n for n in names if n} - set(DOMAINS))
    if unknown or not any(names):
        raise ValueError(f"domains are {', '.join(DOMAINS)}; got {', '.join(unknown) or '-'}")
    return tuple(d for d in DOMAINS if d in names)


def missing(dataset: Path, domains: Sequence[str]) -> list[str]:
    """The data files the selected domains need and are not there."""
    from benchmarks import apibank, tau2

    lost = tau2.missing_files(dataset) if set(domains) & set(TAU2_DOMAINS) else []
    return lost + (apibank.missing_files() if "apibank" in domains else [])


def uninstalled(domains: Sequence[str]) -> list[str]:
    """The packages the selected domains need and this Python lacks, each with the
    command that installs it: ``bfcl`` reads its scenarios from ``bfcl-eval``."""
    from benchmarks import bfcl

    return bfcl.missing_files() if "bfcl" in domains else []


def load_domains(
    dataset: Path,
    domains: Sequence[str],
    bfcl_seed: int = 0,
    bfcl_runs: int | None = None,
    apibank_runs: int | None = None,
) -> tuple[Corpus, dict[str, Any]]:
    """The selected domains' runs as one corpus, and what each loader counted (the
    ``apibank`` and ``booking`` mutations take ``bfcl_seed`` too)."""
    from benchmarks import apibank, bfcl, booking, tau2

    runs: list[Run] = []
    tools: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    if set(domains) & set(TAU2_DOMAINS):
        corpus = tau2.load(dataset)
        runs += [r for r in corpus.runs if r.domain in domains]
        tools |= {t.tool_id: t for t in corpus.tools}
        notes["tau2"] = corpus.notes
    if "bfcl" in domains:
        kept = bfcl.RUNS_PER_SCENARIO if bfcl_runs is None else bfcl_runs
        corpus = bfcl.load(bfcl_seed, kept)
        runs += corpus.runs
        # a name two systems share keeps its first definition: one tool in the index
        tools |= {t.tool_id: t for t in corpus.tools if t.tool_id not in tools}
        notes["bfcl"] = {**corpus.notes, "seed": bfcl_seed, "runs_per_scenario": kept}
    if "apibank" in domains:
        kept = apibank.RUNS_PER_DIALOGUE if apibank_runs is None else apibank_runs
        corpus = apibank.load(bfcl_seed, kept)
        runs += corpus.runs
        tools |= {t.tool_id: t for t in corpus.tools if t.tool_id not in tools}
        notes["apibank"] = {**corpus.notes, "seed": bfcl_seed, "runs_per_dialogue": kept}
    if "booking" in domains:
        corpus = booking.load(bfcl_seed)
        runs += corpus.runs
        tools |= {t.tool_id: t for t in corpus.tools if t.tool_id not in tools}
        notes["booking"] = {**corpus.notes, "seed": bfcl_seed,
                            "runs_per_task": booking.RUNS_PER_TASK}  # fmt: skip
    notes["domains"] = list(domains)
    notes["runs_by_domain"] = dict(Counter(r.domain for r in runs))
    notes["successful_runs_by_domain"] = dict(Counter(r.domain for r in runs if r.succeeded))
    notes["failing_calls_by_domain"] = dict(
        Counter(r.domain for r in runs for s in r.steps if s.error is not None)
    )
    notes["tools_shared_across_domains"] = shared_tools(runs)
    return Corpus(runs, {}, list(tools.values())), notes


def shared_tools(runs: Sequence[Run]) -> dict[str, list[str]]:
    """Tool names that runs of more than one domain call."""
    seen: dict[str, set[str]] = {}
    for run in runs:
        for step in run.steps:
            seen.setdefault(step.tool, set()).add(run.domain)
    return {t: sorted(d) for t, d in sorted(seen.items()) if len(d) > 1}


def folds_of(runs: Sequence[Run], k: int, seed: int) -> list[list[int]]:
    """Run indexes per fold; the runs of one task always share a fold."""
    tasks = sorted({r.task for r in runs})
    random.Random(f"folds:{seed}").shuffle(tasks)
    fold_of = {task: i % k for i, task in enumerate(tasks)}
    out: list[list[int]] = [[] for _ in range(k)]
    for i, run in enumerate(runs):
        out[fold_of[run.task]].append(i)
    return out


def pooled_splits(runs: Sequence[Run], k: int, seeds: Sequence[int]) -> list[Split]:
    out: list[Split] = []
    for seed in seeds:
        for fold, held in enumerate(folds_of(runs, k, seed)):
            held_set = set(held)
            training = [i for i in range(len(runs)) if i not in held_set]
            random.Random(f"order:{seed}:{fold}").shuffle(training)
            out.append(Split(seed, fold, tuple(training), tuple(held)))
    return out


def leave_one_domain_out(
    runs: Sequence[Run], domain: str, k: int, seeds: Sequence[int]
) -> list[Split]:
    """The splits that hold out ``domain``'s folds in turn (see the module's text)."""
    mine = [i for i, r in enumerate(runs) if r.domain == domain]
    others = [i for i, r in enumerate(runs) if r.domain != domain]
    out: list[Split] = []
    for seed in seeds:
        folds = [[mine[j] for j in fold] for fold in folds_of([runs[i] for i in mine], k, seed)]
        for fold, held in enumerate(folds):
            held_set = set(held)
            training = others + [i for i in mine if i not in held_set]
            random.Random(f"order:{seed}:{domain}:{fold}").shuffle(training)
            out.append(Split(seed, fold, tuple(training), tuple(held), domain))
    return out
