"""Two sidecar replicas sharing one memory: what an agent reports to the first, the
second blocks on its very next check.

The shop of ``library_agent.py`` (an exchange is refused while an order is pending):
the agent adds its tools and reports its 23 sessions to replica 1, then a new
customer's exchange on a pending order is checked on replica 2, which blocks it
(the memory is the shared PostgreSQL database), audits the pointer of the rule (the
cold archive is shared too), and lets the exchange of a delivered order through.

    python examples/replicas_agent.py                    # starts its own replicas
    python examples/replicas_agent.py --url URL1 --url URL2   # replicas already up

With no ``--url`` it starts two replicas, PostgreSQL, a Chroma server and an S3 server
(``benchmarks.cluster``) and stops them all at the end.  With ``--url``, it talks to
replicas started by ``python -m benchmarks.cluster`` (the token from
``$SIDECAR_TOKEN``, as that command prints it); on those, run it once: a second run
reports the same sessions, which count once, and adds nothing new.
``tests/integration/test_examples.py`` runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

# the shop and its sessions are library_agent's (in this folder), and the cluster is
# benchmarks.cluster (in the repository root): both importable from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from library_agent import TOOLS, customer_reports, run_tool

from sidecar import RemoteSidecar


@contextlib.contextmanager
def replicas(urls: list[str], embedder: str) -> Iterator[list[RemoteSidecar]]:
    """Clients of the replicas at ``urls``, or of two replicas started for the run."""
    if urls:
        token = os.environ.get("SIDECAR_TOKEN")
        clients = [RemoteSidecar(u, token, token_source="$SIDECAR_TOKEN") for u in urls]
        try:
            yield clients
        finally:
            for c in clients:
                c.close()
        return
    from benchmarks.cluster import Cluster

    print("starting two replicas, PostgreSQL, Chroma and S3 ...", flush=True)
    with Cluster(replicas=2, cold="s3", embedder=embedder) as cluster:
        yield cluster.clients


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", action="append", default=[], help="a replica (twice)")
    parser.add_argument(
        "--embedder", default="minilm", help="for replicas it starts (hashing: faster)"
    )
    args = parser.parse_args(argv)
    if len(args.url) not in (0, 2):
        parser.error("give --url twice (replica 1, then replica 2), or not at all")
    if not args.url:
        # the servers it starts need more than `make run` installs: say what, and how,
        # before starting any of them
        from benchmarks.cluster import missing

        lacking = missing("s3")
        if lacking:
            print("\n".join(f"replicas_agent: {m}" for m in lacking), file=sys.stderr)
            return 2
    with replicas(args.url, args.embedder) as (one, two):
        run_agent(one, two)
    return 0


def run_agent(one: RemoteSidecar, two: RemoteSidecar) -> None:
    added = one.add_tools(TOOLS)
    print(f"1. replica 1 ({one.url}): added {len(added.added)} tools")

    results = one.report_many(customer_reports())
    archived = sum(r.status == "archived" for r in results)
    recorded = sum(r.status == "recorded" for r in results)
    print(
        f"2. replica 1: reported {len(results)} sessions: {archived} archived (the refused "
        f"exchanges), {recorded} recorded"
    )

    # the new customer's agent talks to the other replica
    steps = [run_tool("get_order", {"order_id": "#W5"})]
    planned = {"order_id": "#W5", "item": "blue shirt"}
    verdict = two.check_call([s.to_dict() for s in steps], "exchange_item", planned)
    print(f"3. replica 2 ({two.url}): check exchange_item({json.dumps(planned)}): "
          f"{verdict.decision.upper()}")  # fmt: skip
    for reason in verdict.reasons[:1]:
        print(f"   {reason.level}: {reason.explanation}")
        if reason.pointer:
            record = two.audit(reason.pointer)
            print(f"   audit on replica 2: {reason.pointer} ({len(record['steps'])} steps, "
                  f"failed with {record['terminal_signature']!r})")  # fmt: skip

    steps = [run_tool("get_order", {"order_id": "#W31"})]
    delivered = two.check_call(
        [s.to_dict() for s in steps], "exchange_item", {"order_id": "#W31", "item": "red shirt"}
    )
    print(f"4. replica 2: exchange_item on the delivered #W31: {delivered.decision.upper()}")
    digests = {one.digest().digest, two.digest().digest}
    print(f"5. archive digest: {'the same on both' if len(digests) == 1 else 'DIFFERENT'}")


if __name__ == "__main__":
    raise SystemExit(main())
