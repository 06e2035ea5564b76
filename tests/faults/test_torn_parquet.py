"""Torn and garbage Parquet files in ``cold/chains`` and ``cold/tools``: quarantined and
counted, every other record readable, and an evicted tool whose cold record was lost can
still be restored, with its audit trail."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq

from indexes import HashingEmbedder
from sidecar import Sidecar
from tests.faults.harness import Server, build_world, cli
from tests.faults.invariants import check_home
from tests.sidecar.helpers import abandoned


def tear(path: Path) -> None:
    """Cut a file in half, as a crash of a writer that did not publish atomically would."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def keys(path: Path, column: str) -> list[str]:
    return list(pq.read_table(path, columns=[column]).column(column).to_pylist())


def garbage(folder: Path, rng: random.Random) -> Path:
    """A file named like a published part but holding random bytes."""
    path = folder / f"part-20260101T000000000000Z-{rng.getrandbits(128):032x}.parquet"
    path.write_bytes(rng.randbytes(4096))
    return path


def test_torn_and_garbage_parquet_files(tmp_path: Path) -> None:
    """Injects: in ``cold/chains``, one published file cut in half (its chain is lost)
    and one file of random bytes; in ``cold/tools``, the file holding the first
    eviction's records cut in half and one file of random bytes.

    Read-only (a CLI with no owner): ``archive status`` and ``archive digest`` count 1
    unreadable chain and the digest covers the readable ones; auditing the lost chain
    exits 7 ``cold_store_unavailable``.  Owned (a server): the bad files are moved to
    quarantine and listed; every other chain and tool record is readable; the lost
    chain's constraint is still enforced (the state compiled it); its audit is 503; an
    evicted tool whose cold record was lost is audited from the journal's intent and
    restored (``POST /v1/tools/ID/restore`` and ``sidecar restore``), and its audit
    shows the restore."""
    rng = random.Random(20261201)
    home = tmp_path / "home"
    world = build_world(home, n_tools=13, chains=2)  # t000..t003 prefix tools, t012 last
    tools = world["tools"]
    chain_ids = [p.rsplit("/", 1)[1] for p in world["pointers"]]
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        first = sc.evict()  # one cold tools file ...
        assert {d.tool_id for d in first.evicted} == {"t000", "t001", "t002", "t003"}
        for i, (a, b) in enumerate([("t004", "t005"), ("t006", "t007"), ("t008", "t009")]):
            got = sc.report(abandoned([a, b, "t012"], f"HTTP 409 later #{i}"))
            assert got.status == "archived"
            chain_ids.append(str(got.chain_id))
        second = sc.evict()  # ... and another
        assert {d.tool_id for d in second.evicted} == {f"t{i:03d}" for i in range(4, 10)}
    chain_files = sorted((home / "cold" / "chains").rglob("*.parquet"))
    tool_files = sorted((home / "cold" / "tools").rglob("*.parquet"))
    assert len(chain_files) == 5 and len(tool_files) == 2
    lost = chain_ids[1]
    torn_chain = next(f for f in chain_files if lost in keys(f, "chain_id"))
    tear(torn_chain)
    garbage(torn_chain.parent, rng)
    torn_tools = next(f for f in tool_files if "t000" in keys(f, "tool_id"))
    tear(torn_tools)
    garbage(torn_tools.parent, rng)

    # a reader, with no owner: counts what it cannot read, moves nothing
    status = cli(home, "archive", "status", "--json")
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)
    assert (st["chains"], st["unreadable_chains"]) == (4, 1), st
    assert torn_chain.exists(), "a reader never moves a file"
    digest = cli(home, "archive", "digest", "--json")
    assert digest.returncode == 0, digest.stderr
    assert json.loads(digest.stdout)["chains"] == 4
    assert json.loads(digest.stdout)["unreadable_chains"] == 1
    assert "1 chain(s) unreadable" in cli(home, "archive", "digest").stdout
    audit_lost = cli(home, "audit", f"cold://chains/{lost}", "--json")
    assert audit_lost.returncode == 7, audit_lost.stderr
    assert json.loads(audit_lost.stderr)["error"]["code"] == "cold_store_unavailable"

    with Server(home) as server:
        st = server.get("/v1/archive/status").json()
        assert (st["chains"], st["unreadable_chains"]) == (4, 1), st
        moved = {Path(q["path"]).name for q in st["quarantined"]}
        assert {torn_chain.name, torn_tools.name} <= moved and len(moved) == 4, moved
        assert not torn_chain.exists() and not torn_tools.exists()
        digest_body = server.get("/v1/archive/digest").json()
        assert (digest_body["chains"], digest_body["unreadable_chains"]) == (4, 1)
        for cid in chain_ids:
            audited = server.get("/v1/audit", params={"pointer": f"cold://chains/{cid}"})
            if cid == lost:
                assert audited.status_code == 503, audited.text
                assert audited.json()["error"]["code"] == "cold_store_unavailable"
            else:
                assert audited.status_code == 200, audited.text
        # the lost chain's constraint was compiled into the state: still enforced
        assert server.post("/v1/check", {"plan": ["t002", "t003", "t012"]}).json()["safe"] is False
        for tool in ("t004", "t009"):  # records in the readable tools file
            record = server.get("/v1/audit", params={"pointer": f"cold://tools/{tool}"}).json()
            assert record["tool_id"] == tool and "source" not in record
        lost_record = server.get("/v1/audit", params={"pointer": "cold://tools/t000"})
        assert lost_record.status_code == 200, lost_record.text
        assert lost_record.json()["source"].startswith("journal intent")
        assert lost_record.json()["document"].startswith("t000")
        restored = server.post("/v1/tools/t000/restore", {"reason": "parser fixed"})
        assert restored.status_code == 200, restored.text
        by_cli = cli(home, "restore", "t001", "--reason", "fixed too", "--json")
        assert by_cli.returncode == 0, by_cli.stderr
        listed = {t["tool_id"] for t in server.get("/v1/tools").json()["tools"]}
        assert {"t000", "t001"} <= listed
        hits = server.post("/v1/search", {"query": "tool number t000", "k": 3}).json()["hits"]
        assert "t000" in {h["tool_id"] for h in hits}
        trail = server.get("/v1/audit", params={"pointer": "cold://tools/t000"}).json()
        assert [r["reason"] for r in trail["restores"]] == ["parser fixed"]
        server.stop()
    check_home(home, tools, chain_ids)
