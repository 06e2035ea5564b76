"""The home becomes read-only under a local CLI: writes fail with a clear message and
exit code 7, reads that need no writable store keep working, nothing is left broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.errors import StateUnavailable
from tests.faults.faults import read_only_home
from tests.faults.harness import build_world, cli, no_traceback
from tests.faults.invariants import check_home
from tests.sidecar.helpers import abandoned


def test_a_read_only_home_refuses_local_writes_and_serves_reads(tmp_path: Path) -> None:
    """Injects: the whole home made read-only (a read-only bind mount where this user
    may mount, which stops root too; else ``chattr -R +i``; else ``chmod -R a-w`` for a
    user who is not root); the test prints which one ran.

    Every local write (report, tools add, evict, restore) exits 7 with
    ``state_unavailable`` and a message that names the home, no traceback; the library
    refuses to open the home for writing.  Listing, plan checks, audits, the status and
    the digest still work; a lookup, which needs the embedded Chroma store that writes
    as it opens, exits 7 with a message saying so.  Once the home is writable again the
    refused report goes through and the invariants hold."""
    home = tmp_path / "home"
    world = build_world(home, n_tools=10, chains=3)
    report = tmp_path / "report.jsonl"
    report.write_text(json.dumps(abandoned(["t003", "t004", "t005"], "HTTP 422 #new")) + "\n")
    tools = tmp_path / "tools.jsonl"
    tools.write_text(json.dumps({"tool_id": "t_new", "description": "a new tool"}) + "\n")
    with read_only_home(home) as mechanism:
        print(f"\nfault mechanism (read-only home): {mechanism}")
        writes = [
            ["report", str(report)],
            ["tools", "add", str(tools)],
            ["evict"],
            ["restore", "t000", "--reason", "fixed"],
        ]
        for argv in writes:
            refused = cli(home, *argv, "--json")
            assert refused.returncode == 7, (argv, refused.stdout, refused.stderr)
            assert json.loads(refused.stderr)["error"]["code"] == "state_unavailable"
            no_traceback(refused)
        human = cli(home, "report", str(report))
        assert human.returncode == 7
        assert human.stderr.startswith(f"sidecar: error: cannot lock the sidecar home {home}")
        with pytest.raises(StateUnavailable, match="cannot lock the sidecar home"):
            Sidecar.open(embedder=HashingEmbedder(), home=home)

        listed = cli(home, "tools", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert {t["tool_id"] for t in json.loads(listed.stdout)["tools"]} == set(world["tools"])
        assert cli(home, "check", "t000,t001,t009").returncode == 3
        assert cli(home, "check", "t001,t000").returncode == 0
        audited = cli(home, "audit", world["pointers"][0], "--json")
        assert audited.returncode == 0, audited.stderr
        assert json.loads(audited.stdout)["topology"] == ["t000", "t001", "t009"]
        status = cli(home, "archive", "status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["chains"] == 3
        assert cli(home, "archive", "digest").returncode == 0
        lookup = cli(home, "search", "tool number", "--json")
        assert lookup.returncode == 7, lookup.stdout
        error = json.loads(lookup.stderr)["error"]
        assert error["code"] == "index_unavailable"
        assert "writes as it opens" in error["message"]
        no_traceback(lookup)
    accepted = cli(home, "report", str(report), "--json")
    assert accepted.returncode == 0, accepted.stderr
    new = json.loads(accepted.stdout)
    assert new["status"] == "archived"
    chains = [p.rsplit("/", 1)[1] for p in world["pointers"]] + [new["chain_id"]]
    check_home(home, world["tools"], chains)
