"""A deltalake call that never returns: the call is abandoned past the store's deadline,
the table opened afresh, and the append retried or decided as one whose outcome is
unknown; nothing acknowledged is lost and nothing is stored twice.  The hung calls are
real deltalake calls held back by a gate that the test opens at the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from deltalake import DeltaTable, write_deltalake

from benchmarks.s3server import FaultSpec, S3Server
from cold_store import ColdStore, CommitFailed, CommitStateUnknown
from cold_store.delta import Deadline, DeadlineExceeded, DeltaColdTable
from tests.cold_store.backends import Backend, committed_rows
from tests.cold_store.helpers import chain_row

DEADLINE_S = 0.5
WRITE = "cold_store.delta.append.write_deltalake"
WITHIN_S = 15.0
"""How long an append meeting one hung call may take: a few deadlines, with room for a
loaded machine; without the deadline it never returns."""

_T = TypeVar("_T")


class Gate:
    """Holds back the calls that pass it until the test opens it."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.held = 0

    def hold(self) -> None:
        self.held += 1
        self.open.wait()


@pytest.fixture
def gate() -> Iterator[Gate]:
    made = Gate()
    yield made
    made.open.set()  # the abandoned calls finish before the next test


@pytest.fixture
def location(tmp_path: Path) -> str:
    return f"delta+file://{tmp_path / 'cold'}"


