"""Question: on real agent runs, how many repeat failures does a failure memory catch
before the call, and what does it cost successful runs?

Data: the τ²-bench retail and telecom runs of ``tau2-trajectories`` (see
:mod:`benchmarks.tau2`).  Protocol, per seed: the tasks are shuffled and dealt into
``--folds`` folds (all runs of a task in one fold); for each fold, a fresh system learns
every other fold's runs one at a time (in a seeded order), then each held-out run is
replayed call by call and the system is asked before every call, with the steps before
it and what the agent had been told so far.  A *real repeat failure* is a held-out
failing call whose (tool, normalized signature) occurred in training.

Systems, behind one interface (``learn(session)``, ``check(before, call, told)``):

- ``plain_index``: always allows (what a plain tool index does);
- ``seed_prefix``: the seed's prefix check (``ConstraintMatcher`` in ``prefix`` mode):
  blocks a plan (the tools run so far plus the next one) when an abandoned chain's
  prefix (every tool before its failing call) is a prefix of it;
- ``sequence_memory``: today's sequence-only memory (``ConstraintMatcher.next_steps``):
  blocks a call that completes a learned fatal sequence (the tools of a run up to and
  including a failing call), contiguously, after the tools run so far;
- ``call_memory``: :class:`sidecar.memory.FailureMemory` and
  :func:`sidecar.memory.assess` with the default thresholds.

Every system learns from the same failures: those the memory's classification does not
call transient (``sidecar.memory.failure_kind``); a chain of one tool cannot be
archived (the library rejects it), so the sequence systems skip those.

Reported per system, pooled over seeds and folds and per (seed, fold): repeats caught
before the call (warn or block; block only), block precision (blocked calls that really
failed), successful runs (reward 1) with a wrongly blocked call / with any blocked call,
warned calls in successful runs as a share of their calls, and contradicted
constraints; for ``call_memory`` also each family's catches and costs, each family
left out in turn, and the decision thresholds swept.  Timing: the per-call check of
``call_memory`` against ``sequence_memory``'s, measured in the same replay, and a
synthetic check of a 30-step session against 100 conditions of the tool.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from benchmarks.common import (
    DEFAULT_DATASETS,
    emit,
    interleaved,
    machine,
    md_table,
    md_targets,
    progress,
    ratio,
    summary,
    target,
)
from benchmarks.tau2 import Corpus, Run, load, missing_files
from sidecar.memory import (
    FAMILIES,
    FailureCondition,
    FailureMemory,
    Session,
    Step,
    Thresholds,
    Trace,
    assess,
    failure_kind,
    normalize_signature,
)

FOLDS = 5
QUICK_SEEDS = 1
FULL_SEEDS = 5
Decision = str  # "allow" | "warn" | "block"


@dataclass(frozen=True)
class Check:
    decision: Decision
    constraints: tuple[str, ...] = ()
    """The constraints (chains or conditions) behind a warn or block."""
    holding: tuple[FailureCondition, ...] = ()
    """``call_memory`` only: every learned condition that held, whatever its level."""


class System(Protocol):
    name: str

    def learn(self, session: Session) -> None: ...

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check: ...


def learned_failures(session: Session) -> Iterable[tuple[int, Step]]:
    for i, step in enumerate(session.steps):
        if step.error is not None and failure_kind(step.error) != "transient":
            yield i, step


# ---- the systems -------------------------------------------------------------------------
class PlainIndex:
    name = "plain_index"

    def learn(self, session: Session) -> None:
        pass

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        return Check("allow")


class _Chains:
    """Abandoned chains as the library's compiled constraints."""

    def __init__(self) -> None:
        self._constraints: list[Any] = []
        self._matcher: Any = None

    def learn(self, session: Session) -> None:
        from sidecar.model import ArchivedConstraint

        tools = [s.tool for s in session.steps]
        for i, step in learned_failures(session):
            chain = tuple(tools[: i + 1])
            if len(chain) < 2:
                continue
            n = len(self._constraints)
            signature = normalize_signature(step.error or "")
            self._constraints.append(
                ArchivedConstraint(
                    chain_id=f"{session.session_id}#{i}",
                    sequence=chain,
                    rule=f"after {' > '.join(chain[:-1])}, {chain[-1]} failed",
                    signature=signature,
                    when=(),
                    gapped=False,
                    pointer=f"cold://chains/{n}",
                    order=n,
                )
            )
        self._matcher = None

    def matcher(self) -> Any:
        from sidecar.constraints import ConstraintMatcher

        if self._matcher is None:
            self._matcher = ConstraintMatcher(self._constraints)
        return self._matcher

    def __len__(self) -> int:
        return len(self._constraints)


