"""Publishing acknowledged cold records to the archive, many batches in one commit.

An intake batch is acknowledged once it is durable in the state: its cold records wait
in ``archive_pending`` (:mod:`sidecar.storage.pending`), written in the transaction that
counts and compiles the batch.  The publisher appends what is pending to the cold store
and removes what it appended:

- beside a local Parquet folder (one writer, appends cost a file each), at once, after
  each batch (*synchronous*): a report's record is in the archive when it is answered;
- beside a Delta table (shared, a commit costs an object-store round trip), in a thread
  of its own (*group commit*): whatever is pending when it wakes (every batch of every
  replica since its last commit) goes in one commit.  One replica publishes at a time
  (an advisory lock); the others' records are in what it takes.

Nothing acknowledged is lost, nothing is appended twice: a pending record is removed
only after the append that holds it committed, and an append of records the table
holds already (a publisher that died between its commit and the removal) writes
nothing.  A record not yet published is still resolved (:meth:`Publisher.pending`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from cold_store import ColdStore
from sidecar.errors import Busy
from sidecar.faults import FAILURES, plain
from sidecar.storage.base import Connection
from sidecar.storage.state import State

log = logging.getLogger("sidecar")
BATCH_ROWS = 2000
"""Records per append at most."""
RETRY_S = 0.5
"""How soon the group publisher looks again while records wait (another replica holds
the lock, or the store refused)."""


class Publisher:
    def __init__(self, state: State, cold: ColdStore, group: bool) -> None:
        self._state = state
        self._cold = cold
        self.group = group
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        """Why the last publication failed (``None`` after one succeeded)."""

    def queue(
        self,
        tx: Connection,
        rows: Sequence[Mapping[str, Any]],
        now: float,
        table: str = "chains",
        key: str = "chain_id",
    ) -> None:
        """Keep records of a cold table, inside the transaction that acknowledges them
        (an intake batch's chains; a move's tool records)."""
        self._state.pending.enqueue(tx, table, key, rows, now)

    def queued(self) -> None:
        """After a batch committed: publish now, or wake the group publisher."""
        if not self.group:
            self.publish()
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
            self._thread.start()
        self._wake.set()

    def publish(self) -> int:
        """Append every pending record to the cold store; returns how many were
        published.  A failure is kept (:attr:`error`) and the records wait."""
        with self._lock:
            try:
                done = self._publish()
            except Busy:
                return 0  # another replica is publishing: it takes ours too, or next time
            except FAILURES as exc:
                self.error = f"archive publication failed: {plain(exc)}"
                log.warning("%s", self.error)
                return 0
            self.error = None
            return done

    def _publish(self) -> int:
        total = 0
        with self._state.lock("publish", "archive publication") if self.group else _NoLock():
            while True:
                items = self._state.pending.oldest(BATCH_ROWS)
                if not items:
                    return total
                by_table: dict[str, list[dict[str, Any]]] = {}
                for _key, table, row in items:
                    by_table.setdefault(table, []).append(row)
                keys = sorted(key for key, _t, _r in items)
                batch = hashlib.sha256("|".join(keys).encode()).hexdigest()[:32]
                for table, rows in sorted(by_table.items()):
                    self._cold.table(table).append(rows, batch=f"publish-{batch}")
                # not in a report's way: a report only adds records (see CONCERNS)
                with self._state.tx("archive") as tx:
                    self._state.pending.done(tx, keys)
                total += len(items)

    def pending(self, key: str) -> dict[str, Any] | None:
        """A record acknowledged but not published yet."""
        return self._state.pending.get(key)

    def waiting(self) -> int:
        return self._state.pending.count()

    def _run(self) -> None:
        waiting = False
        while not self._stop.is_set():
            # idle, it sleeps until a batch commits (the maintenance loop publishes what
            # a replica that died left); records waiting, it looks again soon
            self._wake.wait(RETRY_S if waiting else None)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.publish()
            try:
                waiting = self._state.pending.count() > 0
            except FAILURES as exc:
                # the state is away: look again soon rather than let the thread die
                # (records acknowledged meanwhile would wait for the maintenance loop)
                log.warning("archive publisher: %s", plain(exc))
                waiting = True

    def close(self) -> None:
        """Stop the group publisher, publishing what waits (what it cannot stays in the
        state, for the next process)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self._state.writable:
            self.publish()


class _NoLock:
    """One writer of a local archive: nobody to exclude."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
