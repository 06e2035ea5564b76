"""A session advisory lock of a PostgreSQL state, for singleton work (an eviction, a
revocation run, the group publisher): held on a connection of its own for as long as
the work runs, freed by the server when its holder's connection ends (a killed process
included); see :mod:`sidecar.storage.backends.postgres`."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from sidecar.errors import Busy
from sidecar.storage.backends.pgsql import failure
from sidecar.storage.base import DatabaseError, Row

if TYPE_CHECKING:
    import psycopg


LOCK_SESSION_KEEPALIVE = (
    "SELECT set_config('tcp_keepalives_idle', '10', false), "
    "set_config('tcp_keepalives_interval', '10', false), "
    "set_config('tcp_keepalives_count', '3', false)"
)
"""Run on a lock's own connection: a holder whose machine vanished must not keep
singleton work (a move, a revocation run) from every other replica for hours; the
server ends the session, and with it the lock, about 40 s after the holder went
silent.  A holder that dies on a live machine loses it at once (its socket closes)."""


class LockHost(Protocol):
    """What a lock uses of its database (the PostgreSQL backend's): its connections,
    one statement's row, its keys."""

    @property
    def _psycopg(self) -> Any: ...

    @property
    def location(self) -> str: ...

    def key(self, name: str) -> int: ...

    def _connect(self) -> psycopg.Connection[Any]: ...

    def _get(self) -> psycopg.Connection[Any]: ...

    def _put(self, conn: psycopg.Connection[Any]) -> None: ...

    def _lock_connection(self) -> tuple[psycopg.Connection[Any], bool]: ...

    def _keep_lock_connection(self, conn: psycopg.Connection[Any]) -> None: ...

    def _one(self, conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> Row: ...


class PgLock:
    """A session advisory lock on a connection of its own (see
    :mod:`sidecar.storage.backends.postgres`)."""

    def __init__(self, db: LockHost, name: str, purpose: str) -> None:
        self._db = db
        self.name = name
        self.purpose = purpose
        self._key = db.key(name)
        self._conn: psycopg.Connection[Any] | None = None
        self._pid = 0

    @property
    def held(self) -> bool:
        return self._conn is not None

    def acquire(self) -> None:
        conn, fresh = self._db._lock_connection()
        try:
            try:
                got, pid = self._try(conn)
            except DatabaseError:
                if fresh:
                    raise
                # a kept connection the server has since dropped: a new one
                conn.close()
                conn, fresh = self._db._connect(), True
                got, pid = self._try(conn)
            if not got:
                who = self._holder(conn) or "holder unknown"
                self._db._keep_lock_connection(conn)
                raise Busy(
                    f"another {self.purpose} is running ({who}); wait for it to finish "
                    f"(lock: {self.name} in {self._db.location})",
                    who,
                )
            if fresh:  # the setting stays with the session, for every later lock on it
                self._db._one(conn, LOCK_SESSION_KEEPALIVE)
        except Busy:
            raise
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, int(pid)

    def _try(self, conn: psycopg.Connection[Any]) -> Row:
        return self._db._one(
            conn, "SELECT pg_try_advisory_lock(%s), pg_backend_pid()", (self._key,)
        )

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            still, pid = self._db._one(
                conn, "SELECT pg_advisory_unlock(%s), pg_backend_pid()", (self._key,)
            )
        except BaseException:
            conn.close()
            raise
        if not still or pid != self._pid:
            conn.close()
            raise DatabaseError(
                f"the {self.purpose} lock was no longer held when released: its connection "
                "changed server session (a pooler in transaction mode?) or was reset"
            )
        self._db._keep_lock_connection(conn)

    def holder(self) -> str | None:
        conn = self._db._get()
        try:
            return self._holder(conn)
        finally:
            self._db._put(conn)

    def _holder(self, conn: psycopg.Connection[Any]) -> str | None:
        unsigned = self._key & 0xFFFF_FFFF_FFFF_FFFF
        try:
            row = conn.execute(
                "SELECT l.pid, a.application_name FROM pg_locks l "
                "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                "AND l.classid::bigint = %s AND l.objid::bigint = %s "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (unsigned >> 32, unsigned & 0xFFFF_FFFF),
            ).fetchone()
        except self._db._psycopg.Error as exc:
            raise failure(exc) from exc
        if row is None:
            return None
        pid, app = row
        return f"{app or 'a client'} (server pid {pid})"

    def __enter__(self) -> PgLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except DatabaseError:
            if exc_type is None:
                raise  # a failure already on its way says more than a lost lock
