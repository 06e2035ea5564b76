"""Shared state: the sidecar's tables in PostgreSQL, through psycopg 3.

``SIDECAR_DATABASE_URL=postgresql://user:password@host:port/database``.  The tables live
in the connection's current schema (``?options=-csearch_path%3Dname`` picks another), so
several deployments may share one database, each in its own schema; every lock below is
keyed by the schema too.

**Translation** (:mod:`sidecar.storage.backends.pgsql`). The modules write SQL once, in the
dialect SQLite and PostgreSQL share (see :mod:`sidecar.storage.base`); this backend
rewrites, once per statement text: ``?`` placeholders to ``%s`` (and ``%`` to ``%%``),
``INSERT OR IGNORE INTO ...`` to ``INSERT INTO ... ON CONFLICT DO NOTHING``, and in
``CREATE TABLE`` / ``ALTER TABLE`` the column types: ``REAL`` to ``DOUBLE PRECISION``,
``INTEGER`` to ``BIGINT`` (an ``INTEGER PRIMARY KEY`` is a plain ``BIGINT`` key: no
statement relies on SQLite assigning it), ``TEXT`` to ``TEXT COLLATE "C"`` (bytewise
order and equality, as SQLite compares, whatever the database's locale). ``INSERT OR
REPLACE`` is refused: it deletes the old row first, which no upsert here means.

**Write transactions and the lock order.**  A write transaction takes transaction-level
advisory locks, always in this one order, so two transactions never wait for each other
in a circle:

1. its concern's lock (:data:`~sidecar.storage.base.CONCERNS`: ``learned``,
   ``archive``, ``decisions``), or, when it names none, every concern's lock in that
   order, before its first statement;
2. once its body is done, the *commit* lock, held until it commits: under it the write
   takes its id from the ``feed_writes`` counter, notifies the change feed and counts
   the leases (:mod:`sidecar.storage.backends.pgfeed`), so ids, notifications and commits follow
   one order.  A lease is taken under this lock alone.

So writes of one concern run one at a time across every process, as SQLite's ``BEGIN
IMMEDIATE`` makes all writes run: code that reads, decides and writes inside a
transaction (a revision bump, the learner's snapshot, a staged batch applied once) stays
correct with any number of replicas, as long as what it decides on is its concern's.
Writes of different concerns overlap, except for the commit lock's few round trips: the
group publisher removes published records while a report learns.  A report cannot be
split further: each one folds into the evidence log and the conditions that the next
report's learning reads, in the log's order.  (``python -m benchmarks.run state``
measures a write lock against the same transactions without it.)  Session locks (below)
are only tried, never waited for, so they take no place in the order.  Reads run outside
transactions on pooled connections and see what is committed.

**Locks for singleton work** (:meth:`PostgresDatabase.advisory_lock`) are session
advisory locks held on a connection of their own for as long as the work runs; the
server frees one when its holder's connection ends, a killed process included.  A lock
verifiably released leaves its connection to the next lock of the process (a connect
per eviction cost more than the eviction's other round trips to the state).

**Change feed and revision lease.**  Every write transaction notifies the state's
channel at commit with its write id; a process that caches listens on a
connection of its own and, by default, holds a lease that every write of another
process waits on, after its commit, until the process has heard of it
(:mod:`sidecar.storage.backends.pgfeed`).

**Poolers.**  Session advisory locks and ``LISTEN`` belong to one server session, so a
pooler that hands a client connection a different server session per transaction
(PgBouncer in ``transaction`` or ``statement`` mode) breaks them: it is not supported;
use session pooling or none.  Opening a writable database checks that consecutive
transactions of one connection run in the same server process, and releasing a lock
checks that it was still held; either refuses to go on when a pooler shows itself (a
quiet pooler may pass the first check: do not rely on it).

**Unreachable.**  Every statement raises :class:`~sidecar.storage.base.DatabaseError`
when the server cannot be reached: reads fail (a check never answers from a memory it
could not read), writes fail visibly, and nothing is kept aside on local disk.  A
broken connection is dropped, so the next statement reconnects.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from sidecar.errors import UnsafeStorage
from sidecar.storage.backends import pgread
from sidecar.storage.backends.pgfeed import (
    LEASES_DDL,
    LIVE_LEASES,
    NEXT_WRITE,
    OWN_WRITES,
    PROCESS,
    UNSEEN,
    WRITES_DDL,
    ChangeFeed,
    read_committed,
    wait_seen,
)
from sidecar.storage.backends.pglock import PgLock
from sidecar.storage.backends.pgsql import display, failure, safe, translate
from sidecar.storage.base import (
    CONCERNS,
    Concern,
    Connection,
    Database,
    DatabaseError,
    Row,
    statements,
)

if TYPE_CHECKING:
    import psycopg

IDLE_KEPT = 8
"""Idle connections a process keeps for reads and transactions."""
LOCK_IDLE_KEPT = 2
"""Idle connections a process keeps for the locks of singleton work, apart from the
others: a lock taken again (every eviction, every maintenance pass) opens no new
connection, a connect and its keepalive settings costing more than the work's own round
trips on a one-tool move.  A connection is kept only after its lock was verifiably
released, so it holds none."""
CONNECT_TIMEOUT = 10
"""Seconds to wait for the server when the URL does not say."""
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


class _Rows:
    """A statement's rows, read whole (the connection goes back to the pool at once)."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Row], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> Row | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[Row]:
        rows, self._rows = self._rows, []
        return rows

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())


