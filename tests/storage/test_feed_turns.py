"""The change feed's lease turns, without a database: a connection that records what
it is sent."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sidecar.storage.backends import pgfeed
from sidecar.storage.backends.pgfeed import ChangeFeed, OwnWrites


class _Recorded:
    def __init__(self, sent: list[str] | None = None, locked: threading.Event | None = None):
        self.sent: list[str] = [] if sent is None else sent
        self.locked = locked
        """Set, the state's lock is granted (until then its statement waits)."""

    def execute(self, sql: str, params: Any = None) -> _Recorded:
        if "advisory_xact_lock" in sql and self.locked is not None:
            assert self.locked.wait(10)
        self.sent.append(sql.split()[0] + (" lock" if "advisory_xact_lock" in sql else ""))
        return self

    def fetchone(self) -> tuple[int]:
        return (1,)  # the renewal found its lease live in the database

    def notifies(self, timeout: float, stop_after: int | None = None) -> list[Any]:
        return []

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        yield


def _feed(stopped: list[bool] | None = None) -> ChangeFeed:
    """A feed whose thread has stopped at once, its turns run by the test; ``stopped``
    says whether the state is closed."""
    stopped = [True] if stopped is None else stopped
    stopped[0] = True
    feed = ChangeFeed(lambda: None, "chan", lambda: stopped[0], OSError, lease_s=3.0)
    feed._thread.join(timeout=10)
    stopped[0] = False
    feed._fresh = False
    return feed


def test_a_lease_this_process_still_holds_is_renewed_without_the_lock() -> None:
    feed, conn = _feed(), _Recorded()
    feed._until = time.monotonic() + 60
    feed._listen(conn)
    assert conn.sent == ["UPDATE"]
    assert feed.leased() is False  # not listening: never trusted
    assert feed._until > time.monotonic()


def test_a_lease_this_process_let_lapse_is_taken_again_under_the_lock() -> None:
    """Its thread stalled past its own end of the lease: the database's end may be
    passing now, and a renewal could commit after a write counted the lease expired."""
    feed, conn = _feed(), _Recorded()
    feed._until = time.monotonic() - 0.001
    feed._listen(conn)
    assert conn.sent == ["SELECT lock", "WITH"]
    assert feed._until > time.monotonic()  # held again, from the take
    conn.sent.clear()
    feed._listen(conn)  # and renewed as usual from then on
    assert conn.sent == ["UPDATE"]


def test_a_lease_taken_as_the_state_closes_is_given_up_after_it_not_before() -> None:
    """The take waits for the state's lock while the process closes: the lease is given
    up once the take has ended, never left behind for writers to wait on."""
    closed = [False]
    feed, sent, locked = _feed(closed), [], threading.Event()
    taking = threading.Thread(target=feed._take, args=(_Recorded(sent, locked),))
    taking.start()
    time.sleep(0.1)  # the take waits for the state's lock
    closed[0] = True
    giving_up = threading.Thread(target=feed.release, args=(_Recorded(sent),))
    giving_up.start()
    time.sleep(0.2)
    assert sent == []  # the lease is not given up while it is being taken
    locked.set()
    taking.join(10)
    giving_up.join(10)
    assert sent == ["SELECT lock", "WITH", "DELETE"]
    sent.clear()
    feed._take(_Recorded(sent))  # closed: not taken again
    assert sent == []


class _Note:
    def __init__(self, payload: str) -> None:
        self.payload = payload


def test_a_notification_of_this_process_s_own_write_drops_nothing_cached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its write counter moved as it committed; the notification may come after a lease
    was taken and trusted, and dropping the cache then made the first answers after the
    process's own writes read again (one in eight beside two CPU burners)."""
    feed, own = _feed(), OwnWrites()
    monkeypatch.setattr(pgfeed, "OWN_WRITES", own)
    own.add("chan", 41)
    before = feed.generation
    assert feed._heard([_Note("41")]) == 1
    assert feed.generation == before and feed._seen == 41  # seen, nothing dropped
    feed._heard([_Note("42")])  # another process's write
    assert feed.generation == before + 1 and feed._seen == 42
    feed._heard([_Note("not a write id")])
    assert feed.generation == before + 2
    own.add("elsewhere", 43)  # the same process's write on another state
    feed._heard([_Note("43")])
    assert feed.generation == before + 3


def test_own_writes_are_remembered_up_to_a_bound() -> None:
    own = OwnWrites(kept=3)
    for write in range(1, 6):
        own.add("chan", write)
    assert [("chan", w) in own for w in range(1, 6)] == [False, False, True, True, True]
