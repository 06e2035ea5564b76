"""The write locks and their order (:mod:`sidecar.storage.backends.postgres`): writes of one
concern take turns across processes, writes of different concerns overlap on
PostgreSQL, a write naming no concern excludes every other, and write ids, notifications
and commits follow one order whichever concern commits first.  SQLite keeps one writer
whatever the concern."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from benchmarks.pgserver import PostgresServer
from sidecar.storage.backends.postgres import PostgresDatabase
from sidecar.storage.base import CONCERNS, Concern, Database
from tests.storage.conftest import Opener

DDL = "CREATE TABLE IF NOT EXISTS marks (name TEXT PRIMARY KEY, n INTEGER NOT NULL);"
WAIT_S = 0.5
"""How long a write is given to show that it does not wait (it takes milliseconds)."""


@contextmanager
def holding(db: Database, concern: Concern | None) -> Iterator[None]:
    """A write transaction of ``concern`` open on ``db`` (in a thread of its own) for as
    long as the block runs; it commits as the block ends."""
    entered, release = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def hold() -> None:
        try:
            with db.tx(concern) as tx:
                tx.execute("INSERT INTO marks VALUES ('held', 1) ON CONFLICT(name) DO NOTHING")
                entered.set()
                assert release.wait(30)
        except BaseException as exc:  # reported to the test below
            failed.append(exc)
            entered.set()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert entered.wait(30) and not failed
    try:
        yield
    finally:
        release.set()
        thread.join(30)
    assert not failed


def write(db: Database, concern: Concern | None, name: str) -> threading.Thread:
    """A write transaction of ``concern`` on ``db``, started in a thread."""

    def run() -> None:
        with db.tx(concern) as tx:
            tx.execute("INSERT INTO marks VALUES (?, 1)", (name,))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def waits(thread: threading.Thread) -> bool:
    thread.join(WAIT_S)
    return thread.is_alive()


def test_a_writer_of_one_concern_waits_for_another_of_the_same(open_db: Opener) -> None:
    """Two replicas' reports (both fold into what was learned) take turns."""
    one, other = open_db(), open_db()
    one.ensure(DDL)
    with holding(one, "learned"):
        second = write(other, "learned", "second")
        assert waits(second)
    second.join(30)
    assert not second.is_alive()


@pytest.mark.parametrize("held, writer", [(None, "archive"), ("archive", None), (None, None)])
def test_a_writer_of_no_concern_excludes_every_writer(
    open_db: Opener, held: Concern | None, writer: Concern | None
) -> None:
    one, other = open_db(), open_db()
    one.ensure(DDL)
    with holding(one, held):
        second = write(other, writer, "second")
        assert waits(second)
    second.join(30)
    assert not second.is_alive()


def test_writers_of_different_concerns_overlap_on_postgresql_only(
    open_db: Opener, backend: str
) -> None:
    """While the publisher's removal of published records holds the archive lock, two
    replicas' reports commit, one after the other; SQLite keeps its one writer."""
    one, two, three = open_db(), open_db(), open_db()
    one.ensure(DDL)
    with holding(one, "archive"):
        reports = [write(two, "learned", "report 1"), write(three, "learned", "report 2")]
        if backend == "postgres":
            for report in reports:
                report.join(10)
                assert not report.is_alive()
            assert {r[0] for r in two.execute("SELECT name FROM marks")} >= {
                "report 1",
                "report 2",
            }
        else:
            assert waits(reports[0]) and waits(reports[1])
    for report in reports:
        report.join(30)
        assert not report.is_alive()


def test_the_concerns_are_the_ones_the_order_names() -> None:
    assert CONCERNS == ("learned", "archive", "decisions")


def test_write_ids_follow_commit_order_across_concerns(postgres_server: PostgresServer) -> None:
    """A write that began first but commits last takes the later id: a change feed
    hears the ids rising, so a lease that has seen one id has seen every earlier
    write (with the transaction's own id, begun first, it would come second and
    lower)."""
    with postgres_server.schema() as url:
        first, second = PostgresDatabase(url), PostgresDatabase(url)
        try:
            first.ensure(DDL)
            with psycopg.connect(url, autocommit=True) as listener:
                listener.execute(f"LISTEN {first.channel}")
                with holding(first, "learned"):
                    late = write(second, "archive", "committed first")
                    late.join(10)
                    assert not late.is_alive()
                heard: list[int] = []
                deadline = time.monotonic() + 10
                while len(heard) < 2 and time.monotonic() < deadline:
                    heard += [int(n.payload) for n in listener.notifies(timeout=0.2)]
            assert len(heard) == 2 and heard[0] < heard[1]
        finally:
            first.close()
            second.close()
