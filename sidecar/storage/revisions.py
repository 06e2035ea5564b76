"""Revisions: small counters every process reads to know whether its caches are stale,
and the state's key-value settings (``meta``).

- ``tools_rev`` moves before and after every write to the hot index, by any process;
  ``tools_writes`` remembers which process made each of the last revisions, so that a
  process can tell its own writes (its in-memory copies followed them) from others';
- ``constraints_rev`` moves whenever the fatal sequences in force may have changed;
- ``usage_rev`` moves whenever a completed run is counted;
- ``evidence_seq`` and ``evidence_generation``: the call memory's log (see
  :mod:`sidecar.storage.conditions`); ``conditions_rev``: its conditions' lifecycle;
- ``requests_seq`` and ``requests_generation``: the usage requests (see
  :mod:`sidecar.storage.requests`).

All of them are read in one small read (:meth:`RevisionRepository.current`; on
PostgreSQL one prepared statement, one round trip: :meth:`Database.begin_read
<sidecar.storage.base.Database.begin_read>`), and a request reads them once
(:meth:`RevisionRepository.pinned`): a request that starts after a commit, on any
process, sees it, at the cost of that one read.  A check sends the read and works while
it travels (:meth:`RevisionRepository.judged`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from sidecar.storage.base import Connection, Database, MissingTable

COUNTERS = (
    "constraints_rev",
    "tools_rev",
    "usage_rev",
    "evidence_seq",
    "evidence_generation",
    "conditions_rev",
    "requests_seq",
    "requests_generation",
)
READ = "SELECT key, value FROM meta WHERE key IN ({})".format(", ".join(f"'{k}'" for k in COUNTERS))
"""Every revision in one statement with no parameters (one prepared read)."""
T = TypeVar("T")


@dataclass(frozen=True)
class Revisions:
    constraints: int = 0
    tools: int = 0
    usage: int = 0
    evidence: int = 0
    """The call memory's last log row."""
    generation: int = 0
    """The call memory's log generation (forgetting starts a new one)."""
    conditions: int = 0
    requests: int = 0
    """The usage requests' last write (see :mod:`sidecar.storage.requests`)."""
    requests_generation: int = 0
    """Moves when usage requests are forgotten: replicas read them all again."""


TOOLS_WRITES_KEPT = 4096
"""Hot-index revisions remembered with their writer; a process that fell further behind
treats the gap as another process's write."""


class RevisionRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tools_writes (rev INTEGER PRIMARY KEY, writer TEXT NOT NULL);
"""

    def __init__(self, db: Database, writer: str) -> None:
        self._db = db
        self.writer = writer
        """This process's name in ``tools_writes``."""
        self._cache: tuple[object, Revisions] | None = None
        self._last: Revisions | None = None
        """What the last read found (a :meth:`judged` request runs on it meanwhile)."""
        self._pin = threading.local()

    # ---- settings ----------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, tx: Connection, key: str, value: str) -> None:
        tx.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def has_settings(self) -> bool:
        """Whether the database holds a sidecar state at all."""
        return self._db.has_table("meta")

    # ---- counters ----------------------------------------------------------------------
    @staticmethod
    def bump(tx: Connection, key: str) -> None:
        """Move a revision counter inside a transaction."""
        tx.execute(
            "INSERT INTO meta VALUES (?, '1') ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(meta.value AS INTEGER) + 1",
            (key,),
        )

    def counter(self, key: str) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def revisions(self) -> tuple[int, int]:
        """The constraints revision and the hot-index revision."""
        now = self.current()
        return now.constraints, now.tools

    def current(self) -> Revisions:
        """Every revision, in one read: the one a :meth:`pinned` request read first, else
        the one cached while the database's change token says no process can have
        written since, else read now."""
        pinned = getattr(self._pin, "value", None)
        if pinned is not None:
            return pinned  # type: ignore[no-any-return]
        token = self._db.change_token()
        cached = self._cache
        if token is not None and cached is not None and cached[0] == token:
            found = cached[1]
        else:
            found = self._read()
            self._cache = (token, found)
        if getattr(self._pin, "active", False):
            self._pin.value = found
        return found

    def _read(self) -> Revisions:
        return self._begin()()

    def _begin(self) -> Callable[[], Revisions]:
        """Send the one read of every revision; what is returned waits for it."""
        try:
            wait = self._db.begin_read(READ)
        except MissingTable:
            return Revisions

        def revisions() -> Revisions:
            try:
                rows: dict[str, str] = dict(wait())
            except MissingTable:
                return Revisions()
            found = Revisions(*(int(rows.get(k, 0)) for k in COUNTERS))
            self._last = found
            return found

        return revisions

    def judged(self, request: Callable[[], T]) -> T:
        """Run one read-only request judging from one set of revisions (as :meth:`pinned`
        does), read after it started: a commit acknowledged before, on any process, is
        in its answer.

        Where the read crosses a network, it is sent first and the request runs
        meanwhile on the revisions the previous read found, so the round trip overlaps
        the request's own work.  When the read answers with other revisions, the answer
        is dropped and the request runs again on the new ones: what is returned was
        judged from revisions read after the request started, always.  (A cache given
        revisions other than its key rebuilds itself, and one that only grows (the
        learner's log, the usage rows) keeps what it holds: running on older revisions
        costs time, never correctness, and the answer is kept only when the read finds
        no commit since those revisions.)"""
        last = self._last
        if getattr(self._pin, "active", False) or last is None or not self._db.overlaps_reads:
            with self.pinned():
                return request()
        token = self._db.change_token()
        cached = self._cache
        if token is not None and cached is not None and cached[0] == token:
            with self.pinned():
                return request()  # the revision cache holds: no read at all
        fresh = self._begin()
        answer: T | None = None
        failed: BaseException | None = None
        self._pin.active, self._pin.value = True, last
        try:
            answer = request()
        except Exception as exc:  # judged from stale revisions, it may not stand
            failed = exc
        finally:
            self._pin.active, self._pin.value = False, None
            now = fresh()
            self._cache = (token, now)
        if now != last:
            with self.pinned():
                self._pin.value = now
                return request()
        if failed is not None:
            raise failed
        return answer  # type: ignore[return-value]

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Within the block (one request, in this thread), :meth:`current` reads once:
        every part of the request judges from the same revisions.  Writes made inside it
        are not seen by it (its own, made through a transaction, are followed by the
        parts that made them)."""
        outer = getattr(self._pin, "active", False)
        self._pin.active = True
        try:
            yield
        finally:
            if not outer:
                self._pin.active = False
                self._pin.value = None

    def bump_tools(self, tx: Connection) -> None:
        """Move the hot-index revision inside a transaction, recording that this process
        made it (see :meth:`written_elsewhere`)."""
        self.bump(tx, "tools_rev")
        (rev,) = tx.execute(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key='tools_rev'"
        ).fetchone()
        tx.execute(
            "INSERT INTO tools_writes VALUES (?, ?) "
            "ON CONFLICT(rev) DO UPDATE SET writer=excluded.writer",
            (rev, self.writer),
        )
        tx.execute("DELETE FROM tools_writes WHERE rev <= ?", (rev - TOOLS_WRITES_KEPT,))

    def written_elsewhere(self, since: int, now: int) -> bool:
        """Whether any hot-index revision in ``(since, now]`` was made by another
        process (or cannot be told: a read-only state, revisions no longer remembered)."""
        if not self._db.writable or since < 0:
            return True
        with self._db.reading():
            mine = self._db.execute(
                "SELECT count(*) FROM tools_writes WHERE rev > ? AND rev <= ? AND writer = ?",
                (since, now, self.writer),
            ).fetchone()[0]
        return int(mine) != now - since
