"""``kill -9`` of a server in the middle of report batches and of an HTTP eviction: every
acknowledged report is there exactly once, no batch is half-applied, and the interrupted
moves finish."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.faults.harness import Server, build_world, env_for, state_rows, wait_until
from tests.faults.invariants import check_home, check_server
from tests.sidecar.helpers import abandoned, completed

TERMINAL = "t080"
CLIENTS = 4


def batch(b: int) -> list[dict[str, Any]]:
    """Batch ``b``: two new abandoned chains, a completed run and a first sighting of an
    unknown failure, every one of them its own session."""
    return [
        abandoned([f"r{b}a", f"r{b}b", TERMINAL], f"HTTP 400 b{b}-0", session_id=f"b{b}-s0"),
        abandoned([f"r{b}a", f"r{b}c", TERMINAL], f"HTTP 404 b{b}-1", session_id=f"b{b}-s1"),
        {**completed([f"r{b}c", f"r{b}d"]), "session_id": f"b{b}-done"},
        abandoned([f"r{b}e", f"r{b}f"], f"weird failure b{b}", session_id=f"b{b}-u"),
    ]


def effects(home: Path, b: int) -> tuple[int, int, int, int]:
    """What batch ``b`` left in the state and the cold store: its completed runs, its
    sightings of the unknown failure, its compiled chains and its cold rows."""
    runs = state_rows(
        home,
        "SELECT COALESCE(SUM(times), 0) FROM completed_chains WHERE topology = ?",
        (f'["r{b}c", "r{b}d"]',),
    )[0][0]
    sightings = state_rows(
        home, "SELECT COUNT(*) FROM sighting_sessions WHERE signature = ?", (f"weird failure b{b}",)
    )[0][0]
    compiled = state_rows(
        home, "SELECT COUNT(*) FROM constraints WHERE signature LIKE ?", (f"HTTP 40_ b{b}-_",)
    )[0][0]
    sessions = state_rows(
        home, "SELECT COUNT(*) FROM chain_sessions WHERE session_key LIKE ?", (f"session:b{b}-s_",)
    )[0][0]
    return int(runs), int(sightings), int(compiled), int(sessions)


WHOLE = (1, 1, 2, 2)
NONE = (0, 0, 0, 0)


def send_batches(
    server: Server, first: int, acked: dict[int, list[dict[str, Any]]], sent: list[int],
    stop: threading.Event,
) -> None:  # fmt: skip
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
        b = first
        while not stop.is_set():
            sent.append(b)
            try:
                response = http.post("/v1/reports", json={"reports": batch(b)})
            except httpx.HTTPError:
                return  # the server died under this request
            if response.status_code == 200:
                acked[b] = response.json()["results"]
            b += 1


def test_sigkill_during_report_batches_and_an_http_eviction(tmp_path: Path) -> None:
    """Injects: SIGKILL of the server while 4 clients send report batches back to back
    and an HTTP eviction of 80 one-tool batches runs (once one move is done and at
    least 6 report batches were acknowledged).

    After a restart: the server is ready with no unfinished move (the journal finished
    them on open); every acknowledged batch is whole (both chains compiled and in the
    cold store once, the completed run counted once, the unknown failure sighted once);
    every batch that got no answer is whole or absent, never in part; sending those
    again completes them and changes nothing for the others; a new eviction finishes
    the job; the invariants hold."""
    home = tmp_path / "home"
    world = build_world(home, n_tools=81, chains=40)
    acked: dict[int, list[dict[str, Any]]] = {}
    sent: list[int] = []
    with Server(home, env_for(home, SIDECAR_EVICT_BATCH_SIZE="1")) as server:
        stop = threading.Event()
        clients = [
            threading.Thread(target=send_batches, args=(server, n * 10_000, acked, sent, stop))
            for n in range(CLIENTS)
        ]
        for c in clients:
            c.start()
        wait_until(lambda: len(acked) >= 2, 60, "report batches")
        eviction = threading.Thread(target=lambda: _post_quietly(server, "/v1/evictions"))
        eviction.start()
        done = "SELECT COUNT(*) FROM moves WHERE status = 'done'"
        wait_until(
            lambda: state_rows(home, done)[0][0] >= 1 and len(acked) >= 6, 60, "moves and batches"
        )
        server.kill()
        stop.set()
        for t in [*clients, eviction]:
            t.join(timeout=60)
        moves = state_rows(home, "SELECT status, COUNT(*) FROM moves GROUP BY status")
        print(f"\nkilled with {len(acked)} batch(es) acknowledged of {len(sent)} sent; "
              f"moves {dict(moves)}")  # fmt: skip
        assert dict(moves).get("done", 0) < 80, "the eviction finished before the kill"

        server.start()
        status = server.get("/v1/archive/status").json()
        assert status["unfinished_moves"] == 0 and status["degraded"] is None, status
        for b in sent:
            got = effects(home, b)
            if b in acked:
                assert got == WHOLE, (b, got)
            else:
                assert got in (WHOLE, NONE), f"batch {b} half-applied: {got}"
        for b in sorted(set(sent) - set(acked)):
            again = server.post("/v1/reports", {"reports": batch(b)})
            assert again.status_code == 200, again.text
            acked[b] = again.json()["results"]
        for b in sent:  # a resend changes nothing for a batch that was already whole
            assert effects(home, b) == WHOLE, b
        finished = server.post("/v1/evictions", {})
        assert finished.status_code == 200, finished.text
        check_server(server)
        server.stop()
    archived = [r["chain_id"] for results in acked.values() for r in results if r.get("chain_id")]
    archived += [p.rsplit("/", 1)[1] for p in world["pointers"]]
    state = check_home(home, world["tools"], archived)
    assert set(state.evicted) == set(world["prefix"])


def _post_quietly(server: Server, path: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # killed under it
        server.post(path, {})


KILL_BEFORE_PUBLISH = """
import os, signal, sys
from sidecar.archive.publish import Publisher

def die(self):
    # the batch committed in the state (counters, rules, records pending), not published
    os.kill(os.getpid(), signal.SIGKILL)

Publisher.queued = die
from sidecar.shells.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigkill_between_a_batch_commit_and_its_publication(tmp_path: Path) -> None:
    """Injects: SIGKILL at the one step where a report batch is in one store and not the
    other: committed in the state (its counters, its rules, its chains' records pending)
    and not yet appended to the cold store.  The server runs a patched
    ``Publisher.queued`` that kills the process the moment a batch committed.

    After a restart, with nothing sent again, the batch is whole: both chains compiled
    and each in the cold store once, its completed run counted once, its unknown
    failure sighted once (the owner publishes what was pending)."""
    home = tmp_path / "home"
    world = build_world(home, n_tools=81, chains=1)
    killed = Server(home, python=KILL_BEFORE_PUBLISH)
    with killed:
        try:
            response = killed.post("/v1/reports", {"reports": batch(7)})
            raise AssertionError(f"the server answered: {response.text}")
        except httpx.HTTPError:
            pass
        killed.proc.wait(timeout=30)  # type: ignore[union-attr]
        killed._drain()
    with Server(home) as server:
        assert effects(home, 7) == WHOLE, effects(home, 7)
        check_server(server)
        server.stop()
    chains = [c for (c,) in state_rows(home, "SELECT chain_id FROM constraints")]
    check_home(home, world["tools"], chains)