class SeedPrefix(_Chains):
    name = "seed_prefix"

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        plan = [s.tool for s in before] + [call.tool]
        result = self.matcher().check(plan, mode="prefix")
        if result.safe:
            return Check("allow")
        return Check("block", tuple(c.chain_id for c in result.collisions))


class SequenceMemory(_Chains):
    name = "sequence_memory"

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        blocked, _ = self.matcher().next_steps([s.tool for s in before])
        hits = blocked.get(call.tool)
        if not hits:
            return Check("allow")
        return Check("block", tuple(c.chain_id for c, _ in hits))


class CallMemory:
    """The call-level memory; keeps one :class:`Trace` per replayed run, extended as the
    run goes on (as a runtime integration would)."""

    name = "call_memory"
    collect = Thresholds(min_confidence_warn=0.0)
    """Levels for collecting every condition that holds (decisions are re-derived)."""

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.memory = FailureMemory()
        self.thresholds = thresholds or Thresholds()
        self._trace = Trace()
        self._of: int | None = None

    def learn(self, session: Session) -> None:
        self.memory.add_session(session)

    def trace_for(self, before: Sequence[Step]) -> Trace:
        if self._of != id(before) or len(self._trace) > len(before):
            self._trace, self._of = Trace(), id(before)
        for step in before[len(self._trace) :]:
            self._trace.add(step)
        return self._trace

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        trace = self.trace_for(before)
        conditions = self.memory.conditions(call.tool)
        verdict = assess(conditions, trace, call.tool, call.arguments, told, self.collect)
        by_id = {c.condition_id: c for c in conditions}
        holding = tuple(by_id[r.condition_id] for r in verdict.reasons)
        decision, ids = decide(holding, self.thresholds)
        return Check(decision, ids, holding)


def decide(
    holding: Sequence[FailureCondition], thresholds: Thresholds
) -> tuple[Decision, tuple[str, ...]]:
    levels = [(c, thresholds.level(c)) for c in holding]
    blocks = tuple(c.condition_id for c, lvl in levels if lvl == "block")
    if blocks:
        return "block", blocks
    warns = tuple(c.condition_id for c, lvl in levels if lvl == "warn")
    return ("warn", warns) if warns else ("allow", ())


# ---- the replay --------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    seed: int
    fold: int
    run: int
    """Index of the run in the corpus."""
    step: int
    tool: str
    failed: bool
    repeat: bool
    """A failure whose (tool, normalized signature) occurred in training."""
    run_succeeded: bool
    check: Check


@dataclass
class Replay:
    calls: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))
    timings_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    trained: list[dict[str, Any]] = field(default_factory=list)
    """Per (seed, fold): what each system learned."""


def folds_of(runs: Sequence[Run], k: int, seed: int) -> list[list[int]]:
    """Run indexes per fold; the runs of one task always share a fold."""
    tasks = sorted({r.task for r in runs})
    random.Random(f"folds:{seed}").shuffle(tasks)
    fold_of = {task: i % k for i, task in enumerate(tasks)}
    out: list[list[int]] = [[] for _ in range(k)]
    for i, run in enumerate(runs):
        out[fold_of[run.task]].append(i)
    return out


def make_systems() -> list[Any]:
    return [PlainIndex(), SeedPrefix(), SequenceMemory(), CallMemory()]


def replay(corpus: Corpus, seeds: Sequence[int], k: int) -> Replay:
    out = Replay()
    runs = corpus.runs
    for seed in seeds:
        folds = folds_of(runs, k, seed)
        for fold, held in enumerate(folds):
            held_set = set(held)
            training = [i for i in range(len(runs)) if i not in held_set]
            random.Random(f"order:{seed}:{fold}").shuffle(training)
            systems = make_systems()
            seen: set[tuple[str, str]] = set()
            for i in training:
                session = runs[i].session()
                for system in systems:
                    system.learn(session)
                for _, step in learned_failures(session):
                    seen.add((step.tool, normalize_signature(step.error or "")))
            out.trained.append(_trained(seed, fold, systems, len(training), len(held)))
            progress(f"failures: seed {seed} fold {fold}: {len(training)} runs learned")
            for i in held:
                run = runs[i]
                for system in systems:
                    _replay_run(out, system, seed, fold, i, run, seen)
    return out


