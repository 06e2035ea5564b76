"""SIGKILL at every step of an eviction move, and a random-kill loop over a batch.

Each run is a real ``sidecar evict`` process on a real home (Chroma, Parquet, SQLite),
killed by the kernel; recovery then runs in a fresh process.  After recovery every
tool is in exactly one store, no cold row is duplicated, every mandate exists once, and
the end state equals that of an uninterrupted run.

The moves are under test, not the policy: one abandoned chain is enough to evict here
(``evict_min_chains=1``).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.faults import CRASH_POINTS
from sidecar.model import CredentialRef
from tests.sidecar.helpers import abandoned, completed

SCRIPT = str(Path(sys.executable).with_name("sidecar"))
ROOT = Path(__file__).resolve().parents[2]
TOOLS = [f"t{i:02d}" for i in range(40)]


def build_world(home: Path) -> None:
    """40 tools sharing credentials in pairs; 10 abandoned chains make t00..t19 prefix
    tools; a completed chain keeps t05."""
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        sc.add_tools(
            [
                Tool(t, f"tool number {t}", credentials=(CredentialRef(f"env:C{i // 2}"),))
                for i, t in enumerate(TOOLS)
            ]
        )
        for i in range(0, 20, 2):
            result = sc.report(abandoned([TOOLS[i], TOOLS[i + 1], TOOLS[39]], f"HTTP 400 #{i}"))
            assert result.status == "archived"
        sc.report(completed([TOOLS[5], TOOLS[30]]))


def cli(home: Path, *args: str, crash_at: str | None = None, batch: int = 7) -> Any:
    env = {
        **os.environ,
        "SIDECAR_HOME": str(home),
        "SIDECAR_EMBEDDER": "hashing",
        "SIDECAR_EVICT_BATCH_SIZE": str(batch),
        "SIDECAR_EVICT_MIN_CHAINS": "1",
    }
    env.pop("SIDECAR_CRASH_AT", None)
    argv = [SCRIPT, *args]
    if crash_at:  # the CLI with a hook that kills it at that point
        env |= {"SIDECAR_CRASH_AT": crash_at, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "benchmarks.crashing", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def snapshot(home: Path) -> dict[str, Any]:
    """Where every tool is, read after recovery; asserts the invariants on the way."""
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        assert sc.journal.unfinished() == []
        hot = {r.id for r in sc.index.scan()}
        evicted = set(sc.journal.evicted())
        assert hot.isdisjoint(evicted), hot & evicted
        assert hot | evicted == set(TOOLS)
        rows = list(sc.cold.tools.scan(["record_id", "tool_id"]))
        # no duplicate rows, even counting every published file
        all_rows = [
            rid
            for f in sorted(sc.cold.tools.dir.rglob("*.parquet"))
            for rid in pq.read_table(f, columns=["record_id"]).column(0).to_pylist()
        ]
        assert len(all_rows) == len(set(all_rows)), "a cold row was written twice"
        assert {r["tool_id"] for r in rows} == evicted
        for tool_id, ev in sc.journal.evicted().items():
            assert sc.cold.tools.get(ev.move_id)["tool_id"] == tool_id
        mandates = sc.mandates()
        keys = [m.idempotency_key for m in mandates]
        assert len(keys) == len(set(keys))
        refs = [m.ref for m in mandates]
        assert len(refs) == len(set(refs)), "a credential got two mandates"
        return {
            "hot": hot,
            "evicted": evicted,
            "mandates": sorted((m.ref, m.tool_ids) for m in mandates),
            "cold_rows": len(rows),
        }


def journal_mark(db: Path) -> float:
    """When the move journal last changed (0 before any move)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
        return float(conn.execute("SELECT COALESCE(MAX(updated_at), 0) FROM moves").fetchone()[0])


def wait_for_a_move(db: Path, proc: subprocess.Popen[bytes], since: float = 0.0) -> None:
    """Until ``proc`` has written to the move journal after ``since`` (it is past its
    start, inside the moves), or has exited."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if journal_mark(db) > since:
            return
        time.sleep(0.005)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A built world (kept pristine for copying) and the end state of a clean run."""
    world = tmp_path_factory.mktemp("world") / "home"
    build_world(world)
    clean = tmp_path_factory.mktemp("clean") / "home"
    shutil.copytree(world, clean)
    proc = cli(clean, "evict", "--json")
    assert proc.returncode == 0, proc.stderr
    expected = snapshot(clean)
    assert len(expected["evicted"]) == 19  # t00..t19 but t05
    assert "t05" in expected["hot"]
    return world, expected


@pytest.mark.parametrize("point", CRASH_POINTS)
@pytest.mark.parametrize("recover_with", ["evict --recover", "next open"])
def test_sigkill_at_each_crash_point(
    reference: tuple[Path, dict[str, Any]], tmp_path: Path, point: str, recover_with: str
) -> None:
    world, expected = reference
    home = tmp_path / "home"
    shutil.copytree(world, home)
    crashed = cli(home, "evict", crash_at=point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    if recover_with == "evict --recover":
        proc = cli(home, "evict", "--recover", "--json")
        assert proc.returncode == 0, proc.stderr
        assert '"recovered_moves": 7' in proc.stdout or point == "after_done"
    else:
        # any command opens the sidecar, which finishes the interrupted moves
        assert cli(home, "check", "a,b").returncode == 0
    # a crashed batch never serves its tools, and the next run finishes the job
    proc = cli(home, "evict")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(home) == expected


def test_random_kill_loop(reference: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Kill a batch eviction at seeded random moments until it completes."""
    world, expected = reference
    home = tmp_path / "home"
    shutil.copytree(world, home)
    env = {**os.environ, "SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing",
           "SIDECAR_EVICT_BATCH_SIZE": "2", "SIDECAR_EVICT_MIN_CHAINS": "1"}  # fmt: skip
    rng = random.Random(20261130)
    kills = 0
    for attempt in range(100):
        since = journal_mark(home / "state.sqlite")
        proc = subprocess.Popen(
            [SCRIPT, "evict"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        # every kill lands inside the moves, at a random moment after this run's first
        # step, however long a loaded machine takes to start the process: each run
        # moves the work on, so the loop ends
        wait_for_a_move(home / "state.sqlite", proc, since)
        # the first kill lands at once: an idle machine runs the whole eviction in less
        # than the longest random wait, and a loop with no kill tests nothing
        time.sleep(rng.uniform(0.0, 1.0) if attempt else 0.0)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        _, err = proc.communicate(timeout=300)
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, err
        # invariants hold after every kill, once recovered
        state = snapshot(home)
        assert state["hot"] | state["evicted"] == set(TOOLS)
    else:
        pytest.fail("the eviction never completed")
    assert kills >= 1
    assert snapshot(home) == expected
