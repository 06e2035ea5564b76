"""Learning measured as it happens: ``bench_failures``'s prequential protocol.

Runs arrive one at a time, as they would at a gateway.  Before each call of a run the
library is asked (:meth:`sidecar.Sidecar.check_call`, with the steps before it and what
the agent had been told); only when the run is over is it learned from
(:meth:`sidecar.Sidecar.report`).  So every call is judged by a memory that has seen
only the runs that arrived before it, and the figures after 10, 25, 50, ... sessions
are a learning curve.

Streams, each on a fresh home (one per seed unless said):

- *a domain alone*: the domain's runs in a seeded order, from an empty memory (what a
  new deployment sees);
- *a domain in time order*: the same, in the order the runs started (τ² runs carry
  their start times; ties in a seeded order); one stream, whatever the seeds;
- *a domain after the others*: every other domain's runs are reported first (in a
  seeded order, as one batch), then the domain's runs arrive (a new domain at a
  gateway that already learned elsewhere);
- *pooled*: every selected domain's runs mixed, in a seeded order.

The definitions are the batch protocol's (:mod:`benchmarks.failure_metrics`): a *real
repeat* is a failing call whose (tool, normalized signature) occurred in a run learned
before it, here any run that arrived earlier (or the prior batch).  Beside the library
a :class:`~benchmarks.failure_systems.CallMemory` learns the same runs in the same
order; it says which conditions held (their families, and the reason lines of the
misses), and the replay counts the calls where the two disagree.

"First correct block": the position, in the stream, of the first run in which a call
was blocked that really failed; "first repeat": of the first run with a real repeat.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.failure_metrics import (
    Call,
    decisions_of,
    family_figures,
    headline,
    metrics,
    unblocked,
)
from benchmarks.failure_systems import (
    CallMemory,
    Check,
    SidecarLibrary,
    learned_failures,
    reads_of,
)
from benchmarks.harness.progress import progress
from benchmarks.tau2 import Corpus
from sidecar.memory import Step, Thresholds
from sidecar.memory import normalize_signature as signature_of

CHECKPOINTS = (10, 25, 50, 100, 200)
FIRST_BLOCK_GOAL = 25
"""Sessions a new domain may need before its first correct block (issue 26)."""


@dataclass(frozen=True)
class Stream:
    label: str
    kind: str
    """``alone``, ``time``, ``after_others`` or ``pooled``."""
    domain: str | None
    seed: int
    order: tuple[int, ...]
    """Run indexes, in the order they arrive."""
    prior: tuple[int, ...] = ()
    """Run indexes reported (as one batch) before the stream starts."""


@dataclass(frozen=True)
class Arrival:
    position: int
    """1-based: the run's place in its stream."""
    call: Call


def streams(corpus: Corpus, domains: Sequence[str], seeds: Sequence[int]) -> list[Stream]:
    """Every stream of the protocol (see the module's text)."""
    runs = corpus.runs
    out: list[Stream] = []
    for seed in seeds:
        for d in domains:
            mine = [i for i, r in enumerate(runs) if r.domain == d]
            random.Random(f"prequential:{seed}:{d}").shuffle(mine)
            out.append(Stream(f"{d} alone", "alone", d, seed, tuple(mine)))
            if len(domains) > 1:
                others = [i for i, r in enumerate(runs) if r.domain != d]
                random.Random(f"prequential:{seed}:others:{d}").shuffle(others)
                out.append(Stream(f"{d} after the others", "after_others", d, seed,
                                  tuple(mine), tuple(others)))  # fmt: skip
        if len(domains) > 1:
            every = list(range(len(runs)))
            random.Random(f"prequential:{seed}:pooled").shuffle(every)
            out.append(Stream("pooled", "pooled", None, seed, tuple(every)))
    for d in domains:
        mine = [i for i, r in enumerate(runs) if r.domain == d]
        if mine and all(runs[i].started for i in mine):
            tie = random.Random(f"prequential:{seeds[0]}:time:{d}")
            keys = {i: tie.random() for i in mine}
            mine.sort(key=lambda i: (runs[i].started or "", keys[i]))
            out.append(Stream(f"{d} in time order", "time", d, seeds[0], tuple(mine)))
    return out


