"""Two processes on one home: a server and a local CLI (which must go through the server),
and two local writers at once (the second is refused, nothing is corrupted)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import Busy, Sidecar
from sidecar.app.lock import holder
from tests.faults.harness import (
    SCRIPT,
    Server,
    build_world,
    cli,
    env_for,
    no_traceback,
    wait_until,
)
from tests.faults.invariants import check_home, check_server
from tests.sidecar.helpers import abandoned

DEAD_CHROMA = "http://127.0.0.1:9"
"""Nothing listens there: a CLI that opened the stores itself could not look anything up."""


def lookups(server: Server) -> int:
    found = re.search(r"^sidecar_lookups_total (\d+)$", server.get("/metrics").text, re.M)
    return int(found.group(1)) if found else 0


def test_a_local_cli_goes_through_the_server_that_owns_the_home(tmp_path: Path) -> None:
    """Injects: a second process on a served home (local CLI commands without
    ``--url``, run with ``SIDECAR_CHROMA_URL`` pointing at a dead address, so that any
    command that opened the stores itself would fail).

    Each command is answered by the server (its lookup counter moves by one per CLI
    lookup); a report sent by the CLI is enforced by the server's own lookups and
    checks at once; the library refuses to open the home for writing with ``Busy``
    naming the server's URL; the invariants hold afterwards."""
    home = tmp_path / "home"
    world = build_world(home, n_tools=20, chains=2)
    report = tmp_path / "r.jsonl"
    report.write_text(json.dumps(abandoned(["t010", "t011", "t019"], "HTTP 400 via cli")) + "\n")
    with Server(home) as server:
        env = env_for(home, SIDECAR_CHROMA_URL=DEAD_CHROMA)
        before = lookups(server)
        found = cli(home, "search", "tool number t012", "-k", "3", "--json", env=env)
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["hits"][0]["tool_id"] == "t012"
        assert lookups(server) == before + 1
        sent = cli(home, "report", str(report), "--json", env=env)
        assert sent.returncode == 0, sent.stderr
        chain = json.loads(sent.stdout)
        assert chain["status"] == "archived"
        checked = server.post("/v1/check", {"plan": ["t010", "t011", "t019"]}).json()
        assert checked["safe"] is False
        after = server.post(
            "/v1/search", {"query": "tool number t019", "k": 3, "after": ["t010", "t011"]}
        ).json()
        assert "t019" not in {h["tool_id"] for h in after["hits"]}
        assert after["withheld"][0]["tool_id"] == "t019"
        assert cli(home, "check", "t010,t011,t019", env=env).returncode == 3
        assert '"path": "/v1/reports"' in server.text()
        with pytest.raises(Busy, match=re.escape(f"--url {server.url}")):
            Sidecar.open(embedder=HashingEmbedder(), home=home)
        check_server(server)
        server.stop()
    pointers = [p.rsplit("/", 1)[1] for p in world["pointers"]]
    check_home(home, world["tools"], [*pointers, chain["chain_id"]])


def test_two_local_writers_at_once(tmp_path: Path) -> None:
    """Injects: a second local writer while a first one holds the home (``sidecar
    report -`` waiting on its input, the home's owner lock held).

    The second writer (tools add, evict, a report) exits 6 ``busy`` naming the holder's
    pid, without a traceback, and the library raises ``Busy``; reads still work; the
    first writer then finishes normally, and the invariants hold."""
    home = tmp_path / "home"
    world = build_world(home, n_tools=20, chains=2)
    tools = tmp_path / "tools.jsonl"
    tools.write_text(json.dumps({"tool_id": "t_new", "description": "new"}) + "\n")
    line = json.dumps(abandoned(["t012", "t013", "t019"], "HTTP 400 first writer"))
    first = subprocess.Popen(
        [SCRIPT, "report", "-", "--json"],
        env=env_for(home),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: (holder(home / "owner.lock", "writer") or "").startswith(f"pid {first.pid}"),
            60,
            "the first writer to own the home",
        )
        for argv in (["tools", "add", str(tools)], ["evict"], ["report", "-"]):
            second = cli(home, *argv, "--json", stdin=line + "\n")
            assert second.returncode == 6, (argv, second.stderr)
            error = json.loads(second.stderr)["error"]
            assert error["code"] == "busy" and f"pid {first.pid}" in error["message"], error
            no_traceback(second)
        with pytest.raises(Busy):
            Sidecar.open(embedder=HashingEmbedder(), home=home)
        assert cli(home, "check", "t000,t001,t019").returncode == 3  # a read takes no lock
        out, err = first.communicate(line + "\n", timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
    assert first.returncode == 0, err
    result = json.loads(out)
    assert result["status"] == "archived"
    pointers = [p.rsplit("/", 1)[1] for p in world["pointers"]]
    state = check_home(home, world["tools"], [*pointers, result["chain_id"]])
    assert "t_new" not in state.active
