"""Question: how many tools would each eviction threshold remove, and how many viable
successor steps need one of them, per dataset and protocol seed?

A fast companion to the pollution benchmark (no model, no index): it applies the
eviction rule of :func:`sidecar.eviction.decide` to the history half of each seed's
split, as the pollution protocol reports it (multi-step abandoned chains whose
signature the classification table does not call transient; a tool used by a completed
history chain is kept), and counts the steps of completed successor-half chains that
use an evicted tool.  Run ``python -m benchmarks.eviction_evidence [--dataset DIR]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_DATASETS
from benchmarks.datasets import Corpus, Task, seal_tools, toolbench

SEEDS = range(7, 12)
THRESHOLDS = (1, 2, 3)


def evicted_by_threshold(corpus: Corpus, seed: int) -> tuple[dict[int, set[str]], list[Task]]:
    """The tools each threshold evicts after the seed's history half, and the completed
    successor-half tasks."""
    from benchmarks.pollution_world import split
    from sidecar.classify import classify

    history, successors = split(corpus.tasks, seed)
    # one archived chain per distinct report, as the library's chain id has it (the
    # topology with its signature and rule, the rule written from the reason), and the
    # distinct sessions that met each: the library counts dead-end sessions
    sessions: dict[tuple[tuple[str, ...], str, str], set[str]] = {}
    for t in history:
        if (
            t.outcome == "abandoned"
            and len(t.chain) >= 2
            and classify(t.signature).kind != "transient"
        ):
            key = (t.chain, t.signature, t.reason)
            sessions.setdefault(key, set()).add(f"{t.source}:{t.task_id}")
    used = {tool for t in history if t.outcome == "completed" for tool in t.chain}
    drivers: dict[str, int] = {}
    for (chain, _signature, _reason), met in sessions.items():
        # a tool is never a prefix tool of its own failure
        for tool in set(chain[:-1]) - {chain[-1]}:
            drivers[tool] = drivers.get(tool, 0) + len(met)
    evicted = {
        n: {tool for tool, count in drivers.items() if count >= n and tool not in used}
        for n in THRESHOLDS
    }
    return evicted, [t for t in successors if t.outcome == "completed" and t.chain]


def evidence(corpus: Corpus, seed: int) -> dict[str, Any]:
    evicted, viable = evicted_by_threshold(corpus, seed)
    out: dict[str, Any] = {"viable_steps": sum(len(t.chain) for t in viable)}
    for n in THRESHOLDS:
        out[f"min_chains_{n}"] = {
            "evicted_tools": len(evicted[n]),
            "viable_steps_on_evicted_tools": sum(
                tool in evicted[n] for t in viable for tool in t.chain
            ),
        }
    return out


def run(dataset: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"toolbench": {}, "seal_tools": {}}
    bench = toolbench(dataset)
    for seed in SEEDS:
        result["toolbench"][str(seed)] = evidence(bench, seed)
        # Seal-Tools' abandoned designation is seeded per protocol seed
        result["seal_tools"][str(seed)] = evidence(seal_tools(dataset, seed), seed)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eviction_evidence")
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    args = parser.parse_args(argv)
    result = run(args.dataset.resolve())
    print(json.dumps(result, indent=2))
    for name, seeds in result.items():
        for n in THRESHOLDS:
            key = f"min_chains_{n}"
            tools = [s[key]["evicted_tools"] for s in seeds.values()]
            steps = [s[key]["viable_steps_on_evicted_tools"] for s in seeds.values()]
            print(
                f"{name} min_chains={n}: evicted tools {min(tools)}-{max(tools)}, "
                f"viable steps on them {min(steps)}-{max(steps)}"
            )


if __name__ == "__main__":
    main()