class PostgresDatabase(Database):
    dialect: ClassVar[str] = "postgresql"
    own_tables: ClassVar[tuple[str, ...]] = ("feed_leases", "feed_writes")

    def __init__(
        self,
        url: str,
        writable: bool = True,
        revision_cache_s: float = 0.0,
        revision_lease_s: float = 0.0,
        migrate: bool = True,
    ) -> None:
        """The revisions cached under a lease if ``revision_lease_s`` > 0 (:mod:`sidecar.
        storage.pgfeed`), else up to ``revision_cache_s`` (less once another process
        writes), else read every request; ``migrate=False``: no DDL (no leases table)."""
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        self.url = url
        self.writable = writable
        self._psycopg = psycopg
        try:
            params: dict[str, Any] = dict(conninfo_to_dict(url))
        except psycopg.Error as exc:
            # the parser quotes the piece it choked on, often the password itself
            raise DatabaseError(
                safe(f"the database URL cannot be parsed: {str(exc).strip()}", url)
            ) from None
        params.setdefault("connect_timeout", CONNECT_TIMEOUT)
        # a connection whose server went silent is found dead in about 40 s, not the
        # kernel's two hours (the server side of a lock's connection: see PgLock)
        for option, value in KEEPALIVES.items():
            params.setdefault(option, value)
        # what a Busy message names as a lock's holder
        name = f"sidecar pid {os.getpid()} on {socket.gethostname()}"
        params.setdefault("application_name", name)
        self._params = params
        self._idle: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue()
        self._lock_idle: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue()
        self._local = threading.local()
        self._closed = False
        self._prepared_on: pgread.Prepared = weakref.WeakKeyDictionary()
        conn = self._connect()
        try:
            (self.schema,) = self._one(conn, "SELECT current_schema()")
            if self.schema is None:
                raise DatabaseError(
                    f"{self.location} has no schema to hold the state: the search_path "
                    "names none that exists (create it, or fix ?options=-csearch_path)"
                )
            if writable:
                self._check_session_pooling(conn)
                if migrate:
                    self._leases_table(conn)
        except BaseException:
            conn.close()
            raise
        self._put(conn)
        self.channel = f"sidecar_changes_{self.key('state') & 0xFFFF_FFFF_FFFF:012x}"
        self._keys = {name: self.key(name) for name in (*CONCERNS, "commit")}
        self._feed: ChangeFeed | None = None
        self._cache_s = revision_cache_s
        self._lease_s = revision_lease_s if writable else 0.0
        self._feed_lock = threading.Lock()

    # ---- connections ----------------------------------------------------------------
    @property
    def location(self) -> str:
        return display(self.url)

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = read_committed(self._psycopg.connect(autocommit=True, **self._params))
        except self._psycopg.Error as exc:
            # not chained: a traceback would print the driver's words unmasked
            detail = safe(str(exc).strip(), self.url)
            raise DatabaseError(
                f"cannot reach the state database {self.location}: {detail}"
            ) from None
        if not self.writable:
            try:
                conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            except self._psycopg.Error as exc:
                conn.close()
                raise failure(exc) from exc
        return conn

    def _get(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise DatabaseError(f"the state database {self.location} was closed")
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._connect()

    def _put(self, conn: psycopg.Connection[Any]) -> None:
        idle = conn.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE
        full = self._idle.qsize() >= IDLE_KEPT
        if self._closed or conn.closed or conn.broken or not idle or full:
            conn.close()
            return
        self._idle.put(conn)

    def _lock_connection(self) -> tuple[psycopg.Connection[Any], bool]:
        """A connection for a session lock, and whether it is new: one a released lock
        left, else a new one."""
        if self._closed:
            raise DatabaseError(f"the state database {self.location} was closed")
        try:
            return self._lock_idle.get_nowait(), False
        except queue.Empty:
            return self._connect(), True

    def _keep_lock_connection(self, conn: psycopg.Connection[Any]) -> None:
        """A lock's connection that holds no lock now, kept for the next lock."""
        idle = conn.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE
        full = self._lock_idle.qsize() >= LOCK_IDLE_KEPT
        if self._closed or conn.closed or conn.broken or not idle or full:
            conn.close()
            return
        self._lock_idle.put(conn)

    def _one(self, conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> Row:
        try:
            row = conn.execute(sql, tuple(params)).fetchone()
        except self._psycopg.Error as exc:
            raise failure(exc) from exc
        assert row is not None
        return tuple(row)

    def _check_session_pooling(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a pooler that moves a connection between server sessions: the state's
        locks would silently stop excluding anyone."""
        pids = {self._one(conn, "SELECT pg_backend_pid()")[0] for _ in range(3)}
        if len(pids) > 1:
            raise UnsafeStorage(
                f"{self.location} moves one connection between server sessions "
                f"(backends {sorted(pids)}): a pooler in transaction or statement mode "
                "(PgBouncer) breaks the state's locks; connect directly or use session pooling"
            )

    def create_own_tables(self) -> None:
        conn = self._get()
        try:
            self._leases_table(conn)
        finally:
            self._put(conn)

    def _leases_table(self, conn: psycopg.Connection[Any]) -> None:
        """The table every writer counts the caching processes' leases in, and the one
        that numbers the writes in commit order (under the commit lock: two processes
        creating one table at once may collide)."""
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self.key("commit"),))
                conn.execute(LEASES_DDL)
                conn.execute(WRITES_DDL)
        except self._psycopg.Error as exc:
            raise failure(exc) from exc

    def key(self, name: str) -> int:
        """The advisory-lock key of ``name`` in this schema (a signed 64-bit integer)."""
        digest = hashlib.sha256(f"sidecar:{self.schema}:{name}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    # ---- statements -----------------------------------------------------------------
    def _run(
        self, conn: psycopg.Connection[Any], sql: str, params: Sequence[Any], many: bool
    ) -> _Rows:
        query = translate(sql)
        try:
            with conn.cursor() as cur:
                if many:
                    cur.executemany(query, [tuple(p) for p in params])
                    return _Rows([], cur.rowcount)
                cur.execute(query, tuple(params))
                rows = [tuple(r) for r in cur.fetchall()] if cur.description is not None else []
                return _Rows(rows, cur.rowcount)
        except self._psycopg.Error as exc:
            raise failure(exc) from exc

    def _statement(self, sql: str, params: Sequence[Any], many: bool) -> _Rows:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return self._run(conn, sql, params, many)
        conn = self._get()
        try:
            return self._run(conn, sql, params, many)
        finally:
            self._put(conn)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Rows:
        return self._statement(sql, params, False)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> _Rows:
        return self._statement(sql, list(rows), True)

    overlaps_reads: ClassVar[bool] = True

    def begin_read(self, sql: str) -> Callable[[], list[Row]]:
        """One round trip and no more (see :mod:`sidecar.storage.backends.pgread`): sent now, its
        answer awaited when the caller asks for it."""
        if getattr(self._local, "conn", None) is not None:
            return super().begin_read(sql)  # inside this thread's write transaction
        conn, query = self._get(), translate(sql)
        try:
            pgread.send(conn, query, self._prepared_on)
        except BaseException as exc:
            self._put(conn)
            if isinstance(exc, self._psycopg.Error):
                raise failure(exc) from exc
            raise

        def rows() -> list[Row]:
            try:
                return pgread.answer(conn, query, self._prepared_on)
            except self._psycopg.Error as exc:
                raise failure(exc) from exc
            finally:
                self._put(conn)

        return rows

    def tx(self, concern: Concern | None = None) -> AbstractContextManager[Connection]:
        return self._tx(concern)

    @contextmanager
    def _tx(self, concern: Concern | None) -> Iterator[Connection]:
        if getattr(self._local, "conn", None) is not None:
            raise DatabaseError("write transactions do not nest")
        keys = [self._keys[c] for c in CONCERNS if concern in (None, c)]
        write, leases = 0, 0
        conn = self._get()
        try:
            with conn.transaction():
                # the concern's lock, or every concern's in the global order (see above)
                for key in keys:
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                self._local.conn = conn
                try:
                    yield self
                finally:
                    self._local.conn = None
                write, leases = self._in_commit_order(conn)
        except self._psycopg.Error as exc:
            raise failure(exc) from exc
        finally:
            # every database object of this process on this state sees the write at
            # once, without waiting for the notification
            with _WRITES_LOCK:
                _WRITES[self.channel] = _WRITES.get(self.channel, 0) + 1
            self._put(conn)
        if leases:
            self._wait_seen(write)

    def _in_commit_order(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        """The body done, under the commit lock until the commit: the write's id (the
        next of the ``feed_writes`` counter, so ids follow commit order), its
        notification (delivered at commit to every process's change feed, none on
        rollback) and the leases of the processes whose caches must see it before it is
        acknowledged (counted in a statement after the lock's own: see :mod:`.pgfeed`)."""
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._keys["commit"],))
        write, _, leases = self._one(
            conn,
            f"WITH n AS ({NEXT_WRITE}) SELECT w, pg_notify(%s, w::text), ({LIVE_LEASES}) FROM n",
            (self.channel, PROCESS),
        )
        OWN_WRITES.add(self.channel, int(write))
        return int(write), int(leases)

    def _wait_seen(self, write: int) -> None:
        """Committed: return once every other process that caches under a lease has
        seen this write (or its lease expired)."""

        def ask() -> int:
            conn = self._get()
            try:
                return int(self._one(conn, UNSEEN, (PROCESS, write))[0])
            finally:
                self._put(conn)

        def unseen() -> int:
            # the write is committed: an idle connection the server dropped (it fails
            # once and is not kept) does not fail it; the question is asked again
            for _ in range(IDLE_KEPT):
                with contextlib.suppress(DatabaseError):
                    return ask()
            return ask()

        try:
            wait_seen(unseen)
        except TimeoutError as exc:
            raise DatabaseError(str(exc)) from None

    def change_token(self) -> object | None:
        leased = self._lease_s > 0
        if not (leased or self._cache_s > 0) or getattr(self._local, "conn", None) is not None:
            return None  # off; or inside a write transaction, whose writes are not committed
        with self._feed_lock:
            if self._feed is None and not self._closed:
                # named apart, so an operator sees which connection holds the lease
                named = {
                    **self._params,
                    "application_name": f"{self._params['application_name']} changes",
                }
                self._feed = ChangeFeed(
                    lambda: read_committed(self._psycopg.connect(autocommit=True, **named)),
                    self.channel,
                    lambda: self._closed,
                    self._psycopg.Error,
                    lease_s=self._lease_s,
                    commit_key=self._keys["commit"],
                )
        feed = self._feed
        if feed is None or not (feed.leased() if leased else feed.listening):
            return None
        writes = _WRITES.get(self.channel, 0)
        if leased:
            return (feed.generation, writes)
        return (feed.generation, writes, int(time.monotonic() / self._cache_s))

    def ensure(self, ddl: str) -> None:
        if not self.writable:
            return
        with self.tx() as db:
            for statement in statements(ddl):
                db.execute(statement)

    def has_table(self, name: str) -> bool:
        row = self.execute(
            "SELECT 1 FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (name,),
        ).fetchone()
        return row is not None

    def advisory_lock(self, name: str, purpose: str) -> PgLock:
        return PgLock(self, name, purpose)

    def now(self) -> float:
        row = self.execute("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)")
        return float(row.fetchall()[0][0])

    def close(self) -> None:
        self._closed = True
        if self._feed is not None and self._lease_s > 0:
            # no other process's write waits for this one's lease any longer
            with contextlib.suppress(self._psycopg.Error, DatabaseError):
                try:
                    conn = self._idle.get_nowait()
                except queue.Empty:
                    conn = self._connect()
                try:
                    self._feed.release(conn)
                finally:
                    conn.close()
        for idle in (self._idle, self._lock_idle):
            while True:
                try:
                    idle.get_nowait().close()
                except queue.Empty:
                    break


_WRITES: dict[str, int] = {}
"""Write transactions this process ended, per state (its channel)."""
_WRITES_LOCK = threading.Lock()
