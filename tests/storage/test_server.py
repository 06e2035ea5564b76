"""The test server itself: both ways of getting one work on this machine, so that a
machine without Debian's server still runs the PostgreSQL half of the suite."""

from __future__ import annotations

import psycopg
import pytest

from benchmarks.pgserver import PostgresServer


@pytest.mark.integration
@pytest.mark.parametrize("system", [True, False], ids=["debian", "wheel"])
def test_a_server_starts_stops_and_starts_again_on_its_data(system: bool) -> None:
    server = PostgresServer(system=system)
    try:
        server.start()
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x TEXT)")
            conn.execute("INSERT INTO kept VALUES ('still here')")
        server.stop()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.url(), connect_timeout=5).close()
        server.start()
        with psycopg.connect(server.url()) as conn:
            assert conn.execute("SELECT x FROM kept").fetchall() == [("still here",)]
            (listen,) = conn.execute("SHOW listen_addresses").fetchone() or ("",)
            assert listen == "127.0.0.1"
    finally:
        server.remove()
