"""Freshness for one round trip: a check reads the state once (every revision in one
small read) when nothing changed, and a commit made by another process before the check
started is in its answer."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import pq

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.storage.backends.postgres import PostgresDatabase
from sidecar.storage.backends.sqlite import SqliteDatabase
from sidecar.storage.base import Database, Row
from sidecar.storage.revisions import RevisionRepository, Revisions
from tests.support.shop import failing_session, good_session, lookup

SUCCESSES = 20


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    """Without the revision lease: every request reads the revisions."""
    with Sidecar.open(
        embedder=HashingEmbedder(),
        home=tmp_path / "home",
        database_url=state_url,
        revision_lease_ms=0,
    ) as sidecar:
        yield sidecar


def statements(monkeypatch: pytest.MonkeyPatch, db: Database) -> list[str]:
    """Every statement the database runs from now on (the revisions' read included)."""
    seen: list[str] = []
    original, begin = type(db).execute, type(db).begin_read
    sending: list[bool] = []  # a backend may send the read with execute: counted once

    def counted(self: Database, sql: str, params: Any = ()) -> Any:
        if self is db and not sending:
            seen.append(sql)
        return original(self, sql, params)

    def sent(self: Database, sql: str) -> Any:
        if self is db:
            seen.append(sql)
        sending.append(True)
        try:
            return begin(self, sql)
        finally:
            sending.pop()

    monkeypatch.setattr(type(db), "execute", counted)
    monkeypatch.setattr(type(db), "begin_read", sent)
    return seen


def pending_exchange(sc: Sidecar) -> str:
    steps = [lookup("#C3000", "pending")]
    return sc.check_call(steps, "exchange_items", {"order_id": "#C3000"}).decision


def test_a_check_reads_the_state_once_when_nothing_changed(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc.report_many([good_session(n) for n in range(SUCCESSES)])
    sc.report_many([failing_session(n) for n in range(3)])
    assert pending_exchange(sc) == "block"
    seen = statements(monkeypatch, sc.state.database)
    for _ in range(3):
        assert pending_exchange(sc) == "block"
        assert sc.check(["a", "b"]).safe
    assert len(seen) == 6, seen  # one read of the revisions per request


def test_under_the_revision_lease_a_check_reads_nothing(
    tmp_path: Path, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default on PostgreSQL: once the replica holds its lease, its checks answer
    from the revisions it cached (tests/storage/test_revision_lease.py shows a write in
    another process waiting until the replica has heard of it)."""
    with (
        postgres_server.schema() as url,
        Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, database_url=url) as sc,
    ):
        sc.report_many([good_session(n) for n in range(SUCCESSES)])
        sc.report_many([failing_session(n) for n in range(3)])
        db = sc.state.database
        deadline = time.monotonic() + 30
        while db.change_token() is None:
            assert time.monotonic() < deadline, "the lease was never taken"
            time.sleep(0.01)
        assert pending_exchange(sc) == "block"
        seen = statements(monkeypatch, db)
        for _ in range(3):
            assert pending_exchange(sc) == "block"
            assert sc.check(["a", "b"]).safe
        assert seen == []


@pytest.mark.parametrize("lease_ms", [0, 2000])
def test_a_commit_by_another_replica_is_in_its_next_check(
    tmp_path: Path, postgres_server: PostgresServer, lease_ms: int
) -> None:
    """Two replicas on one PostgreSQL state (one SQLite home has one writer)."""
    with postgres_server.schema() as url:
        _replicas(tmp_path, url, revision_lease_ms=lease_ms)


def _replicas(tmp_path: Path, url: str, **settings: Any) -> None:
    homes = [tmp_path / "a", tmp_path / "b"]
    opened = [
        Sidecar.open(embedder=HashingEmbedder(), home=h, database_url=url, **settings)
        for h in homes
    ]
    try:
        a, b = opened
        a.report_many([good_session(n) for n in range(SUCCESSES)])
        assert pending_exchange(b) == "allow"
        a.report_many([failing_session(n) for n in range(3)])
        assert pending_exchange(b) == "block"  # the very next request on the other replica
        a.forget("local")
        assert pending_exchange(b) == "allow"
    finally:
        for s in opened:
            s.close()


# ---- the read travels while the request works ---------------------------------------------
class Overlapping(SqliteDatabase):
    """A state whose reads are sent at once and answered later (as across a network):
    each step is logged, and the counters can be moved by "another process"."""

    overlaps_reads = True

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.log: list[str] = []

    def begin_read(self, sql: str) -> Callable[[], list[Row]]:
        self.log.append("sent")
        rows = super().begin_read(sql)()

        def answer() -> list[Row]:
            self.log.append("answered")
            return rows

        return answer


@pytest.fixture
def overlapping(tmp_path: Path) -> Iterator[tuple[Overlapping, RevisionRepository]]:
    db = Overlapping(tmp_path / "state.sqlite")
    repo = RevisionRepository(db, "here")
    db.ensure(repo.SCHEMA)
    yield db, repo
    db.close()


def elsewhere(db: Database, key: str = "constraints_rev") -> None:
    with db.tx() as tx:
        RevisionRepository.bump(tx, key)


def test_a_judged_request_works_while_its_read_travels(
    overlapping: tuple[Overlapping, RevisionRepository],
) -> None:
    db, repo = overlapping
    first = repo.judged(repo.current)  # nothing read before: read, then run
    assert db.log == ["sent", "answered"]
    db.log.clear()

    def request() -> Revisions:
        db.log.append("ran")
        return repo.current()

    assert repo.judged(request) == first
    assert db.log == ["sent", "ran", "answered"]  # one read, overlapped


def test_a_judged_request_is_run_again_when_its_read_finds_a_commit(
    overlapping: tuple[Overlapping, RevisionRepository],
) -> None:
    db, repo = overlapping
    before = repo.judged(repo.current)
    elsewhere(db)  # committed before the next request starts
    seen: list[int] = []

    def request() -> int:
        seen.append(repo.current().constraints)
        return seen[-1]

    assert repo.judged(request) == before.constraints + 1
    assert seen == [before.constraints, before.constraints + 1]  # the stale run dropped
    seen.clear()
    assert repo.judged(request) == before.constraints + 1 and len(seen) == 1


def test_a_judged_request_that_failed_on_stale_revisions_runs_again(
    overlapping: tuple[Overlapping, RevisionRepository],
) -> None:
    db, repo = overlapping
    before = repo.judged(repo.current)
    elsewhere(db)

    def request() -> int:
        if repo.current() == before:
            raise LookupError("judged from what is no longer the state")
        return repo.current().constraints

    assert repo.judged(request) == before.constraints + 1

    def failing() -> int:
        raise LookupError("a real failure")

    with pytest.raises(LookupError, match="a real failure"):  # on current revisions it stands
        repo.judged(failing)


def test_on_postgresql_a_check_is_one_prepared_round_trip_sent_before_its_work(
    tmp_path: Path, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The libpq trace of every connection counts what goes on the wire: per check,
    one Execute of an already prepared statement and one Sync, no Parse; and the read
    is on its way before the check's own work starts."""
    with (
        postgres_server.schema() as url,
        Sidecar.open(
            embedder=HashingEmbedder(), home=tmp_path, database_url=url, revision_lease_ms=0
        ) as sc,
    ):
        sc.report_many([good_session(n) for n in range(SUCCESSES)])
        sc.report_many([failing_session(n) for n in range(3)])
        assert pending_exchange(sc) == "block"
        assert sc.check(["a", "b"]).safe
        db = sc.state.database
        assert isinstance(db, PostgresDatabase)
        wire, events = _traced_checks(monkeypatch, sc, db, tmp_path / "wire.log")
    assert events == ["sent", "check_call ran", "sent", "check ran"] * 3
    sent = [m.group(1) for m in re.finditer(r"^F\t\d+\t(\w+)", wire, re.M)]
    assert sent == ["Bind", "Describe", "Execute", "Sync"] * 6, wire


def _traced_checks(
    monkeypatch: pytest.MonkeyPatch, sc: Sidecar, db: PostgresDatabase, path: Path
) -> tuple[str, list[str]]:
    """Three rounds of a check_call and a check, every connection the database hands
    out writing its protocol messages to ``path``: what was written, and the order in
    which reads were sent and the checks' own work ran."""
    events: list[str] = []
    traced: list[Any] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    get, begin = PostgresDatabase._get, PostgresDatabase.begin_read
    rules = type(sc.rules)
    plain_check, plain_call = rules.check, rules.check_call

    def traced_get(self: PostgresDatabase) -> Any:
        conn = get(self)
        if self is db and conn not in traced:
            conn.pgconn.trace(fd)
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            traced.append(conn)
        return conn

    def sent(self: PostgresDatabase, sql: str) -> Any:
        if self is db:
            events.append("sent")
        return begin(self, sql)

    def check(self: Any, *a: Any) -> Any:
        events.append("check ran")
        return plain_check(self, *a)

    def check_call(self: Any, *a: Any) -> Any:
        events.append("check_call ran")
        return plain_call(self, *a)

    monkeypatch.setattr(PostgresDatabase, "_get", traced_get)
    monkeypatch.setattr(PostgresDatabase, "begin_read", sent)
    monkeypatch.setattr(rules, "check", check)
    monkeypatch.setattr(rules, "check_call", check_call)
    try:
        for _ in range(3):
            assert pending_exchange(sc) == "block"
            assert sc.check(["a", "b"]).safe
    finally:
        for conn in traced:
            conn.pgconn.untrace()  # flushes what it wrote
        os.close(fd)
    return path.read_text(), events


def test_a_read_whose_statement_was_deallocated_prepares_it_again(
    postgres_server: PostgresServer,
) -> None:
    """psycopg sends DEALLOCATE ALL when a transaction rolls back on a connection where it
    prepared statements of its own: the revisions' statement goes with them."""
    with postgres_server.schema() as url:
        db = PostgresDatabase(url)
        try:
            repo = RevisionRepository(db, "here")
            db.ensure(repo.SCHEMA)
            before = repo.current()
            for _ in range(6):  # psycopg prepares a statement run five times
                db.execute("SELECT count(*) FROM meta").fetchall()
            with pytest.raises(LookupError), db.tx() as tx:
                RevisionRepository.bump(tx, "constraints_rev")
                raise LookupError("rolled back")
            names = db.execute("SELECT name FROM pg_prepared_statements").fetchall()
            assert not [n for (n,) in names if n.startswith("sidecar_")]  # it is gone
            elsewhere(db)
            assert repo.current().constraints == before.constraints + 1
        finally:
            db.close()
