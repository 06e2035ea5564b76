"""What must hold after any fault, once it is removed: one check for every scenario.

A fault may degrade service; it never costs correctness:

1. **clean recovery**: the owner of the home recovers by itself or on its next open
   (no unfinished move, not degraded, ready);
2. **one store per tool**: every tool ever added is either active (in the state's
   records *and* the hot index, which agree) or evicted (named by ``evicted_tools``,
   its record in the cold ``tools`` table, or, if that file was lost, quarantined and
   still held by the journal's intent), never both;
3. **no duplicate cold rows**: every key appears once across the Parquet files readers
   see (scanned file by file with pyarrow, not through the index), and every such file
   is readable;
4. **no lost report**: every chain a report was acknowledged as archived is in the
   cold store and compiled, or its file is quarantined and the status says how many
   chains are unreadable;
5. **one mandate per released credential**: mandate keys are unique, a credential has
   at most one open mandate, and every credential that left with an evicted tool and
   that no active tool uses has one;
6. **no evicted tool served**: neither a listing nor a lookup returns one.

:func:`check_home` asserts all of them on a home no process owns (it opens the home as
its owner, which is the "next open" of point 1); :func:`check_server` asserts points 1
and 6 on a running server, over HTTP.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.errors import ColdStoreUnavailable
from sidecar.tools.records import embedding_text
from tests.faults.harness import Server, state_rows

LOOKUPS = 12
"""Evicted tools looked up by their own description, at most, per check."""


@dataclass(frozen=True)
class HomeState:
    active: frozenset[str]
    evicted: dict[str, str]
    """Evicted tool -> its move id."""
    mandates: list[Any]
    cold_keys: dict[str, list[str]]
    """Keys of every visible Parquet file, per table."""


def cold_keys(home: Path, table: str, key: str) -> list[str]:
    """Every key of every Parquet file a reader of ``table`` sees, in no particular
    order; a file that cannot be read fails the check (readers would trip on it)."""
    keys: list[str] = []
    for path in sorted((home / "cold" / table).rglob("*.parquet")):
        if path.name.startswith("."):
            continue  # a temp file: never read
        keys += pq.read_table(path, columns=[key]).column(key).to_pylist()
    return keys


def journal(home: Path) -> tuple[dict[str, str], set[str], dict[str, list[str]]]:
    """``evicted_tools`` (tool -> move id), the tools whose move has not finished, and
    the credentials each evicted tool's move captured."""
    evicted = dict(state_rows(home, "SELECT tool_id, move_id FROM evicted_tools"))
    moving = {t for (t,) in state_rows(home, "SELECT tool_id FROM moves WHERE status != 'done'")}
    creds: dict[str, list[str]] = {}
    for tool, move, snapshot in state_rows(home, "SELECT tool_id, move_id, snapshot FROM moves"):
        if evicted.get(tool) == move:
            creds[tool] = [c["ref"] for c in json.loads(snapshot).get("credentials", [])]
    return evicted, moving, creds


def check_home(home: Path, tools: Collection[str], archived: Collection[str] = ()) -> HomeState:
    """Open ``home`` as its owner (no server may run on it) and assert every invariant.
    ``tools``: every tool ever added; ``archived``: the chain ids of every report
    acknowledged as archived."""
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        # 1. clean recovery, on this open
        status = sc.status()
        assert status.unfinished_moves == 0, status
        assert status.degraded is None, status
        health = sc.health()
        assert health.ready, health.checks

        # 2. every tool in exactly one store
        evicted, moving, creds = journal(home)
        assert not moving
        records = {t.tool_id: t for t in sc.list_tools()}
        hot = {r.id for r in sc.index.scan()}
        assert hot == set(records), ("hot index and records differ", hot ^ set(records))
        assert not set(records) & set(evicted), set(records) & set(evicted)
        assert set(records) | set(evicted) == set(tools), set(tools) ^ (set(records) | set(evicted))
        quarantined = {q.file for q in status.quarantined}
        for tool, move in evicted.items():
            record = sc.audit(f"cold://tools/{move}")
            assert record["tool_id"] == tool
            if "source" in record:  # its cold file was lost: the journal still holds it
                assert quarantined, record["source"]

        # 3. no duplicate cold rows, every visible file readable
        keys = {
            "chains": cold_keys(home, "chains", "chain_id"),
            "tools": cold_keys(home, "tools", "record_id"),
        }
        for table, found in keys.items():
            twice = [k for k, n in Counter(found).items() if n > 1]
            assert not twice, f"{table}: rows written twice: {twice}"
        assert set(evicted.values()) <= set(keys["tools"]) or quarantined

        # 4. no lost report
        compiled = {c.chain_id for c in sc.constraints(include_lifted=True)}
        for cid in archived:
            assert cid in compiled, f"acknowledged chain {cid} is not compiled"
            try:
                assert sc.audit(f"cold://chains/{cid}")["chain_id"] == cid
            except ColdStoreUnavailable:
                assert status.unreadable_chains > 0, f"chain {cid} lost without a word"

        # 5. one mandate per released credential
        mandates = sc.mandates()
        assert len({m.idempotency_key for m in mandates}) == len(mandates)
        open_refs = Counter(m.ref for m in mandates if m.status != "cancelled")
        assert all(n == 1 for n in open_refs.values()), open_refs
        in_use = {c.ref for t in records.values() for c in t.credentials}
        released = {ref for refs in creds.values() for ref in refs} - in_use
        assert released <= set(open_refs), released - set(open_refs)

        # 6. no evicted tool served, every active one found (its vector kept)
        assert_not_served(sc, set(evicted))
        for tool in records.values():
            [top] = sc.search(embedding_text(tool), k=1).hits
            assert top.tool_id == tool.tool_id or top.score >= 0.9999, (tool.tool_id, top)
        return HomeState(frozenset(records), evicted, mandates, keys)


def assert_not_served(sc: Any, cold: set[str]) -> None:
    """A listing and lookups aimed at cold tools return none of them (``sc``: the
    library or a :class:`~sidecar.shells.client.RemoteSidecar`)."""
    listed = {t.tool_id for t in sc.list_tools()}
    assert not listed & cold, listed & cold
    queries = [f"tool number {t}" for t in sorted(cold)[:LOOKUPS]] + ["tool number"]
    for query in queries:
        hits = {h.tool_id for h in sc.search(query, k=100).hits}
        assert not hits & cold, (query, hits & cold)


def check_server(server: Server) -> None:
    """On a running server: ready, and no tool the state says is cold (evicted, or with
    its move begun) is listed or found."""
    from sidecar import RemoteSidecar

    ready = server.get("/readyz")
    assert ready.status_code == 200, ready.text
    evicted, moving, _ = journal(server.home)
    with RemoteSidecar(server.url, server.token) as remote:
        assert_not_served(remote, set(evicted) | moving)
