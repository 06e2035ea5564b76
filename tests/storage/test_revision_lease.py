"""The revision lease on a shared state: a replica that holds one answers from the
revisions it cached, with no read, and a write in any other process returns only once
that replica has seen it (or its lease expired); a replica whose listener is gone stops
trusting its cache; one that closes gives its lease up."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from benchmarks.pgserver import PostgresServer
from sidecar.storage.backends.pgfeed import UNSEEN
from sidecar.storage.backends.postgres import PostgresDatabase
from sidecar.storage.base import DatabaseError
from sidecar.storage.state import SCHEMAS, State

pytestmark = pytest.mark.integration

BUMP = (
    "INSERT INTO meta VALUES ('constraints_rev', '1') ON CONFLICT (key) "
    "DO UPDATE SET value = CAST(meta.value AS INTEGER) + 1"
)
WRITER = f"""
import sys
from sidecar.storage.base import DatabaseError
from sidecar.storage.backends.pgfeed import UNSEEN
from sidecar.storage.backends.postgres import PostgresDatabase
db = PostgresDatabase(sys.argv[1])
with db.tx() as tx:
    tx.execute({BUMP!r})
print("acknowledged", flush=True)
db.close()
"""
LEASE_S = 9.0
"""Long enough that a paused replica's lease outlives the test's look at a waiting
writer (the feed renews every third of it)."""


def until(condition: Callable[[], Any], what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.fixture
def leased(postgres_server: PostgresServer) -> Iterator[tuple[State, PostgresDatabase, str]]:
    with postgres_server.schema() as url:
        db = PostgresDatabase(url, revision_lease_s=LEASE_S)
        for ddl in SCHEMAS:
            db.ensure(ddl)
        try:
            until(lambda: db.change_token() is not None, "the lease was never taken")
            yield State(db), db, url
        finally:
            db.close()


def write_elsewhere(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRITER, url], stdout=subprocess.PIPE, text=True)


def stored(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'constraints_rev'").fetchone()
        return int(row[0]) if row else 0


def test_a_leased_replica_answers_from_its_cache_and_sees_every_acknowledged_write(
    leased: tuple[State, PostgresDatabase, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, db, url = leased
    revisions = state.revisions
    before = revisions.revisions()
    reads: list[str] = []
    begin = db.begin_read

    def reading(sql: str) -> Any:
        reads.append(sql)
        return begin(sql)

    monkeypatch.setattr(db, "begin_read", reading)
    for _ in range(5):
        assert revisions.revisions() == before
    assert reads == []  # under the lease, nothing is read

    feed = db._feed
    assert feed is not None
    feed.paused.set()  # the replica takes no notification for now
    time.sleep(LEASE_S / 3 + 0.5)  # its feed ends the turn it was in
    writer = write_elsewhere(url)
    try:
        until(lambda: stored(url) == before[0] + 1, "the other process never committed")
        # committed, and not acknowledged: this replica has not seen it, its lease holds
        assert writer.stdout is not None
        assert select.select([writer.stdout], [], [], 1.0)[0] == []
        feed.paused.clear()
        out, _ = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert out.strip() == "acknowledged"
    # acknowledged elsewhere: this replica's next answer has it
    assert revisions.revisions()[0] == before[0] + 1
    assert reads  # read once, the cache dropped by the notification


def test_a_replica_whose_listener_is_gone_reads_until_it_holds_a_lease_again(
    leased: tuple[State, PostgresDatabase, str],
) -> None:
    state, db, url = leased
    token = db.change_token()
    with psycopg.connect(url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name LIKE '% changes'"
        ).fetchall()
    assert killed
    until(lambda: db.change_token() is None, "the cache was still trusted")
    until(lambda: db.change_token() is not None, "the lease was never taken again")
    assert db.change_token() != token  # whatever was cached before is not reused
    # the new lease is seen by writers: one in another process waits for it
    writer = write_elsewhere(url)
    assert writer.communicate(timeout=60)[0].strip() == "acknowledged"
    assert state.revisions.revisions()[0] == stored(url)


def test_a_write_made_while_the_listener_was_away_is_not_waited_on_for_ever(
    leased: tuple[State, PostgresDatabase, str],
) -> None:
    """The write counted the lease that was still running but its notification went
    nowhere: the feed, listening again, takes a new lease (which has seen it) rather
    than renewing the old one with a seen mark that never reaches it."""
    state, db, url = leased
    feed = db._feed
    assert feed is not None
    feed.paused.set()  # once the connection breaks, the feed waits before listening again
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name LIKE '% changes'"
        )
        until(lambda: db.change_token() is None, "the cache was still trusted")
        live = admin.execute(
            "SELECT count(*) FROM feed_leases WHERE expires_at > EXTRACT(EPOCH FROM now())"
        ).fetchone()
    assert live == (1,)  # the old lease still runs: the write below counts it
    writer = write_elsewhere(url)
    try:
        until(lambda: stored(url) >= 1, "the other process never committed")
        feed.paused.clear()
        out, _ = writer.communicate(timeout=LEASE_S * 2)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert out.strip() == "acknowledged"
    until(lambda: db.change_token() is not None, "the lease was never taken again")
    assert state.revisions.revisions()[0] == stored(url)


REPLICA = f"""
import sys, time
from sidecar.storage.base import DatabaseError
from sidecar.storage.backends.pgfeed import UNSEEN
from sidecar.storage.backends.postgres import PostgresDatabase
db = PostgresDatabase(sys.argv[1], revision_lease_s={LEASE_S})
while db.change_token() is None:
    time.sleep(0.01)
