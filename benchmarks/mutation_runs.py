"""A simulated domain's mutation runs: the record of one seeded mistake the service
refuses, and the round robin that draws a task's mutation runs from its candidates
(the ``apibank`` and ``booking`` domains of ``bench_failures``)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.tau2 import Run
from sidecar.memory import Step


@dataclass(frozen=True)
class Mutation:
    kind: str
    at: int
    """The index of the refused call in :attr:`steps`."""
    steps: tuple[Step, ...]
    told: tuple[str, ...]
    """The user's turns before each call."""


def mutation_runs(
    task: str,
    domain: str,
    found: Sequence[Mutation],
    kinds: Sequence[str],
    runs: int,
    key: str,
) -> list[tuple[Run, Mutation]]:
    """Up to ``runs`` abandoned runs of ``task``: run ``r`` takes the next of ``kinds``
    (those ``found`` has, in that order) from an offset drawn by ``Random(key)``, and a
    candidate of that kind drawn by ``Random(f"{key}:{r}")``; a run that would repeat
    another of the task is skipped (it would be one situation twice)."""
    present = [k for k in kinds if any(m.kind == k for m in found)]
    if not present:
        return []
    offset = random.Random(key).randrange(len(present))
    taken: set[tuple[Step, ...]] = set()
    out: list[tuple[Run, Mutation]] = []
    for r in range(runs):
        kind = present[(offset + r) % len(present)]
        pool = [m for m in found if m.kind == kind and m.steps not in taken]
        if not pool:
            continue
        mutation = random.Random(f"{key}:{r}").choice(pool)
        taken.add(mutation.steps)
        run = Run(f"{task}#m{r}", domain, task, f"mutation:{kind}", 0.0, mutation.steps,
                  mutation.told)  # fmt: skip
        out.append((run, mutation))
    return out
