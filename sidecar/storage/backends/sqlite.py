"""The embedded default: the state in one SQLite file under the home.

WAL, so that readers never block the writer; ``synchronous=NORMAL``, so that a process
crash loses nothing (only a power loss may drop the last commits, which the journal's
idempotent replays tolerate).  One connection serves every thread of a process: write
transactions take turns on a re-entrant lock and begin ``IMMEDIATE`` (the file's write
lock, which also excludes other processes).  A database opened with ``writable=False``
uses a read-only connection: it never creates the file, its tables or its WAL, and
every write fails.  Advisory locks are files beside the database (``evict.lock``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, ClassVar

from sidecar.app.lock import WriterLock
from sidecar.storage.base import (
    Concern,
    Connection,
    Database,
    DatabaseError,
    MissingTable,
    Row,
)


def failure(exc: sqlite3.Error) -> DatabaseError:
    """The storage error for what SQLite raised."""
    text = str(exc)
    cls = MissingTable if text.startswith("no such table") else DatabaseError
    return cls(f"the state database cannot serve this: {text}", text)


class _Cursor:
    """A SQLite cursor whose fetches raise the storage errors (SQLite steps lazily: a
    fetch can meet a disk error the ``execute`` did not)."""

    __slots__ = ("_cur",)

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    def fetchone(self) -> Row | None:
        try:
            row: Row | None = self._cur.fetchone()
        except sqlite3.Error as exc:
            raise failure(exc) from exc
        return row

    def fetchall(self) -> list[Row]:
        try:
            rows: list[Row] = self._cur.fetchall()
        except sqlite3.Error as exc:
            raise failure(exc) from exc
        return rows

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())


def read_only(path: Path, no_writer: Callable[[], bool] | None = None) -> sqlite3.Connection:
    """A read-only connection.  A WAL database needs its ``-shm`` file, which a reader
    creates or maps; where that fails (a read-only mount, a full disk, a ``-shm`` a
    failed writer left torn) and ``no_writer()`` says no process writes the database,
    the file is read as immutable."""
    db = sqlite3.connect(
        f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
    )
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError:
        if no_writer is None or not no_writer():
            raise
        db.close()
        db = sqlite3.connect(
            f"file:{path}?mode=ro&immutable=1",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
    return db


def _enter_wal(db: sqlite3.Connection) -> None:
    """Switch to WAL.  The switch needs the file to itself, and when several processes
    open a new file at once SQLite can refuse it with "database is locked" without
    waiting out the busy timeout (a lock upgrade that could deadlock is refused at
    once): try again for a while."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class SqliteDatabase(Database):
    dialect: ClassVar[str] = "sqlite"

    def __init__(
        self, path: Path, writable: bool = True, no_writer: Callable[[], bool] | None = None
    ) -> None:
        """``no_writer`` (read-only databases): whether no process writes the file now,
        which lets a reader open it where its ``-shm`` file cannot be used."""
        self.path = path
        self.writable = writable
        self._lock = threading.RLock()
        try:
            if writable:
                self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
                self._db.execute("PRAGMA busy_timeout=10000")
                _enter_wal(self._db)
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("PRAGMA cache_size=-65536")
            else:
                self._db = read_only(path, no_writer)
            self._db.execute("PRAGMA busy_timeout=10000")
        except sqlite3.Error as exc:
            raise failure(exc) from exc

    @property
    def location(self) -> str:
        return str(self.path)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Cursor:
        try:
            return _Cursor(self._db.execute(sql, params))
        except sqlite3.Error as exc:
            raise failure(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> _Cursor:
        try:
            return _Cursor(self._db.executemany(sql, rows))
        except sqlite3.Error as exc:
            raise failure(exc) from exc

    def tx(self, concern: Concern | None = None) -> AbstractContextManager[Connection]:
        return self._tx()  # one writer at a time, whatever the concern

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        # one connection serves every thread of a server: transactions take turns
        with self._lock:
            self.execute("BEGIN IMMEDIATE")
            try:
                yield self
            except BaseException:
                if self._db.in_transaction:
                    self.execute("ROLLBACK")
                raise
            self.execute("COMMIT")

    def reading(self) -> AbstractContextManager[None]:
        @contextmanager
        def waiting() -> Iterator[None]:
            with self._lock:
                yield

        return waiting()

    def ensure(self, ddl: str) -> None:
        if self.writable:
            with self._lock:
                try:
                    self._db.executescript(ddl)
                except sqlite3.Error as exc:
                    raise failure(exc) from exc

    def has_table(self, name: str) -> bool:
        row = self.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)
        ).fetchone()
        return row is not None

    def create_own_tables(self) -> None:
        """SQLite keeps no table of its own: its locks are files."""

    def advisory_lock(self, name: str, purpose: str) -> WriterLock:
        """A file lock beside the database (``evict.lock`` for ``evict``)."""
        return WriterLock(self.path.parent / f"{name}.lock", purpose)

    def now(self) -> float:
        return time.time()

    def close(self) -> None:
        self._db.close()
