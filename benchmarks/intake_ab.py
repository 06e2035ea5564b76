"""Report intake of one library against another's, in the same run: ``python -m
benchmarks.intake_ab TREE [TREE ...] [--chains N] [--rounds R]``.

Each TREE is a checkout of the repository (e.g. ``git worktree add /tmp/base 5408c51``
for the first round's library, and ``.`` for this one).  The world is ``bench_evict``'s
(10,000 tools with credentials, 30% of them reused by completed chains, N abandoned
chains of 2-4 tools), built from the seed in each process; each tree takes it in through
``Sidecar.report_many`` on a fresh home with the hashing embedder, in a process of its
own, the trees alternating for R rounds.  Only public API present in every round is
used, so that an old tree runs this unchanged.  Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

WORKER = r"""
import json, os, random, sys, tempfile, time
from pathlib import Path
tree, n = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, tree)
for k in list(os.environ):
    if k.startswith("SIDECAR_"):
        del os.environ[k]
from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.model import CredentialRef
rng = random.Random(7)
n_tools = 10_000
tools = [Tool(f"tool_{i}", f"synthetic tool {i} for benchmark",
              credentials=(CredentialRef(f"env:CRED_{i % (n_tools // 4)}"),))
         for i in range(n_tools)]
reports = []
reused = rng.sample(range(n_tools), int(n_tools * 0.3))
for i in range(0, len(reused) - 1, 2):
    reports.append({"topology": [f"tool_{reused[i]}", f"tool_{reused[i + 1]}"],
                    "outcome": "completed"})
for i in range(n):
    topology = [f"tool_{t}" for t in rng.sample(range(n_tools), rng.randint(2, 4))]
    reports.append({"topology": topology, "outcome": "abandoned",
                    "failure": {"signature": f"HTTP 413 #{i}", "kind": "deterministic"},
                    "constraint": {"rule": f"rule {i}"}})
with tempfile.TemporaryDirectory() as tmp:
    sc = Sidecar.open(embedder=HashingEmbedder(), home=Path(tmp) / "h")
    sc.add_tools(tools)
    wall, cpu = time.perf_counter(), time.process_time()
    results = sc.report_many(reports)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert sum(r.status == "archived" for r in results) == n
    sc.close()
print(json.dumps({"tree": tree, "chains": n, "seconds": round(wall, 2),
                  "chains_per_s": round(n / wall), "chains_per_cpu_s": round(n / cpu)}))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--chains", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    for _ in range(args.rounds):
        for tree in args.trees:
            out = subprocess.run(
                [sys.executable, "-c", WORKER, str(tree.resolve()), str(args.chains)],
                capture_output=True, text=True, check=True, env=env, cwd="/",
            )  # fmt: skip
            print(out.stdout.strip(), flush=True)
    print(json.dumps({"load_average_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
