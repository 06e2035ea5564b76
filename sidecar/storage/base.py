"""The state database as every module of the sidecar uses it, whichever engine holds it.

SQL is written once, in the dialect SQLite and PostgreSQL share: ``?`` placeholders,
``INSERT OR IGNORE INTO ...`` for an insert that skips a stored key, upserts spelled
``INSERT ... ON CONFLICT (key) DO UPDATE SET ...`` with the stored row's columns named by
table (``SET n = t.n + 1``: PostgreSQL finds a bare ``n`` ambiguous) and never as
``INSERT OR REPLACE``, column
types in capitals (``TEXT``, ``INTEGER``, ``REAL``) with names in lower case, and no
engine's own functions or hidden columns (``rowid``, ``sqlite_master``, PRAGMAs).  A
backend translates what its engine spells differently (:mod:`sidecar.storage.backends.postgres`).

A :class:`Database` answers reads with :meth:`~Database.execute` and groups writes in
:meth:`~Database.tx`, a write transaction that excludes every other writer of the same
*concern* for as long as it runs (:data:`CONCERNS`; with none named, every writer of the
state, as SQLite's ``BEGIN IMMEDIATE`` does): code that reads, decides and writes inside
one is correct however many processes share the state, as long as what it reads and
decides on belongs to its concern.  SQLite has one writer whatever the concern.

Errors: a backend raises :class:`DatabaseError` (a
:class:`~sidecar.errors.StateUnavailable`: HTTP 503, exit code 7) for whatever its
driver raises, and :class:`MissingTable` for a statement naming a table the database
lacks (a home written before the table existed, opened for reading); a database written
by a newer sidecar is refused with :class:`~sidecar.errors.SchemaTooNew` (also exit 7).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any, ClassVar, Literal, Protocol

from sidecar.errors import SchemaTooNew as SchemaTooNew
from sidecar.errors import StateUnavailable

Row = tuple[Any, ...]
Concern = Literal["learned", "archive", "decisions"]
CONCERNS: tuple[Concern, ...] = ("learned", "archive", "decisions")
"""What a write transaction may name as the part of the state it reads, decides on and
writes, in the one order locks are taken in (a transaction naming none takes all):

- ``learned``: what a report folds in and what reads it back to decide: the evidence
  log and the conditions, the rules (fatal sequences, their sightings and
  contradictions), the usage counters and requests, budgets, staged batches; and the
  revision counters of these;
- ``archive``: the records acknowledged and not yet published (``archive_pending``),
  as the group publisher removes the ones it published;
- ``decisions``: the log of what was decided for each call and lookup (``decisions``),
  written behind the answers, never read to decide anything.

A report queues its records in ``learned`` (it only inserts them); every other writer
(the catalog, evictions, revocations, migrations, forgetting a source) names none."""


class DatabaseError(StateUnavailable):
    """The state database could not run a statement (unreachable, read-only, full, or
    a statement it refused).  To the shells it is a :class:`StateUnavailable`."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = message if detail is None else detail
        """What the database driver said."""


class MissingTable(DatabaseError):
    """A statement named a table the database does not have."""


class Cursor(Protocol):
    """The rows of one statement, and how many rows a write changed."""

    @property
    def rowcount(self) -> int: ...

    # rows are tuples; typed Any, as the drivers type them, so that a caller unpacks a
    # row of known shape without a cast
    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What a write transaction hands its body: statements run inside it."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Cursor: ...


class Lock(Protocol):
    """A non-blocking lock shared by every process of the state (see
    :meth:`Database.advisory_lock`).  ``acquire`` raises :class:`~sidecar.errors.Busy`
    when another holder has it."""

    @property
    def held(self) -> bool: ...

    def acquire(self) -> None: ...

    def release(self) -> None: ...

    def holder(self) -> str | None:
        """Who holds it now (anyone, this object included), or ``None`` when it is free."""
        ...

    def __enter__(self) -> Lock: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class Database(ABC):
    """One state database: reads, write transactions, DDL, locks and a clock."""

    dialect: ClassVar[str]
    """``sqlite`` or ``postgresql``."""
    writable: bool
    """A read-only database refuses every write (and :meth:`ensure` does nothing)."""
    own_tables: ClassVar[tuple[str, ...]] = ()
    """Tables the backend keeps for its own machinery (not a repository's), created when
    it is opened for writing by a process that may migrate the schema."""

    @abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement.  Inside a :meth:`tx` of the same thread it runs in that
        transaction (it sees the transaction's own writes); elsewhere it reads what is
        committed."""

    @abstractmethod
    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Cursor:
        """Run one statement for each row of parameters."""

    @abstractmethod
    def tx(self, concern: Concern | None = None) -> AbstractContextManager[Connection]:
        """A write transaction: committed when the body returns, rolled back when it
        raises; from its start to its end it excludes every other write transaction on
        the state (of this process or any other) of the same ``concern``, or, with
        none named, every other one.  Transactions do not nest."""

    @abstractmethod
    def ensure(self, ddl: str) -> None:
        """Create a module's tables and indexes if they are missing (writable only)."""

    @abstractmethod
    def has_table(self, name: str) -> bool:
        """Whether the database has a table of this name."""

    @abstractmethod
    def create_own_tables(self) -> None:
        """Create :attr:`own_tables` where they are missing (writable only)."""

    @abstractmethod
    def advisory_lock(self, name: str, purpose: str) -> Lock:
        """A lock for singleton work (an eviction, a revocation run): one holder at a
        time across every process sharing the state.  ``purpose`` names the work in
        the :class:`~sidecar.errors.Busy` message a second holder gets."""

    @abstractmethod
    def now(self) -> float:
        """The database's clock, in seconds since the epoch: the one clock every process
        sharing the state agrees on (for leases)."""

    def change_token(self) -> object | None:
        """A value that stays equal for as long as no process sharing the state can
        have committed a write since it was returned, or ``None`` when the backend
        cannot tell (read again every time).  A cache of a small, hot read (the
        revisions) keeps its value while the token it was read under is still the
        one returned.  Never equal across a write of this process."""
        return None

    def begin_read(self, sql: str) -> Callable[[], list[Row]]:
        """Send ``sql`` (a small read with no parameters that every request makes: the
        revisions) now, and return what waits for its rows (values as text): call it
        exactly once, also when the work between fails.  The read sees every commit
        made before this call returned.  A backend across a network sends it at once and
        lets the caller work while it travels (:meth:`RevisionRepository.judged
        <sidecar.storage.revisions.RevisionRepository.judged>`); this one reads now."""
        rows = [tuple(None if v is None else str(v) for v in r) for r in self.execute(sql)]
        return lambda: rows

    overlaps_reads: ClassVar[bool] = False
    """Whether :meth:`begin_read` returns before the read is done (worth overlapping)."""

    def reading(self) -> AbstractContextManager[None]:
        """Around reads that must see only committed data even while another thread of
        this process is inside a write transaction.  Only a backend that shares one
        connection between threads needs to wait here."""
        return nullcontext()

    @abstractmethod
    def close(self) -> None: ...

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the state is, for messages (a path, or a URL without its password)."""


_STATEMENT_END = re.compile(r";\s*(?:\n|$)")


def statements(ddl: str) -> list[str]:
    """The statements of a DDL script (statements end with ``;`` at the end of a line;
    the project's DDL holds no ``;`` inside a string)."""
    return [s.strip() for s in _STATEMENT_END.split(ddl) if s.strip()]