print("leased", flush=True)
sys.stdin.read()
db.close()
"""


def test_a_committed_write_asks_again_when_its_question_fails_once(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled connection the server dropped fails the first look at the leases: the
    write, already committed, asks again on another rather than failing."""
    with postgres_server.schema() as url:
        writer = PostgresDatabase(url, revision_lease_s=0.0)
        for ddl in SCHEMAS:
            writer.ensure(ddl)
        replica = subprocess.Popen(
            [sys.executable, "-c", REPLICA, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert replica.stdout is not None and replica.stdout.readline().strip() == "leased"
            asked: list[str] = []
            one = PostgresDatabase._one

            def failing_once(self: PostgresDatabase, conn: Any, sql: str, params: Any = ()) -> Any:
                if sql == UNSEEN:
                    asked.append(sql)
                    if len(asked) == 1:
                        raise DatabaseError("server closed the connection unexpectedly")
                return one(self, conn, sql, params)

            monkeypatch.setattr(PostgresDatabase, "_one", failing_once)
            with writer.tx() as tx:
                tx.execute(BUMP)
            assert len(asked) >= 2  # asked again, and the write returned
            assert stored(url) == 1
        finally:
            replica.communicate("", timeout=30)
            writer.close()


def test_a_closed_replica_gives_its_lease_up(postgres_server: PostgresServer) -> None:
    with postgres_server.schema() as url:
        db = PostgresDatabase(url, revision_lease_s=LEASE_S)
        for ddl in SCHEMAS:
            db.ensure(ddl)
        until(lambda: db.change_token() is not None, "the lease was never taken")
        with psycopg.connect(url, autocommit=True) as admin:

            def leases() -> int:
                return int(admin.execute("SELECT count(*) FROM feed_leases").fetchone()[0])  # type: ignore[index]

            assert leases() == 1
            db.close()
            assert leases() == 0
            time.sleep(LEASE_S / 3 + 0.5)  # the feed's next turn takes no lease again
            assert leases() == 0


def test_without_a_lease_nothing_is_cached(postgres_server: PostgresServer) -> None:
    with postgres_server.schema() as url:
        db = PostgresDatabase(url, revision_lease_s=0.0)
        try:
            assert db.change_token() is None
        finally:
            db.close()


def test_every_transaction_runs_at_read_committed_whatever_the_default(
    postgres_server: PostgresServer,
) -> None:
    """A write counts the leases committed before it took the state's lock, and a lease
    is taken under it: at a stricter default the snapshot is taken by the lock's own
    statement, before the lock is granted, and misses a lease taken meanwhile."""
    with postgres_server.schema() as url:
        stricter = (
            url
            + ("&" if "?" in url else "?")
            + ("options=-c%20default_transaction_isolation%3Drepeatable%5C%20read")
        )
        with psycopg.connect(stricter, autocommit=True) as plain, plain.transaction():
            level = plain.execute("SHOW transaction_isolation").fetchone()
        assert level == ("repeatable read",)  # the default the database gives
        db = PostgresDatabase(stricter, revision_lease_s=LEASE_S)
        try:
            for ddl in SCHEMAS:
                db.ensure(ddl)
            with db.tx() as tx:
                assert tx.execute("SHOW transaction_isolation").fetchall() == [("read committed",)]
            until(lambda: db.change_token() is not None, "the lease was never taken")
            assert db._feed is not None
            feed_conn = db._feed._connect()  # how the feed opens its connections
            try:
                with feed_conn.transaction():
                    level = feed_conn.execute("SHOW transaction_isolation").fetchone()
                assert level == ("read committed",)
            finally:
                feed_conn.close()
        finally:
            db.close()
