"""The one read every request makes on PostgreSQL (the revisions), with the least work
between the caller and the wire: prepared once per connection, then sent as a Bind and
an Execute through libpq itself (no cursor, no parameters to adapt), its answer awaited
on the socket (other threads run meanwhile) and read as text.

Sending and waiting are split so that the caller works while the read travels
(:meth:`~sidecar.storage.backends.postgres.PostgresDatabase.begin_read`).  Both raise psycopg's
errors; the database maps them to its own.
"""

from __future__ import annotations

import hashlib
import select
import weakref
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sidecar.storage.base import Row

if TYPE_CHECKING:
    import psycopg

Prepared = weakref.WeakKeyDictionary["psycopg.Connection[Any]", set[bytes]]
"""The statements prepared on each open connection, by name."""


@lru_cache(maxsize=64)
def statement_name(sql: str) -> bytes:
    return f"sidecar_{hashlib.sha256(sql.encode()).hexdigest()[:16]}".encode()


def send(conn: psycopg.Connection[Any], sql: str, prepared: Prepared) -> None:
    """Send ``sql`` (PostgreSQL's spelling, no parameters) on ``conn``, an idle
    autocommit connection; prepare it first if this connection has not yet."""
    name = statement_name(sql)
    known = prepared.setdefault(conn, set())
    if name not in known:
        conn.execute(f"PREPARE {name.decode()} AS {sql}")
        known.add(name)
    pg = conn.pgconn
    pg.send_query_prepared(name, [])
    while pg.flush():
        wait(pg.socket, write=True)


def answer(conn: psycopg.Connection[Any], sql: str, prepared: Prepared) -> list[Row]:
    """The rows of what :func:`send` sent, values as text (``None`` for NULL).  Every
    result is read, a failed one too, so the connection is idle again after."""
    import psycopg

    res = _result(conn)
    if res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == MISSING_STATEMENT:
        # deallocated under it: psycopg sends DEALLOCATE ALL after a rollback or a DROP
        # on a connection where it prepared statements of its own
        prepared.get(conn, set()).discard(statement_name(sql))
        send(conn, sql, prepared)
        res = _result(conn)
    if res.status != psycopg.pq.ExecStatus.TUPLES_OK:
        raise psycopg.errors.error_from_result(res, conn.info.encoding)
    columns = range(res.nfields)
    rows: list[Row] = []
    for r in range(res.ntuples):
        values = (res.get_value(r, c) for c in columns)
        rows.append(tuple(None if v is None else v.decode() for v in values))
    return rows


MISSING_STATEMENT = b"26000"
"""SQLSTATE invalid_sql_statement_name: no prepared statement of that name."""


def _result(conn: psycopg.Connection[Any]) -> psycopg.pq.abc.PGresult:
    import psycopg

    pg = conn.pgconn
    results = []
    while True:
        while pg.is_busy():
            wait(pg.socket, write=False)
            pg.consume_input()
        res = pg.get_result()
        if res is None:
            break
        results.append(res)
    if not results:
        raise psycopg.OperationalError("the server answered nothing to a read")
    return results[0]


def wait(fd: int, write: bool) -> None:
    """Block until the socket is ready, without holding the interpreter's lock."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLOUT if write else select.POLLIN)
        poller.poll()
    else:  # pragma: no cover - platforms without poll()
        select.select([] if write else [fd], [fd] if write else [], [])