@dataclass
class Replayed:
    stream: Stream
    arrivals: list[Arrival]
    disagreements: int
    """Calls where the library and the memory beside it decided differently."""
    seconds: float
    check_ms: list[float]
    report_ms: list[float]
    """The deciding system's time to check each call, and to take in each run."""


def replay_stream(
    corpus: Corpus, stream: Stream, number: int, through: str = "sidecar"
) -> Replayed:
    """One stream on a fresh home: each call checked, then its run reported.  ``through``:
    ``sidecar`` (the library decides) or ``call_memory`` (the memory alone decides, and no
    library runs)."""
    started = time.perf_counter()
    library = SidecarLibrary(corpus.tools) if through == "sidecar" else None
    memory = CallMemory(reads=reads_of(corpus.tools))
    seen: set[tuple[str, str]] = set()
    arrivals: list[Arrival] = []
    disagreements = 0
    check_ms: list[float] = []
    report_ms: list[float] = []
    try:
        if stream.prior:
            sessions = [corpus.runs[i].session() for i in stream.prior]
            if library is not None:
                library.report(sessions)
            for session in sessions:
                memory.learn(session)
                seen |= _failures(session)
        for position, i in enumerate(stream.order, 1):
            run = corpus.runs[i]
            before: list[Step] = []
            for j, step in enumerate(run.steps):
                call = Step(step.tool, step.arguments)
                t0 = time.perf_counter()
                mine = memory.check(before, call, run.told_before[j])
                t1 = time.perf_counter()
                verdict = library.check(before, call, run.told_before[j]) if library else mine
                check_ms.append((time.perf_counter() - (t1 if library else t0)) * 1000.0)
                disagreements += verdict.decision != mine.decision
                failed = step.error is not None
                repeat = failed and (step.tool, signature_of(step.error or "")) in seen
                check = Check(verdict.decision, verdict.constraints, mine.holding, mine.read_only)
                arrivals.append(Arrival(position, Call(stream.seed, number, i, j, failed, repeat,
                                                       run.succeeded, check)))  # fmt: skip
                before.append(step)
            session = run.session()
            t0 = time.perf_counter()
            if library is not None:
                library.report([session])
            t1 = time.perf_counter()
            memory.learn(session)
            report_ms.append(((t1 - t0) if library else (time.perf_counter() - t1)) * 1000.0)
            seen |= _failures(session)
    finally:
        if library is not None:
            library.close()
    seconds = time.perf_counter() - started
    return Replayed(stream, arrivals, disagreements, seconds, check_ms, report_ms)


def _failures(session: Any) -> set[tuple[str, str]]:
    return {(s.tool, signature_of(s.error or "")) for _, s in learned_failures(session)}


def replay_all(
    corpus: Corpus, domains: Sequence[str], seeds: Sequence[int], through: str = "sidecar"
) -> list[Replayed]:
    out = []
    for n, stream in enumerate(streams(corpus, domains, seeds)):
        out.append(replay_stream(corpus, stream, n, through))
        progress(
            f"failures, prequential: {stream.label} (seed {stream.seed}): {len(stream.order)} "
            f"runs in {out[-1].seconds:.1f} s"
        )
    return out


# ---- figures -----------------------------------------------------------------------------
def checkpoints(length: int) -> list[int]:
    return [n for n in CHECKPOINTS if n < length] + [length]


def curve(arrivals: Sequence[Arrival], length: int) -> list[dict[str, Any]]:
    """After each checkpoint: the figures over every run so far (``cumulative``) and
    over the runs since the checkpoint before (``window``)."""
    out = []
    previous = 0
    for n in checkpoints(length):
        so_far = [a.call for a in arrivals if a.position <= n]
        window = [a.call for a in arrivals if previous < a.position <= n]
        out.append({
            "after": n,
            "cumulative": _figures(so_far),
            "window": _figures(window),
        })  # fmt: skip
        previous = n
    return out


def _figures(calls: Sequence[Call]) -> dict[str, Any]:
    m = metrics(calls, decisions_of(calls))
    return {**headline(m), "repeats_caught": m["repeats_caught"],
            "repeats_blocked": m["repeats_blocked"], "successful_runs": m["successful_runs"],
            "successful_runs_wrongly_blocked": m["successful_runs_wrongly_blocked"]}  # fmt: skip


