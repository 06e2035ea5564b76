"""PostgreSQL as a store that fails: unreachable at start, gone mid-run, back again; a
database a newer sidecar wrote.  Each on a private server that the test stops."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.errors import EXIT_UNAVAILABLE, StateUnavailable
from sidecar.model import Tool
from tests.support.shop import failing_session, lookup, teach

pytestmark = pytest.mark.integration
SCRIPT = str(Path(sys.executable).with_name("sidecar"))


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.remove()


def open_sidecar(home: Path, url: str) -> Sidecar:
    return Sidecar.open(embedder=HashingEmbedder(), home=home, database_url=url)


def exchange(sc: Sidecar) -> str:
    steps = [lookup("#C3000", "pending")]
    return sc.check_call(steps, "exchange_items", {"order_id": "#C3000"}).decision


def test_a_check_never_allows_because_the_memory_is_unreachable(
    server: PostgresServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    with open_sidecar(home, server.url()) as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
        teach(sc)
        assert exchange(sc) == "block"
        server.stop()
        # reads fail closed: no verdict at all rather than an allow from a missing memory
        with pytest.raises(StateUnavailable, match="state database"):
            exchange(sc)
        with pytest.raises(StateUnavailable):
            sc.check(["get_order", "exchange_items"])
        # writes fail visibly, and nothing is kept aside on the local disk
        with pytest.raises(StateUnavailable):
            sc.report(failing_session(5))
        assert not (home / "state.sqlite").exists()
        server.start()
        # the next statement reconnects: the memory answers again, and the failed
        # report counted nothing
        assert exchange(sc) == "block"
        views = [v for v in sc.constraints() if v.kind == "call"]
        assert max(v.support for v in views) == 3


def test_an_unreachable_database_refuses_the_start(server: PostgresServer, tmp_path: Path) -> None:
    server.stop()
    with pytest.raises(StateUnavailable, match="cannot reach the state database"):
        open_sidecar(tmp_path / "home", server.url())
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "cli"), "SIDECAR_EMBEDDER": "hashing"}
    env["SIDECAR_DATABASE_URL"] = server.url()
    proc = subprocess.run(
        [SCRIPT, "tools", "list"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == EXIT_UNAVAILABLE, proc.stderr
    assert "cannot reach the state database" in proc.stderr
    assert "postgresql://postgres@127.0.0.1" in proc.stderr


def test_a_database_a_newer_sidecar_wrote_is_refused_at_start(
    server: PostgresServer, tmp_path: Path
) -> None:
    with open_sidecar(tmp_path / "home", server.url()) as sc:
        sc.add_tools([Tool("get_order", "look up an order")])
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, 'from the future', 0)")
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "home"), "SIDECAR_EMBEDDER": "hashing"}
    env["SIDECAR_DATABASE_URL"] = server.url()
    for command in (["tools", "list"], ["tools", "add", "/dev/null"]):
        proc = subprocess.run(
            [SCRIPT, *command], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == EXIT_UNAVAILABLE, proc.stderr
        assert "schema version 99, newer than the 3 this sidecar knows" in proc.stderr
    with psycopg.connect(server.url()) as conn:
        assert conn.execute("SELECT COUNT(*) FROM hot_tools").fetchone() == (1,)