def finishes(fn: Callable[[], _T], within: float = WITHIN_S) -> _T:
    """``fn()``'s result, failing the test when it has not returned ``within`` seconds."""
    box: list[Any] = []
    worker = threading.Thread(target=lambda: box.append(_outcome(fn)), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(within)
    assert box, f"still waiting after {time.monotonic() - started:.1f} s"
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _outcome(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except Exception as exc:
        return False, exc


def _wait_for(condition: Callable[[], bool], seconds: float = WITHIN_S) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "the abandoned calls never finished"
        time.sleep(0.01)


def chains(store: ColdStore) -> DeltaColdTable:
    table = store.chains
    assert isinstance(table, DeltaColdTable)
    return table


def _stored_once(location: str, keys: list[str]) -> None:
    """Every key readable by a new process's store, each in one row only."""
    fresh = ColdStore(location, writable=False)
    try:
        assert sorted(fresh.chains.all_keys()) == sorted(keys)
        assert all(fresh.chains.get(k) == chain_row(k) for k in keys)
    finally:
        fresh.close()
    assert committed_rows(Backend("delta", location), "chains") == len(keys)


# ---- the deadline itself -------------------------------------------------------------
def test_a_call_within_its_deadline_returns_or_raises_as_it_would() -> None:
    deadline = Deadline(5)
    assert deadline.run(lambda: 42, "answering") == 42
    with pytest.raises(ValueError, match="invalid literal"):
        deadline.run(lambda: int("x"), "failing")
    assert deadline.abandoned == 0


def test_a_hung_call_is_abandoned_and_the_abandoned_are_bounded(gate: Gate) -> None:
    deadline = Deadline(0.05, limit=2)
    for _ in range(2):
        with pytest.raises(DeadlineExceeded, match=r"no answer within 0\.05 s") as caught:
            deadline.run(gate.hold, "hanging")
        assert isinstance(caught.value, OSError) and caught.value.started
    assert deadline.abandoned == 2
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="2 abandoned calls are still running") as refused:
        deadline.run(lambda: 1, "one more")
    assert not refused.value.started and time.monotonic() - started < 0.05
    assert gate.held == 2  # no third thread was started
    gate.open.set()
    _wait_for(lambda: deadline.abandoned == 0)
    assert deadline.run(lambda: 1, "after") == 1


def test_a_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Deadline(0)


# ---- an append meeting a hung call ---------------------------------------------------
def test_an_append_whose_log_load_hangs_returns_and_stores_its_rows(
    location: str, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ColdStore(location, call_deadline_s=DEADLINE_S)
    try:
        store.chains.append([chain_row("c0")], batch="b0")
        real = DeltaTable.update_incremental

        def hangs_once(self: DeltaTable, *args: Any, **kwargs: Any) -> Any:
            if gate.held == 0:
                gate.hold()
            return real(self, *args, **kwargs)

        monkeypatch.setattr(DeltaTable, "update_incremental", hangs_once)
        result = finishes(lambda: store.chains.append([chain_row("c1")], batch="b1"))
        assert result.written == ("c1",) and gate.held == 1
        assert store.deadline.abandoned == 1  # the load, still held
        assert store.chains.get("c1") == chain_row("c1")
    finally:
        gate.open.set()
        _wait_for(lambda: store.deadline.abandoned == 0)
        store.close()
    _stored_once(location, ["c0", "c1"])


def test_a_commit_that_landed_but_never_answered_is_reported_written_once(
    location: str, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply is lost after the commit landed: the attempt is abandoned, and the
    log tells it landed (its nonce is in the version it was written against plus one)."""
    store = ColdStore(location, call_deadline_s=DEADLINE_S)
    real = write_deltalake

    def lands_then_hangs(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        gate.hold()

    monkeypatch.setattr(WRITE, lands_then_hangs)
    try:
        result = finishes(lambda: store.chains.append([chain_row("c1")], batch="b1"))
        assert result.written == ("c1",) and gate.held == 1
        assert chains(store).committed("b1")
    finally:
        gate.open.set()
        _wait_for(lambda: store.deadline.abandoned == 0)
        store.close()
    _stored_once(location, ["c1"])


def test_a_commit_abandoned_before_it_landed_is_retried_and_never_lands_twice(
    location: str, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first commit hangs before it writes anything; the retry of the same rows
    commits; the abandoned one, let go afterwards, can only land as the version the
    retry took, so it does not land at all."""
    store = ColdStore(location, call_deadline_s=DEADLINE_S)
    real = write_deltalake

    def hangs_first(*args: Any, **kwargs: Any) -> None:
        if gate.held == 0:
            gate.hold()
        real(*args, **kwargs)

    monkeypatch.setattr(WRITE, hangs_first)
    try:
        rows = [chain_row("c1"), chain_row("c2")]
        result = finishes(lambda: store.chains.append(rows, batch="b1"))
        assert sorted(result.written) == ["c1", "c2"] and gate.held == 1
        version = chains(store).version
        gate.open.set()
        _wait_for(lambda: store.deadline.abandoned == 0)
        assert store.chains.count() == 2 and chains(store).version == version
        again = store.chains.append(rows, batch="b1")  # a caller's retry of the batch
        assert again.written == () and sorted(again.skipped) == ["c1", "c2"]
    finally:
        gate.open.set()
        store.close()
    _stored_once(location, ["c1", "c2"])


# ---- on S3, behind a proxy that holds the log's replies --------------------------------
@pytest.mark.integration
def test_a_writer_behind_a_store_that_stops_answering_returns_within_its_deadlines() -> None:
    """Every listing and read of the log is taken by the store, and its reply held back
    far longer than the call deadline (the client's own timeout is longer still): the
    append gives up within a few deadlines with a clear error, the same batch retried
    once the store answers again is stored once, and the abandoned calls all end."""
    held_s = 8.0
    server = S3Server(faults=FaultSpec(lose_reply=1.0, lost_reply_s=held_s, only="list|log read"))
    options = server.options(timeout_s=60, max_retries=0)
    location = f"s3://{server.new_bucket()}/cold"
    try:
        server.set_faults(False)
        store = ColdStore(location, s3=options, call_deadline_s=DEADLINE_S)
        try:
            store.chains.append([chain_row("c0")], batch="b0")
            server.set_faults(True)
            started = time.monotonic()
            with pytest.raises((CommitFailed, CommitStateUnknown), match="abandoned"):
                finishes(lambda: store.chains.append([chain_row("c1")], batch="b1"))
            assert time.monotonic() - started < held_s  # no reply came in the meantime
            assert store.deadline.abandoned >= 1
            server.set_faults(False)
            retried = finishes(lambda: store.chains.append([chain_row("c1")], batch="b1"))
            assert retried.written == ("c1",) or retried.skipped == ("c1",)
            _wait_for(lambda: store.deadline.abandoned == 0, held_s * 4)
        finally:
            store.close()
        reader = ColdStore(location, s3=options, writable=False)
        try:
            assert sorted(reader.chains.all_keys()) == ["c0", "c1"]
        finally:
            reader.close()
        backend = Backend("s3", location, options, server)
        assert committed_rows(backend, "chains") == 2
    finally:
        server.close()