def _replay_run(
    out: Replay,
    system: Any,
    seed: int,
    fold: int,
    index: int,
    run: Run,
    seen: set[tuple[str, str]],
) -> None:
    before: list[Step] = []
    for j, step in enumerate(run.steps):
        call = Step(step.tool, step.arguments)
        start = time.perf_counter()
        check = system.check(before, call, run.told_before[j])
        out.timings_ms[system.name].append((time.perf_counter() - start) * 1000.0)
        failed = step.error is not None
        repeat = failed and (step.tool, normalize_signature(step.error or "")) in seen
        out.calls[system.name].append(
            Call(seed, fold, index, j, step.tool, failed, repeat, run.succeeded, check)
        )
        before.append(step)


def _trained(
    seed: int, fold: int, systems: Sequence[Any], n_train: int, n_held: int
) -> dict[str, Any]:
    row: dict[str, Any] = {"seed": seed, "fold": fold, "train_runs": n_train, "held_runs": n_held}
    for system in systems:
        if isinstance(system, _Chains):
            row[system.name] = {"constraints": len(system)}
        elif isinstance(system, CallMemory):
            conditions = system.memory.conditions()
            levels = Counter(system.thresholds.level(c) or "none" for c in conditions)
            row[system.name] = {
                "conditions": len(conditions),
                "block_level": levels["block"],
                "warn_level": levels["warn"],
                "contradicted": sum(c.contradictions > 0 for c in conditions),
                "contradicted_at_warn_level": sum(
                    c.contradictions > 0 and system.thresholds.level(c) == "warn"
                    for c in conditions
                ),
                "memory": system.memory.summary(),
            }
    return row


# ---- metrics -----------------------------------------------------------------------------
def metrics(
    calls: Sequence[Call], decisions: Sequence[tuple[Decision, tuple[str, ...]]]
) -> dict[str, Any]:
    """The figures of one system over ``calls`` (with ``decisions`` aligned to them)."""
    repeats = [d for c, d in zip(calls, decisions, strict=True) if c.repeat]
    failures = [d for c, d in zip(calls, decisions, strict=True) if c.failed]
    blocked = [c for c, d in zip(calls, decisions, strict=True) if d[0] == "block"]
    ok_calls = [(c, d) for c, d in zip(calls, decisions, strict=True) if c.run_succeeded]
    ok_runs = {(c.seed, c.run) for c, _ in ok_calls}
    wrong_runs = {(c.seed, c.run) for c, d in ok_calls if d[0] == "block" and not c.failed}
    any_block_runs = {(c.seed, c.run) for c, d in ok_calls if d[0] == "block"}
    warned = sum(d[0] == "warn" for _, d in ok_calls)
    flagged = sum(d[0] != "allow" for c, d in ok_calls if not c.failed)
    contradicted = {
        i
        for c, d in zip(calls, decisions, strict=True)
        if d[0] == "block" and not c.failed
        for i in d[1]
    }
    n_blocked_ok = sum(1 for b in blocked if b.failed)
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
        "blocks_failed": n_blocked_ok,
        "block_precision": _share(n_blocked_ok, len(blocked)),
        "successful_runs": len(ok_runs),
        "successful_runs_wrongly_blocked": len(wrong_runs),
        "successful_runs_wrongly_blocked_share": _share(len(wrong_runs), len(ok_runs)),
        "successful_runs_any_block": len(any_block_runs),
        "successful_runs_any_block_share": _share(len(any_block_runs), len(ok_runs)),
        "calls_in_successful_runs": len(ok_calls),
        "warned_calls_in_successful_runs": warned,
        "warned_share_in_successful_runs": _share(warned, len(ok_calls)),
        "flagged_ok_calls_in_successful_runs_share": _share(flagged, len(ok_calls)),
        "constraints_contradicted_on_held_out": len(contradicted),
    }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def family_figures(calls: Sequence[Call], thresholds: Thresholds) -> dict[str, Any]:
    """Per family: the repeats its conditions flag (warn/block), the failing calls it
    blocks, and its blocks and warns on calls that did not fail."""
    out: dict[str, Any] = {}
    for family in FAMILIES:
        row = Counter[str]()
        for call in calls:
            levels = {thresholds.level(c) for c in call.check.holding if c.family == family}
            levels.discard(None)
            if not levels:
                continue
            top = "block" if "block" in levels else "warn"
            if call.repeat:
                row["repeats_flagged"] += 1
                row["repeats_blocked"] += top == "block"
            if call.failed:
                row["failures_blocked"] += top == "block"
            else:
                row[f"{top}s_on_ok_calls"] += 1
                if call.run_succeeded:
                    row[f"{top}s_on_ok_calls_in_successful_runs"] += 1
        out[family] = {
            key: row[key]
            for key in (
                "repeats_flagged",
                "repeats_blocked",
                "failures_blocked",
                "blocks_on_ok_calls",
                "warns_on_ok_calls",
                "blocks_on_ok_calls_in_successful_runs",
                "warns_on_ok_calls_in_successful_runs",
            )
        }
    return out


