"""The change feed of a PostgreSQL state: ``LISTEN`` on its channel in a thread of its
own, so that a revision cache knows when another process has written, and, with a
lease, so that the process may answer from that cache with no read at all and still see
every write acknowledged before its request.

**The lease.** A process that caches holds a row in ``feed_leases``: its holder id, its
process, an expiry on the database's clock, and the last write it has *seen* (the id
each write transaction takes from the ``feed_writes`` counter and sends as its
notification's payload).  Each write transaction, under the state's commit lock (the
last lock a write takes, held until it commits: :mod:`sidecar.storage.backends.postgres`), takes
its id and counts the live leases of other processes, so ids, notifications and commits
come in one order however many writes run at once; after it commits and before it
returns, it waits until each of them has seen it or expired (:func:`wait_seen`).  The
feed's thread, on a notification, first moves
:attr:`ChangeFeed.generation` (every cached value is dropped), then records the write as
seen, renewing the lease in the same statement; idle, it renews every third of the
lease.  Its own clock ends the lease before the database's does (it counts from before
the renewal was sent, minus a margin), and a lease found expired, or one its own clock
has ended, is taken again under the commit lock, so no write can slip between a lease's
start and the first read made under it.  (A renewal sent after a stall, as the
database's expiry passes, could otherwise commit after a write counted the lease
expired, and be trusted while that write is not waited for.) Every transaction here runs
at ``READ COMMITTED`` whatever the database's default (:func:`read_committed`): a write
counts the leases committed before it took the lock, which a snapshot taken while it
waited for the lock would not hold.  So a write acknowledged on any process is in every
later answer of a process whose lease holds, and a process whose listener died or
stalled stops renewing, lets its lease lapse and reads on every request meanwhile; a
write then waits at most one lease for it.  A feed that listens again (its connection
broke, the database restarted) takes its lease anew rather than renewing one that may
still run: the writes made while it was not listening counted that lease and were never
heard; the new lease marks them all seen, as its start is after them under the lock.

**This process's own writes** move no generation when their notification comes: each
moved the process's write counter (which every cache key holds) as it committed, so the
notification says nothing new; its id is only recorded as seen.  (A notification can
come late, after a lease was taken and trusted; it dropped every cached value then, so
a replica's first answers after its own writes read again, more so under load.)
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

C = TypeVar("C")
PROCESS = uuid.uuid4().hex
"""This process, in every lease it holds: a write never waits for leases of its own
process (its writes move the local counter every cache of the process reads)."""
LEASES_DDL = (
    "CREATE TABLE IF NOT EXISTS feed_leases (holder TEXT PRIMARY KEY, process TEXT NOT "
    "NULL, expires_at DOUBLE PRECISION NOT NULL, seen BIGINT NOT NULL)"
)
WRITES_DDL = "CREATE TABLE IF NOT EXISTS feed_writes (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)"
"""The last write id, in one row moved under the commit lock only, so ids follow commit
order (a table, not a sequence: a role that may read and write rows needs no other
right)."""
NEXT_WRITE = (
    "INSERT INTO feed_writes VALUES (0, pg_current_xact_id()::text::bigint) "
    "ON CONFLICT (id) DO UPDATE SET n = feed_writes.n + 1 RETURNING n AS w"
)
"""The next write id.  The first one is the transaction's id, past every id an earlier
sidecar sent (its own transaction ids): a lease it left never counts a later write as
seen."""
NOW = "EXTRACT(EPOCH FROM clock_timestamp())"
LOCAL_MARGIN = 0.2
"""Share of a lease this process gives up at its end: its own clock ends the lease
that much before the database's does, whatever the clocks' rates and the round trip."""
WAIT_AT_MOST_S = 60.0
"""A write waits this long at most for the leases it counted (they end sooner: no lease
is longer than a minute)."""
LIVE_LEASES = f"SELECT count(*) FROM feed_leases WHERE process <> %s AND expires_at > {NOW}"
UNSEEN = (
    f"SELECT count(*) FROM feed_leases WHERE process <> %s AND seen < %s AND expires_at > {NOW}"
)


OWN_KEPT = 4096
"""Write ids of this process remembered per state: one not remembered (its notification
came after thousands of later writes) only drops the cache once more."""


class OwnWrites:
    """The write transactions this process sent, per state (channel), by id: their
    notifications tell this process's feeds nothing its write counter has not."""

    def __init__(self, kept: int = OWN_KEPT) -> None:
        self._kept = kept
        self._ids: dict[str, OrderedDict[int, None]] = {}
        self._lock = threading.Lock()

    def add(self, channel: str, write: int) -> None:
        """Before the write commits (its notification may be heard at once)."""
        with self._lock:
            ids = self._ids.setdefault(channel, OrderedDict())
            ids[write] = None
            if len(ids) > self._kept:
                ids.popitem(last=False)

    def __contains__(self, key: tuple[str, int]) -> bool:
        channel, write = key
        with self._lock:
            return write in self._ids.get(channel, ())


OWN_WRITES = OwnWrites()


def read_committed(conn: C) -> C:
    """``conn``, its transactions begun at ``READ COMMITTED`` (a role or database may
    default to a stricter level, whose snapshot would be taken before the state's lock
    was granted)."""
    import psycopg

    cast(Any, conn).isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    return conn


