"""A full disk: writes fail with a clear error and leave nothing half-written where
readers look, reads keep working, and once space is freed the next write succeeds."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.errors import StateUnavailable
from sidecar.model import Tool
from sidecar.tools.records import embedding_text
from tests.faults.faults import small_disk
from tests.faults.harness import Server, build_world, cli, state_rows
from tests.faults.invariants import check_home, check_server
from tests.sidecar.helpers import abandoned

NEW_CHAIN = abandoned(["t003", "t004", "t005"], "HTTP 422 new", session_id="after-the-disk")
NEW_TOOL = {"tool_id": "t_new", "description": "a tool added once there is room"}
FULL = ("No space left", "disk is full", "no space left")


def visible_files(home: Path) -> dict[str, int]:
    """Every Parquet file a reader sees, with its row count (all must be readable)."""
    return {
        str(p.relative_to(home)): pq.read_metadata(p).num_rows
        for p in sorted((home / "cold").rglob("*.parquet"))
        if not p.name.startswith(".") and "quarantine" not in p.parts
    }


def fill(disk: Path) -> Path:
    """Write a ballast file until the file system refuses another page."""
    ballast = disk / "ballast"
    with open(ballast, "wb", buffering=0) as handle:
        for size in (1 << 20, 1 << 16, 1 << 12):
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return ballast


def test_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Injects: a full disk.  Where this user may mount, the home is a 24 MiB tmpfs
    filled by a ballast file under a running server (a real ENOSPC from the kernel, for
    SQLite, Parquet and Chroma alike); elsewhere ENOSPC is raised at the cold store's
    publish and SQLite's "database or disk is full" at the state's intake write, in
    process (the test prints which one ran).

    Writes fail with 503 and a message that says the disk is full; no Parquet file
    appears or is torn, the state database stays intact; reads (lookup, listing,
    checks, audit) keep working; after the ballast is deleted the refused report and
    tool go through, and the invariants hold."""
    home = tmp_path / "home"
    with small_disk(home, "24m") as mounted:
        if mounted:
            print("\nfault mechanism (full disk): tmpfs mounted as the home, filled by a ballast")
            full_tmpfs(home)
        else:
            print("\nfault mechanism (full disk): ENOSPC injected at the write layer")
            enospc_at_the_write_layer(home, monkeypatch)


def full_tmpfs(home: Path) -> None:
    world = build_world(home, n_tools=20, chains=3)
    chains = [p.rsplit("/", 1)[1] for p in world["pointers"]]
    with Server(home) as server:
        before = visible_files(home)
        ballast = fill(home)
        answer = server.post("/v1/reports", {"reports": [NEW_CHAIN]})
        if answer.status_code == 200:
            # the state had room (SQLite's pages), the archive not: acknowledged, its
            # record waits in the state for the space to come back
            assert state_rows(home, "SELECT COUNT(*) FROM archive_pending") == [(1,)]
        else:
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["code"] in ("cold_store_unavailable", "state_unavailable"), error
            assert any(word in error["message"] for word in FULL), error
            # nothing half-written where readers look
            assert visible_files(home) == before
            assert state_rows(home, "SELECT COUNT(*) FROM archive_pending") == [(0,)]
        added = server.post("/v1/tools", {"tools": [NEW_TOOL]})
        assert added.status_code == 503, added.text
        ready = server.get("/readyz")
        assert ready.status_code == 503 and "No space left" in ready.text, ready.text
        assert state_rows(home, "PRAGMA quick_check") == [("ok",)]
        # reads keep working, from the server and from a CLI through it
        hits = server.post("/v1/search", {"query": "tool number", "k": 5})
        assert hits.status_code == 200 and len(hits.json()["hits"]) == 5
        assert len(server.get("/v1/tools").json()["tools"]) == 20
        assert server.post("/v1/check", {"plan": ["t000", "t001", "t019"]}).json()["safe"] is False
        assert server.get("/v1/audit", params={"pointer": world["pointers"][0]}).status_code == 200
        assert cli(home, "check", "t000,t001,t019").returncode == 3
        ballast.unlink()
        accepted = server.post("/v1/reports", {"reports": [NEW_CHAIN]})
        assert accepted.status_code == 200, accepted.text
        [result] = accepted.json()["results"]
        assert result["status"] == "archived", result
        assert server.post("/v1/tools", {"tools": [NEW_TOOL]}).status_code == 200
        # the refused write left Chroma listing t_new without its vector: the second
        # write must be read back and repaired, or t_new is never ranked again
        own_text = embedding_text(Tool(**NEW_TOOL))
        hits = server.post("/v1/search", {"query": own_text, "k": 3}).json()["hits"]
        assert hits[0]["tool_id"] == "t_new", hits
        check_server(server)
        server.stop()
    check_home(home, [*world["tools"], "t_new"], [*chains, result["chain_id"]])


def enospc_at_the_write_layer(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = build_world(home, n_tools=20, chains=3)
    chains = [p.rsplit("/", 1)[1] for p in world["pointers"]]
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        before = visible_files(home)

        def disk_full(*_args: object, **_kw: object) -> None:
            raise sqlite3.OperationalError("database or disk is full")

        # the state cannot take the batch: nothing of it anywhere
        monkeypatch.setattr(type(sc.state.pending), "enqueue", disk_full)
        with pytest.raises(StateUnavailable, match="disk is full"):
            sc.report(NEW_CHAIN)
        monkeypatch.undo()
        assert visible_files(home) == before
        assert state_rows(home, "SELECT COUNT(*) FROM archive_pending") == [(0,)]
        assert len(sc.search("tool number", k=5).hits) == 5
        assert not sc.check(["t000", "t001", "t019"]).safe

        def no_space(*_args: object, **_kw: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        # the state took it, the archive cannot: acknowledged, its record waits
        monkeypatch.setattr("cold_store.local.publish", no_space)
        result = sc.report(NEW_CHAIN)
        assert result.status == "archived", result
        assert "No space left" in sc.health().checks["cold_store"]
        assert sc.status().pending_records == 1
        assert sc.audit(str(result.pointer))["published"] is False
        monkeypatch.undo()
        sc.maintain()  # the space is back: published
        assert sc.status().pending_records == 0
        assert "published" not in sc.audit(str(result.pointer))
        sc.add_tools(sc.get_tools(["t000"]).values())  # a hot write works again too
    check_home(home, world["tools"], [*chains, str(result.chain_id)])


def test_enospc_at_the_write_layer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Injects: "database or disk is full" at the state's intake write, then ENOSPC at
    the cold store's publish, in process: the branch :func:`test_a_full_disk` takes on a
    machine that may not mount, run everywhere."""
    enospc_at_the_write_layer(tmp_path / "home", monkeypatch)
