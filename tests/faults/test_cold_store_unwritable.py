"""The cold store becomes unwritable in the middle of an HTTP eviction on a running
server: the server degrades (reads keep working, moves wait), then recovers by itself."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from tests.faults.faults import unwritable_folder, unwritable_mechanism
from tests.faults.harness import (
    Server,
    build_world,
    cli,
    env_for,
    no_traceback,
    state_rows,
    wait_until,
)
from tests.faults.invariants import assert_not_served, check_home, check_server, journal

RECOVERY_S = 60.0
"""The server retries every 10 s; this leaves room for a slow, shared machine."""


def test_cold_store_unwritable_during_an_http_eviction(tmp_path: Path) -> None:
    """Injects: ``cold/tools`` made unwritable once the first of 80 one-tool batches of
    a running ``POST /v1/evictions`` has finished (``chattr -R +i`` where the
    capability is there, which stops root too; else the folder is replaced by a plain
    file, so that creating a partition folder or a file below it fails).  The test
    prints which mechanism ran.

    While the fault lasts: the eviction answers 503 ``degraded``; ``/readyz`` is 503
    and names the cold store and the interrupted moves; search, listing and checks
    work from the server and from a local CLI (which goes through the server); writes
    that move tools (evict, restore) fail with 503 ``degraded`` / exit code 7; no tool
    whose cold record is not written left the hot index, and no tool the state says is
    cold is served.  Once the store is writable again the server finishes the moves by
    itself, a new eviction completes, and the invariants hold."""
    home = tmp_path / "home"
    world = build_world(home, n_tools=81, chains=40)
    mechanism = unwritable_mechanism(home / "cold" / "tools")
    print(f"\nfault mechanism (cold/tools unwritable): {mechanism}")
    with Server(home, env_for(home, SIDECAR_EVICT_BATCH_SIZE="1")) as server:
        answer: dict[str, Any] = {}
        eviction = threading.Thread(
            target=lambda: answer.update(response=server.post("/v1/evictions", {}))
        )
        eviction.start()
        done = "SELECT COUNT(*) FROM moves WHERE status = 'done'"
        wait_until(lambda: state_rows(home, done)[0][0] >= 1, 60, "the first move")
        with unwritable_folder(home / "cold" / "tools") as used:
            assert used == mechanism
            eviction.join(timeout=120)
            stopped = answer["response"]
            assert stopped.status_code == 503, stopped.text
            assert stopped.json()["error"]["code"] == "degraded", stopped.text
            evicted, moving, _ = journal(home)
            assert evicted and moving, "the fault landed after the eviction finished"
            assert_degraded(server, home, moving)
        wait_until(
            lambda: server.get("/readyz").status_code == 200,
            RECOVERY_S,
            "the server to recover by itself",
            every=0.5,
        )
        status = server.get("/v1/archive/status").json()
        assert status["unfinished_moves"] == 0 and status["degraded"] is None, status
        finished = server.post("/v1/evictions", {})
        assert finished.status_code == 200, finished.text
        check_server(server)
        server.stop()
    state = check_home(home, world["tools"], [p.rsplit("/", 1)[1] for p in world["pointers"]])
    assert set(state.evicted) == set(world["prefix"])


def assert_degraded(server: Server, home: Path, moving: set[str]) -> None:
    ready = server.get("/readyz")
    assert ready.status_code == 503, ready.text
    checks = ready.json()["checks"]
    assert checks["cold_store"].startswith("not writable"), checks
    assert checks["journal"].startswith("interrupted moves cannot finish"), checks
    # reads keep working, from the server and from a local CLI that goes through it
    assert server.get("/v1/tools").status_code == 200
    assert server.post("/v1/search", {"query": "tool number", "k": 5}).status_code == 200
    assert server.post("/v1/check", {"plan": ["t000", "t001", "t080"]}).json()["safe"] is False
    listed = cli(home, "tools", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    found = cli(home, "search", "tool number", "-k", "100", "--json")
    assert found.returncode == 0, found.stderr
    blocked = cli(home, "check", "t000,t001,t080")
    assert blocked.returncode == 3, blocked.stderr
    # a tool whose move began is never served, and stays in the hot index and the
    # records until its cold record is written
    served = {t["tool_id"] for t in json.loads(listed.stdout)["tools"]}
    served |= {h["tool_id"] for h in json.loads(found.stdout)["hits"]}
    evicted, moving_now, _ = journal(home)
    assert not served & (set(evicted) | moving_now)
    records = {t for (t,) in state_rows(home, "SELECT tool_id FROM hot_tools")}
    assert moving <= records, moving - records
    from sidecar import RemoteSidecar

    with RemoteSidecar(server.url, server.token) as remote:
        assert_not_served(remote, set(evicted) | moving_now)
    # writes that move tools wait for the store
    again = server.post("/v1/evictions", {})
    assert again.status_code == 503 and again.json()["error"]["code"] == "degraded"
    one = sorted(evicted)[0]
    restore = server.post(f"/v1/tools/{one}/restore", {"reason": "try"})
    assert restore.status_code == 503 and restore.json()["error"]["code"] == "degraded"
    for argv in (["evict", "--json"], ["restore", one, "--reason", "try", "--json"]):
        refused = cli(home, *argv)
        assert refused.returncode == 7, (argv, refused.stderr)
        assert json.loads(refused.stderr)["error"]["code"] == "degraded"
        no_traceback(refused)