def firsts(arrivals: Sequence[Arrival]) -> dict[str, int | None]:
    """The position of the first run with a real repeat, a block, a correct block (a
    blocked call that failed) and a wrong one."""

    def first(pick: Any) -> int | None:
        return min((a.position for a in arrivals if pick(a.call)), default=None)

    return {
        "first_repeat": first(lambda c: c.repeat),
        "first_block": first(lambda c: c.check.decision == "block"),
        "first_correct_block": first(lambda c: c.check.decision == "block" and c.failed),
        "first_wrong_block": first(lambda c: c.check.decision == "block" and not c.failed),
    }


def figures(corpus: Corpus, replayed: Sequence[Replayed], thresholds: Thresholds) -> dict[str, Any]:
    """Per stream label (pooled over seeds): the learning curve, the firsts per seed,
    the families, the misses with their reason lines, and the disagreements."""
    groups: dict[str, list[Replayed]] = {}
    for r in replayed:
        groups.setdefault(r.stream.label, []).append(r)
    out: dict[str, Any] = {}
    for label, parts in groups.items():
        arrivals = [a for p in parts for a in p.arrivals]
        calls = [a.call for a in arrivals]
        length = max(len(p.stream.order) for p in parts)
        per_seed = [{"seed": p.stream.seed, **firsts(p.arrivals)} for p in parts]
        out[label] = {
            "kind": parts[0].stream.kind,
            "domain": parts[0].stream.domain,
            "sessions": length,
            "prior_sessions": len(parts[0].stream.prior),
            "seeds": [p.stream.seed for p in parts],
            "curve": curve(arrivals, length),
            "firsts": per_seed,
            "first_correct_block_median": _median([f["first_correct_block"] for f in per_seed]),
            "first_repeat_median": _median([f["first_repeat"] for f in per_seed]),
            "families": family_figures(calls, thresholds),
            "misses": unblocked(corpus, calls, thresholds),
            "disagreements": sum(p.disagreements for p in parts),
            "calls": len(calls),
            "seconds": round(sum(p.seconds for p in parts), 1),
            "timing": _timing(parts),
        }
    return out


def _timing(parts: Sequence[Replayed]) -> dict[str, Any]:
    """The check's p50, and taking in a run at the start and at the end of the stream
    (the first and the last 50 runs): what learning costs as the memory grows."""

    def p50(values: Sequence[float]) -> float | None:
        return round(statistics.median(values), 3) if values else None

    return {
        "check_ms_p50": p50([v for p in parts for v in p.check_ms]),
        "report_ms_p50_first_50": p50([v for p in parts for v in p.report_ms[:50]]),
        "report_ms_p50_last_50": p50([v for p in parts for v in p.report_ms[-50:]]),
    }


def _median(values: Sequence[int | None]) -> float | None:
    """The median position, a stream with none counted as never (``None`` when half or
    more never had one)."""
    known = sorted(v for v in values if v is not None)
    if len(known) * 2 <= len(values) - (len(values) % 2 == 0):
        return None
    padded = known + [NEVER] * (len(values) - len(known))
    middle = statistics.median(padded)
    return None if middle >= NEVER else middle


def first_block_targets(preq: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 26's "the first correct block on a new domain within 25 sessions", where
    the domain had a real repeat by then, for each domain alone and after the others
    (the worst seed)."""
    from benchmarks.harness.results import target

    out = []
    goal = f"<= {FIRST_BLOCK_GOAL} sessions"
    for label, s in preq.items():
        if s["kind"] not in ("alone", "after_others"):
            continue
        name = f"call_memory, prequential, {label}: first correct block (worst seed)"
        eligible = [f for f in s["firsts"] if (f["first_repeat"] or NEVER) <= FIRST_BLOCK_GOAL]
        if not eligible:
            note = f"no real repeat in the first {FIRST_BLOCK_GOAL} sessions"
            out.append(target(name, goal, None, None, note))
            continue
        worst = max((f["first_correct_block"] or NEVER) for f in eligible)
        out.append(target(name, goal, worst if worst < NEVER else "never",
                          worst <= FIRST_BLOCK_GOAL))  # fmt: skip
    return out


NEVER = 10**9
