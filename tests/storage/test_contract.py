"""The state database's contract, held by every backend (SQLite and a real PostgreSQL):
the same statements of the common dialect give the same answers, write transactions
commit or roll back whole and exclude each other across processes, locks exclude,
schemas are versioned."""

from __future__ import annotations

import threading
import time

import pytest

from sidecar.errors import Busy, SchemaTooNew
from sidecar.storage import Database, DatabaseError, Migration, MissingTable
from sidecar.storage.schema import check, prepare, version
from tests.storage.conftest import Opener

DDL = """
CREATE TABLE IF NOT EXISTS items (
    key TEXT PRIMARY KEY, n INTEGER NOT NULL, at REAL NOT NULL, note TEXT
);
CREATE INDEX IF NOT EXISTS items_n ON items(n);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


@pytest.fixture
def items(db: Database) -> Database:
    db.ensure(DDL)
    return db


def test_statements_read_back_what_they_wrote(items: Database) -> None:
    with items.tx() as tx:
        tx.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?)",
            [("a", 1, 0.5, None), ("b", 2**40, 1.25, "it's 100% ?")],
        )
    assert items.execute("SELECT key, n, at, note FROM items ORDER BY key").fetchall() == [
        ("a", 1, 0.5, None),
        ("b", 2**40, 1.25, "it's 100% ?"),
    ]
    row = items.execute("SELECT n, at FROM items WHERE key=?", ("b",)).fetchone()
    assert row == (2**40, 1.25) and isinstance(row[0], int) and isinstance(row[1], float)
    assert items.execute("SELECT n FROM items WHERE key=?", ("zz",)).fetchone() is None
    assert [r[0] for r in items.execute("SELECT key FROM items ORDER BY key")] == ["a", "b"]
    # a literal holding a placeholder mark and a percent sign is left as it is
    found = items.execute("SELECT key FROM items WHERE note = 'it''s 100% ?'").fetchall()
    assert found == [("b",)]


def test_text_compares_bytewise_as_sqlite_does(items: Database) -> None:
    keys = ["b", "B", "a", "é", "Z", "_x"]
    with items.tx() as tx:
        tx.executemany("INSERT INTO items VALUES (?, 0, 0, NULL)", [(k,) for k in keys])
    ordered = [r[0] for r in items.execute("SELECT key FROM items ORDER BY key")]
    assert ordered == sorted(keys, key=lambda k: k.encode())
    assert items.execute("SELECT COUNT(*) FROM items WHERE key = 'A'").fetchone()[0] == 0


def test_insert_or_ignore_skips_a_stored_key_and_says_so(items: Database) -> None:
    with items.tx() as tx:
        first = tx.execute("INSERT OR IGNORE INTO items VALUES (?, 1, 0, NULL)", ("k",))
        again = tx.execute("INSERT OR IGNORE INTO items VALUES (?, 2, 0, NULL)", ("k",))
        assert (first.rowcount, again.rowcount) == (1, 0)
    assert items.execute("SELECT n FROM items").fetchall() == [(1,)]


def test_upserts_count_and_replace(items: Database) -> None:
    upsert = (
        "INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) "
        "DO UPDATE SET value = counters.value + excluded.value"
    )
    with items.tx() as tx:
        tx.execute(upsert, ("hits", 2))
        tx.executemany(upsert, [("hits", 3), ("misses", 1)])
    assert dict(items.execute("SELECT name, value FROM counters").fetchall()) == {
        "hits": 5,
        "misses": 1,
    }
    with items.tx() as tx:
        changed = tx.execute("UPDATE counters SET value = 0 WHERE value > ?", (0,))
        assert changed.rowcount == 2


def test_a_transaction_sees_its_own_writes_and_others_see_them_only_after_commit(
    items: Database, open_db: Opener
) -> None:
    other = open_db()
    with items.tx() as tx:
        tx.execute("INSERT INTO items VALUES ('k', 1, 0, NULL)")
        assert items.execute("SELECT n FROM items").fetchall() == [(1,)]
        assert other.execute("SELECT n FROM items").fetchall() == []
    assert other.execute("SELECT n FROM items").fetchall() == [(1,)]


def test_a_failing_transaction_leaves_nothing(items: Database) -> None:
    with pytest.raises(RuntimeError), items.tx() as tx:
        tx.execute("INSERT INTO items VALUES ('k', 1, 0, NULL)")
        raise RuntimeError("stop")
    with pytest.raises(DatabaseError), items.tx() as tx:
        tx.execute("INSERT INTO items VALUES ('k', 1, 0, NULL)")
        tx.execute("INSERT INTO items VALUES ('k', 2, 0, NULL)")  # the key is taken
    assert items.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 0
    with items.tx() as tx:  # the database is usable after both
        tx.execute("INSERT INTO items VALUES ('k', 3, 0, NULL)")
    assert items.execute("SELECT n FROM items").fetchall() == [(3,)]


def test_write_transactions_of_many_processes_lose_no_update(
    items: Database, open_db: Opener
) -> None:
    """Read, decide, write: correct only if write transactions exclude each other."""
    with items.tx() as tx:
        tx.execute("INSERT INTO counters VALUES ('n', 0)")
    writers, rounds = 4, 25
    errors: list[BaseException] = []

    def work() -> None:
        db = open_db()  # its own connection: another process, as far as the state knows
        try:
            for _ in range(rounds):
                with db.tx() as tx:
                    (n,) = tx.execute("SELECT value FROM counters WHERE name='n'").fetchone()
                    time.sleep(0)  # let another thread run between the read and the write
                    tx.execute("UPDATE counters SET value=? WHERE name='n'", (n + 1,))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert items.execute("SELECT value FROM counters").fetchone()[0] == writers * rounds


def test_transactions_do_not_nest(items: Database) -> None:
    with items.tx(), pytest.raises(DatabaseError), items.tx():
        pass


def test_tables_are_known_and_a_missing_one_is_its_own_error(items: Database) -> None:
    assert items.has_table("items") and not items.has_table("nothing_here")
    with pytest.raises(MissingTable):
        items.execute("SELECT * FROM nothing_here")
    items.ensure(DDL)  # again: nothing changes, nothing fails
    assert items.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 0


def test_a_read_only_database_refuses_every_write(items: Database, open_db: Opener) -> None:
    with items.tx() as tx:
        tx.execute("INSERT INTO items VALUES ('k', 1, 0, NULL)")
    reader = open_db(writable=False)
    assert not reader.writable
    assert reader.execute("SELECT n FROM items").fetchall() == [(1,)]
    with pytest.raises(DatabaseError), reader.tx() as tx:
        tx.execute("DELETE FROM items")
    reader.ensure("CREATE TABLE IF NOT EXISTS more (x TEXT);")
    assert not items.has_table("more")
    assert items.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 1


def test_an_advisory_lock_has_one_holder_across_processes(db: Database, open_db: Opener) -> None:
    other = open_db()
    lock = db.advisory_lock("evict", "eviction")
    assert lock.holder() is None and not lock.held
    with lock:
        assert lock.held
        rival = other.advisory_lock("evict", "eviction")
        assert rival.holder() is not None
        with pytest.raises(Busy, match="another eviction is running"):
            rival.acquire()
        with other.advisory_lock("revoke", "revocation run"):
            pass  # another name is another lock
    assert lock.holder() is None
    with other.advisory_lock("evict", "eviction"):
        pass


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_lock_taken_again_opens_no_new_connection(
    db: Database, open_db: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An eviction takes its lock on every run: the connection a released lock leaves
    is taken again (a connect costs more than the lock's own round trips), it holds no
    lock meanwhile, and one the server dropped since is replaced."""
    import psycopg

    other = open_db()
    for each in (db, other):
        with each.advisory_lock("evict", "eviction"):
            pass
    connects: list[str] = []
    real = psycopg.connect
    monkeypatch.setattr(psycopg, "connect", lambda *a, **k: connects.append("x") or real(*a, **k))
    for _ in range(3):
        with db.advisory_lock("evict", "eviction") as lock:
            pid = lock._pid  # type: ignore[attr-defined]
            with pytest.raises(Busy):
                other.advisory_lock("evict", "eviction").acquire()
        with other.advisory_lock("evict", "eviction"):
            pass  # released: the kept connection holds nothing
    assert connects == []
    # the server ends the kept connection's session: the next lock connects anew
    other.execute("SELECT pg_terminate_backend(?)", (pid,))
    with db.advisory_lock("evict", "eviction"), pytest.raises(Busy):
        other.advisory_lock("evict", "eviction").acquire()
    assert connects == ["x"]