class ChangeFeed:
    """``LISTEN`` on the state's channel, on a connection of its own, in a daemon
    thread: every write transaction of any process notifies it at commit, and each
    notification moves :attr:`generation`.  While the feed is not listening (not yet,
    or its connection broke) :attr:`listening` is false and nothing may be cached.

    ``lease_s`` > 0: the feed also holds a lease (see the module); :meth:`leased` says
    whether it holds now.  ``connect`` opens an autocommit connection; ``closed`` says
    when to stop; ``errors`` is the driver's base error; ``commit_key`` the state's
    commit lock."""

    def __init__(
        self,
        connect: Callable[[], Any],
        channel: str,
        closed: Callable[[], bool],
        errors: type[Exception],
        lease_s: float = 0.0,
        commit_key: int = 0,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._closed = closed
        self._errors = errors
        self._lease_s = lease_s
        self._commit_key = commit_key
        self.holder = f"{PROCESS}:{uuid.uuid4().hex[:12]}"
        self.generation = 0
        self.listening = False
        self._until = 0.0
        """This process's end of its lease (``time.monotonic``)."""
        self._seen = 0
        """The last write this feed was notified of (its transaction id)."""
        self._fresh = True
        """Listening anew: the lease must be taken, not renewed."""
        self._taking = threading.Lock()
        """Held while a lease is taken or given up: a take that began before the
        process closed ends before the lease is given up, or does not begin."""
        self.paused = threading.Event()
        """Set, the thread stops taking notifications (testing only)."""
        self._thread = threading.Thread(target=self._run, name="sidecar-changes", daemon=True)
        self._thread.start()

    def leased(self) -> bool:
        return self.listening and time.monotonic() < self._until

    def _run(self) -> None:
        while not self._closed():
            while self.paused.is_set() and not self._closed():
                time.sleep(0.01)
            try:
                conn = self._connect()
            except self._errors:
                time.sleep(1.0)
                continue
            try:
                conn.execute(f"LISTEN {self._channel}")
                self.generation += 1  # whatever was missed while not listening
                # a lease that outlived the old connection is not renewed: writes it
                # was counted in while nobody listened were never heard, so it is
                # taken again (seen from now on)
                self._fresh = True
                self.listening = True
                while not self._closed():
                    self._listen(conn)
            except self._errors:
                pass
            finally:
                self.listening = False
                self._until = 0.0
                self.generation += 1
                with contextlib.suppress(self._errors):
                    conn.close()
            time.sleep(0.2)

    def _listen(self, conn: Any) -> None:
        """One turn: the notifications that came (or a third of a lease without any),
        then the lease renewed with the last write seen, again while more came during
        the renewal: the lease is trusted only once none waits unseen."""
        every = self._lease_s / 3 if self._lease_s > 0 else 1.0
        while self.paused.is_set() and not self._closed():
            time.sleep(0.01)
        self._heard(conn.notifies(timeout=every, stop_after=1))
        if self._lease_s <= 0:
            return
        # past this process's end of its lease (the thread stalled), the database's
        # may be passing now: taken again under the lock, not renewed
        lapsed = time.monotonic() >= self._until
        while True:
            sent = time.monotonic()
            self._renew(conn, lapsed)
            lapsed = False
            if not self._heard(conn.notifies(timeout=0)):
                break
        self._until = sent + self._lease_s * (1 - LOCAL_MARGIN)

    def _heard(self, notes: Iterable[Any]) -> int:
        """Drop every cached value per notification of another process's write (or of
        one not known), and note the last write seen."""
        n = 0
        for note in notes:
            n += 1
            try:
                write = int(note.payload)
            except ValueError:
                self.generation += 1
                continue
            if (self._channel, write) not in OWN_WRITES:
                self.generation += 1
            self._seen = max(self._seen, write)
        return n

    def _renew(self, conn: Any, lapsed: bool = False) -> None:
        if self._fresh or lapsed:
            self._take(conn)  # (not once the state is closed: it says so itself)
            self._fresh = False
            return
        row = conn.execute(
            f"UPDATE feed_leases SET expires_at = {NOW} + %s, seen = GREATEST(seen, %s) "
            f"WHERE holder = %s AND expires_at > {NOW} RETURNING 1",
            (self._lease_s, self._seen, self.holder),
        ).fetchone()
        if row is None:
            self._take(conn)

    def _take(self, conn: Any) -> None:
        """A lease begun (or begun again once it lapsed) under the commit lock: every
        write that counted no lease of this process has committed, and is in what this
        process reads from now on; every later one counts this lease, and takes a
        later id than the one the lease starts from.  What was cached before is
        dropped."""
        self.generation += 1
        with self._taking:
            if self._closed():
                return  # given up, or about to be: not taken again
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._commit_key,))
                # seen from an id of its own: every earlier write has a smaller one
                conn.execute(
                    f"WITH n AS ({NEXT_WRITE}) INSERT INTO feed_leases "
                    f"SELECT %s, %s, {NOW} + %s, w FROM n ON CONFLICT (holder) DO UPDATE SET "
                    "expires_at = excluded.expires_at, seen = excluded.seen",
                    (self.holder, PROCESS, self._lease_s),
                )

    def release(self, conn: Any) -> None:
        """Give the lease up (the process closes the state, and ``closed`` already says
        so): no write waits for it any longer.  (A process killed leaves its lease to
        expire: writes wait for it until then, one lease at most.)"""
        self._until = 0.0
        with self._taking:
            conn.execute("DELETE FROM feed_leases WHERE holder = %s", (self.holder,))


def wait_seen(unseen: Callable[[], int], give_up_s: float = WAIT_AT_MOST_S) -> None:
    """After a write transaction that counted live leases of other processes committed:
    wait until ``unseen()`` (how many of them have neither seen it nor expired) is 0.
    A failure to ask is raised: the write committed, but it cannot be acknowledged as
    seen everywhere."""
    started = time.monotonic()
    delay = 0.0002
    while unseen():
        if time.monotonic() - started > give_up_s:
            raise TimeoutError(
                f"a write was not seen by every replica within {give_up_s:.0f} s, nor did "
                "their leases expire"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.005)
