"""BFCL's multi-turn simulators as failure-memory sessions: the ``bfcl`` domain of
``bench_failures``, built from the installed ``bfcl-eval`` package (2026.3.23, installed
without its dependencies, ``pip install --no-deps bfcl-eval==2026.3.23 mpmath``; its
simulators need only the standard library and mpmath).  Nothing is downloaded.

Scenarios (:mod:`benchmarks.bfcl_simulators`): only those of the ``TravelAPI``,
``TradingBot``, ``GorillaFileSystem`` and ``MathAPI`` classes; every scenario touching
a reserved class is dropped before anything else is read of it.  Mutations:
:mod:`benchmarks.bfcl_mutations`.

Choices, each counted in :attr:`Corpus.notes`:

- the ``multi_turn_base`` category only (65 of its 200 scenarios pass the filter): the
  ``long_context``, ``miss_func`` and ``miss_param`` categories restate the same
  scenarios with a larger state or a withheld function or parameter, and would put
  one situation under several task ids, on both sides of a split;
- a *ground-truth run* is one scenario's ground-truth calls, every turn in order, on
  fresh simulator instances loaded with a deep copy of the scenario's initial
  configuration; its reward is 1 (every one succeeds on the simulators; a verification
  that answers no, ``verify_traveler_information``'s ``verification_status: false``,
  is an answer and not an error);
- a *mutation run* changes the ground truth in one way that makes the simulator return
  an error; each candidate (every mutation the scenario admits, its parameters drawn
  from ``Random("bfcl:<seed>:<scenario>")``) is executed on fresh simulators, and one
  is discarded when it meets no error, when its first refusal is not its own doing (an
  inserted undo that is refused itself, a changed argument with the refusal at another
  call), or when it gives the same steps as another.  Run ``r``
  (``r < runs_per_scenario``, 3 by default) takes the next kind in a round robin over
  the kinds the scenario admits, from a seeded offset, and a candidate of that kind
  drawn by ``Random("bfcl:<seed>:<scenario>:<r>")``; a scenario with fewer valid
  mutations gets fewer runs.  So the same tool succeeds in one run of a scenario and
  fails in another, by its arguments or by the state the earlier calls left;
- a mutation run ends, abandoned (reward 0), with its first failing call: these
  sessions have no plan past a refusal (a ground truth that went on would be scored
  by calls the scenario never planned), and an agent that meets one has to re-plan;
- a step is ``Step(tool, arguments, output, error)``: a refusal's error is the
  simulator's text and its output is ``None`` (as in the τ² corpus); a result is kept
  as JSON;
- what the agent had been told before a call is the user's turns up to and including
  the call's turn (a call inserted by a mutation belongs to the turn of the call it
  precedes);
- ``task`` is ``bfcl/<scenario id>``, ``agent`` ``ground_truth`` or
  ``mutation:<kind>``, ``domain`` ``bfcl``; the tools are the package's function docs
  of the four classes.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.bfcl_mutations import KINDS, Mutation, candidates
from benchmarks.bfcl_simulators import (
    Scenario,
    execute,
    missing,
    read_scenarios,
    tool_definitions,
    tool_type,
)
from benchmarks.tau2 import Corpus, Run
from sidecar.memory import Step

DOMAIN = "bfcl"
RUNS_PER_SCENARIO = 3


@dataclass(frozen=True)
class Built:
    """A run with how it was made: its scenario and, for a failing run, the mutation."""

    run: Run
    scenario: Scenario
    mutation: Mutation | None = None


def missing_files() -> list[str]:
    """What the domain needs and is not installed (the package)."""
    return missing()


def build(
    seed: int = 0, runs_per_scenario: int = RUNS_PER_SCENARIO, folder: Path | None = None
) -> tuple[list[Built], dict[str, int]]:
    """Every ground-truth run and mutation run, scenario by scenario, and the counts."""
    scenarios, read = read_scenarios(folder)
    notes: Counter[str] = Counter(read)
    out: list[Built] = []
    for scenario in scenarios:
        steps, failed = execute(scenario, scenario.calls, stop_at_error=False)
        notes["ground_truth_runs"] += 1
        notes["ground_truth_calls"] += len(steps)
        notes["ground_truth_failing_calls"] += failed is not None
        notes["verification_answered_no"] += sum(
            isinstance(s.output, dict) and s.output.get("verification_status") is False
            for s in steps
        )
        out.append(Built(_run(scenario, "ground_truth", 0, steps, 1.0), scenario))
        chosen = _mutations(scenario, seed, runs_per_scenario, notes)
        notes["scenarios_short_of_mutations"] += len(chosen) < runs_per_scenario
        for r, (mutation, mutated) in enumerate(chosen):
            notes[f"mutation:{mutation.kind}"] += 1
            run = _run(scenario, f"mutation:{mutation.kind}", r, mutated, 0.0, mutation)
            out.append(Built(run, scenario, mutation))
    notes["runs"] = len(out)
    notes["mutation_runs"] = len(out) - notes["ground_truth_runs"]
    notes["calls"] = sum(len(b.run.steps) for b in out)
    notes["error_calls"] = sum(s.error is not None for b in out for s in b.run.steps)
    return out, dict(notes)


def load(seed: int = 0, runs_per_scenario: int = RUNS_PER_SCENARIO) -> Corpus:
    """The domain as a :class:`~benchmarks.tau2.Corpus` (the τ² corpus's types)."""
    from sidecar.tools.catalog import load_tools

    built, notes = build(seed, runs_per_scenario)
    tools = load_tools([tool_definitions()], "bfcl-eval function docs")
    typed = [replace(t, tool_type=tool_type(t.tool_id)) for t in tools]
    return Corpus([b.run for b in built], notes, typed)


def _mutations(
    scenario: Scenario, seed: int, k: int, notes: Counter[str]
) -> list[tuple[Mutation, list[Step]]]:
    rng = random.Random(f"bfcl:{seed}:{scenario.scenario_id}")
    valid: dict[str, list[tuple[Mutation, list[Step]]]] = defaultdict(list)
    seen: set[str] = set()
    for mutation in candidates(scenario, rng):
        notes["mutation_candidates"] += 1
        steps, failed = execute(scenario, mutation.calls, mutation.state)
        if failed is None:
            notes["mutation_candidates_without_error"] += 1
            continue
        if not mutation.caused(failed):
            notes["mutation_candidates_refused_elsewhere"] += 1
            continue
        key = json.dumps(
            [[s.tool, s.arguments] for s in steps] + [mutation.state],
            sort_keys=True,
            default=str,
        )
        if key in seen:
            notes["mutation_candidates_duplicate"] += 1
            continue
        seen.add(key)
        valid[mutation.kind].append((mutation, steps))
    kinds = [kind for kind in KINDS if valid[kind]]
    chosen: list[tuple[Mutation, list[Step]]] = []
    if not kinds:
        return chosen
    offset = rng.randrange(len(kinds))
    for r in range(k):
        order = [kinds[(offset + r + j) % len(kinds)] for j in range(len(kinds))]
        kind = next((kind for kind in order if valid[kind]), None)
        if kind is None:
            break
        pool = valid[kind]
        chosen.append(pool.pop(random.Random(f"bfcl:{seed}:{scenario.scenario_id}:{r}")
                               .randrange(len(pool))))  # fmt: skip
    return chosen


def _run(
    scenario: Scenario,
    agent: str,
    r: int,
    steps: list[Step],
    reward: float,
    mutation: Mutation | None = None,
) -> Run:
    calls = mutation.calls if mutation else scenario.calls
    told = tuple(scenario.told_before(c.turn) for c in calls[: len(steps)])
    suffix = "gt" if mutation is None else f"m{r}"
    return Run(
        run_id=f"{DOMAIN}/{scenario.scenario_id}/{suffix}",
        domain=DOMAIN,
        task=f"{DOMAIN}/{scenario.scenario_id}",
        agent=agent,
        reward=reward,
        steps=tuple(steps),
        told_before=told,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.bfcl [--seed S] [--runs N]``: the counts, and each
    mutation run's kind, change and the refusal it met."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bfcl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=RUNS_PER_SCENARIO)
    args = parser.parse_args(argv)
    lost = missing_files()
    if lost:
        raise SystemExit(f"benchmarks.bfcl: missing {', '.join(lost)}")
    built, notes = build(args.seed, args.runs)
    print(json.dumps(notes, indent=1))
    for b in built:
        if b.mutation is not None:
            last = b.run.steps[-1]
            print(f"{b.run.run_id}\t{b.mutation.kind}\t{b.mutation.detail}\t"
                  f"{last.tool}: {last.error}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