def without_family(calls: Sequence[Call], family: str, thresholds: Thresholds) -> dict[str, Any]:
    decisions = [
        decide([c for c in call.check.holding if c.family != family], thresholds) for call in calls
    ]
    return _headline(metrics(calls, decisions))


SWEEP: tuple[Thresholds, ...] = tuple(
    Thresholds(
        min_support_block=s,
        max_contradictions_block=c,
        min_confidence_block=0.0,
        min_confidence_warn=w,
    )
    for s in (1, 2, 3)
    for c in (0, 1)
    for w in (0.34, 0.5, 0.67, 1.01)
)


def _headline(m: Mapping[str, Any]) -> dict[str, Any]:
    keys = (
        "catch_rate",
        "block_catch_rate",
        "block_precision",
        "blocks",
        "successful_runs_wrongly_blocked_share",
        "warned_share_in_successful_runs",
    )
    return {k: m[k] for k in keys}


def assess_targets(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    catch, precision = m["catch_rate"], m["block_precision"]
    wrong, warned = m["successful_runs_wrongly_blocked_share"], m["warned_share_in_successful_runs"]
    return [
        target(
            "call_memory: real repeats caught before the call",
            ">= 0.5",
            catch,
            catch is not None and catch >= 0.5,
        ),
        target(
            "call_memory: block precision",
            ">= 0.8",
            precision,
            precision is not None and precision >= 0.8,
        ),
        target(
            "call_memory: successful runs with a wrongly blocked call",
            "<= 0.01",
            wrong,
            wrong is not None and wrong <= 0.01,
        ),
        target(
            "call_memory: warned calls in successful runs",
            "<= 0.05",
            warned,
            warned is not None and warned <= 0.05,
        ),
    ]


# ---- timing ------------------------------------------------------------------------------
def synthetic_timing(corpus: Corpus, repeat: int) -> dict[str, Any]:
    """A 30-step session and 100 conditions of the tool checked: the session is the
    longest retail run's first 30 steps (padded by repeating it), the conditions those
    learned from every run for the most-conditioned tool, padded with copies that test
    other values.  Baseline in the same run: the sequence memory's check."""
    memory = FailureMemory()
    chains = SequenceMemory()
    for run in corpus.runs:
        memory.add_session(run.session())
        chains.learn(run.session())
    counts = Counter(c.tool for c in memory.conditions())
    tool = counts.most_common(1)[0][0]
    conditions = list(memory.conditions(tool))
    padded = list(conditions)
    n = 0
    while len(padded) < 100:
        base = conditions[n % len(conditions)]
        predicate = (
            replace(base.predicate, value=f"synthetic-{n}")
            if base.predicate.op == "=="
            else base.predicate
        )
        padded.append(replace(base, predicate=predicate))
        n += 1
    padded = padded[:100]
    longest = max((r for r in corpus.runs if r.domain == "retail"), key=lambda r: len(r.steps))
    steps = list(longest.steps)
    while len(steps) < 30:
        steps += list(longest.steps)
    steps = steps[:30]
    example = next((s for r in corpus.runs for s in r.steps if s.tool == tool), None)
    arguments = dict(example.arguments) if example else {}
    trace = Trace(steps)
    told = longest.told_before[-1] if longest.told_before else None
    matcher = chains.matcher()
    tools = [s.tool for s in steps]
    gc.collect()
    samples = interleaved(
        {
            "call_memory_incremental": lambda: assess(padded, trace, tool, arguments, told),
            "call_memory_from_scratch": lambda: assess(padded, steps, tool, arguments, told),
            "sequence_memory": lambda: matcher._next_steps(tools, {}),
        },
        repeat=repeat,
    )
    stats = {name: summary(s) for name, s in samples.items()}
    base = stats["sequence_memory"]["p50_ms"]
    return {
        "tool": tool,
        "steps": len(steps),
        "conditions": len(padded),
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
    n_seeds = seeds or (QUICK_SEEDS if quick else FULL_SEEDS)
    seed_list = [seed + i for i in range(n_seeds)]
    progress(f"failures: {len(corpus.runs)} runs, {folds} folds, seeds {seed_list}")
    result = replay(corpus, seed_list, folds)
    defaults = Thresholds()
    systems: dict[str, Any] = {}
    per_fold: dict[str, list[dict[str, Any]]] = {}
    for name, calls in result.calls.items():
        decisions = [(c.check.decision, c.check.constraints) for c in calls]
        systems[name] = metrics(calls, decisions)
        rows = []
        for s in seed_list:
            for f in range(folds):
                part = [
                    (c, d)
                    for c, d in zip(calls, decisions, strict=True)
                    if c.seed == s and c.fold == f
                ]
                m = metrics([c for c, _ in part], [d for _, d in part])
                rows.append({"seed": s, "fold": f, **_headline(m), "repeats": m["repeats"]})
        per_fold[name] = rows
    mine = result.calls["call_memory"]
    sweep = [
        {
            "thresholds": _thresholds_dict(t),
            **_headline(metrics(mine, [decide(c.check.holding, t) for c in mine])),
        }
        for t in SWEEP
    ]
    timing_calls = {name: summary(ms) for name, ms in result.timings_ms.items()}
    synthetic = synthetic_timing(corpus, repeat=50 if quick else 300)
    return {
        "benchmark": "failures",
        "question": "repeat failures caught before the call on real agent runs, and the cost "
        "to successful runs",
        "machine": machine(),
        "params": {
            "dataset": str(dataset),
            "folds": folds,
            "seeds": seed_list,
            "thresholds": _thresholds_dict(defaults),
        },
        "corpus": corpus.notes,
        "systems": systems,
        "per_fold": per_fold,
        "families": family_figures(mine, defaults),
        "without_family": {f: without_family(mine, f, defaults) for f in FAMILIES},
        "threshold_sweep": sweep,
        "trained": result.trained,
        "misses": misses(corpus, mine),
        "timing": {
            "replay_check_ms": timing_calls,
            "replay_call_memory_vs_sequence_p50": ratio(
                timing_calls["call_memory"]["p50_ms"], timing_calls["sequence_memory"]["p50_ms"]
            ),
            "synthetic": synthetic,
        },
        "targets": [
            *assess_targets(systems["call_memory"]),
            target(
                "call_memory: check of 30 steps against 100 conditions (p50, incremental)",
                "< 1 ms",
                synthetic["timings"]["call_memory_incremental"]["p50_ms"],
                synthetic["timings"]["call_memory_incremental"]["p50_ms"] < 1.0,
                "wall time on this machine; the ratio to the sequence check is in timing",
            ),
        ],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _thresholds_dict(t: Thresholds) -> dict[str, Any]:
    return {
        "min_support_block": t.min_support_block,
        "max_contradictions_block": t.max_contradictions_block,
        "min_confidence_block": t.min_confidence_block,
        "min_confidence_warn": t.min_confidence_warn,
    }


def misses(corpus: Corpus, calls: Sequence[Call]) -> list[dict[str, Any]]:
    """Real repeats not caught, by (tool, signature), with how often."""
    counter: Counter[tuple[str, str]] = Counter()
    caught: Counter[tuple[str, str]] = Counter()
    for call in calls:
        if not call.repeat:
            continue
        step = corpus.runs[call.run].steps[call.step]
        key = (step.tool, normalize_signature(step.error or ""))
        counter[key] += 1
        caught[key] += call.check.decision != "allow"
    return [
        {"tool": t, "signature": s, "repeats": n, "caught": caught[(t, s)]}
        for (t, s), n in counter.most_common()
    ]


# ---- output ------------------------------------------------------------------------------
def markdown(result: dict[str, Any]) -> str:
    systems = result["systems"]
    keys = (
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
    rows = [
        [name, *(m[k] if m[k] is not None else "-" for k in keys)] for name, m in systems.items()
    ]
    fam_keys = (
        "repeats_flagged",
        "repeats_blocked",
        "failures_blocked",
        "blocks_on_ok_calls",
        "warns_on_ok_calls",
    )
    fam_rows = [[f, *(v[k] for k in fam_keys)] for f, v in result["families"].items()]
    without = [[f, *v.values()] for f, v in result["without_family"].items()]
    sweep = [
        [
            t["thresholds"]["min_support_block"],
            t["thresholds"]["max_contradictions_block"],
            t["thresholds"]["min_confidence_warn"],
            t["catch_rate"],
            t["block_catch_rate"],
            t["block_precision"],
            t["successful_runs_wrongly_blocked_share"],
            t["warned_share_in_successful_runs"],
        ]
        for t in result["threshold_sweep"]
    ]
    fold_rows = [
        [
            r["seed"],
            r["fold"],
            r["repeats"],
            r["catch_rate"],
            r["block_precision"],
            r["blocks"],
            r["successful_runs_wrongly_blocked_share"],
            r["warned_share_in_successful_runs"],
        ]
        for r in result["per_fold"]["call_memory"]
    ]
    timing = result["timing"]
    synthetic = timing["synthetic"]
    miss_rows = [[m["tool"], m["signature"], m["repeats"], m["caught"]] for m in result["misses"]]
    return "\n".join(
        [
            f"## Failure memory on τ² runs ({result['params']['folds']} folds by task, seeds "
            f"{result['params']['seeds']})",
            "",
            md_table(["system", *keys], rows),
            "",
            "### call_memory per (seed, fold)",
            "",
            md_table(
                [
                    "seed",
                    "fold",
                    "repeats",
                    "caught",
                    "block precision",
                    "blocks",
                    "ok runs wrongly blocked",
                    "warned share",
                ],
                fold_rows,
            ),
            "",
            "### Families (call_memory, default thresholds)",
            "",
            md_table(["family", *fam_keys], fam_rows),
            "",
            "Each family left out:",
            "",
            md_table(["left out", *next(iter(result["without_family"].values())).keys()], without),
            "",
            "### Threshold sweep",
            "",
            md_table(
                [
                    "min support",
                    "max contradictions",
                    "min conf warn",
                    "caught",
                    "blocked",
                    "block precision",
                    "ok runs wrongly blocked",
                    "warned share",
                ],
                sweep,
            ),
            "",
            "### Real repeats by (tool, signature)",
            "",
            md_table(["tool", "signature", "repeats", "caught"], miss_rows),
            "",
            f"Check time: replay p50 {timing['replay_check_ms']['call_memory']['p50_ms']} "
            f"ms ({timing['replay_call_memory_vs_sequence_p50']}x the sequence "
            f"check); {synthetic['steps']} steps x {synthetic['conditions']} conditions: "
            f"{synthetic['timings']['call_memory_incremental']['p50_ms']} ms incremental, "
            f"{synthetic['timings']['call_memory_from_scratch']['p50_ms']} ms from scratch "
            f"({synthetic['incremental_vs_sequence_p50']}x / "
            f"{synthetic['from_scratch_vs_sequence_p50']}x the sequence check).",
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="quick", action="store_true", default=True)
    size.add_argument("--full", dest="quick", action="store_false")
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--folds", type=int, default=FOLDS)
    parser.add_argument("--seeds", type=int, help=f"default {QUICK_SEEDS} quick, {FULL_SEEDS} full")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, help="write the JSON here")
    parser.add_argument("--markdown", type=Path, help="write the Markdown here")
    args = parser.parse_args(argv)
    dataset = args.dataset.resolve()
    lost = missing_files(dataset)
    if lost:
        raise SystemExit(
            f"bench_failures: missing under {dataset}: {', '.join(lost)}; pass --dataset DIR"
        )
    result = run(args.quick, args.seed, dataset, args.folds, args.seeds)
    result["command"] = "python -m benchmarks.bench_failures " + " ".join(
        argv or __import__("sys").argv[1:]
    )
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(result))
    emit(result, args.out)


if __name__ == "__main__":
    main()