def test_the_database_clock_is_a_wall_clock(db: Database) -> None:
    # the database's clock, not the local one; on this machine they agree
    assert abs(db.now() - time.time()) < 60


def _count_runs(db: Database) -> None:
    db.execute("INSERT INTO counters VALUES ('migrated', 1) ON CONFLICT(name) "
               "DO UPDATE SET value = counters.value + 1")  # fmt: skip


MIGRATIONS = (
    Migration(1, "counters start", lambda db: None),
    Migration(2, "count the runs", _count_runs),
)


def test_migrations_apply_once_however_many_processes_open_at_once(open_db: Opener) -> None:
    errors: list[BaseException] = []
    applied: list[int] = []

    def start() -> None:
        try:
            applied.append(prepare(open_db(), [DDL], MIGRATIONS))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(applied) == [0, 0, 2]
    db = open_db()
    assert version(db) == 2
    assert db.execute("SELECT value FROM counters WHERE name='migrated'").fetchone() == (1,)
    assert prepare(db, [DDL], MIGRATIONS) == 0


def test_a_schema_newer_than_the_code_is_refused_before_anything_is_written(
    open_db: Opener,
) -> None:
    newer = (*MIGRATIONS, Migration(3, "from the future", lambda db: None))
    prepare(open_db(), [DDL], newer)
    db = open_db()
    with pytest.raises(SchemaTooNew, match="schema version 3, newer than the 2"):
        prepare(db, [DDL, "CREATE TABLE IF NOT EXISTS later (x TEXT);"], MIGRATIONS)
    assert not db.has_table("later")
    with pytest.raises(SchemaTooNew):
        check(open_db(writable=False), MIGRATIONS)
    assert SchemaTooNew.exit_code == 7 and SchemaTooNew.code == "schema_too_new"
