"""Appends to a Delta table, idempotent by key exactly, with any number of writing
processes.

Each append checks its keys against the version it read and commits only as the very
next version (Delta's own retry, which would rebase a blind append onto newer versions
unchecked, is off).  When another writer got there first, the append reloads, checks
its keys again against the new version and tries once more; a batch another process
already committed leaves nothing to write.  Each batch's id goes into the commit as a
Delta application transaction (``txn``): one commit may carry several callers' batches
(a group commit), and the log tells afterwards which batch ids committed.

Every attempt also carries a nonce of its own in the commit's ``commitInfo``, and can
only ever land as the one version it was written against plus one (a log entry is
created only if absent).  So when an attempt fails in a way that leaves its outcome
open (a timeout, a reset, a reply lost after the store took the write, a client retry
answered "already exists"), its fate is decided as soon as that version exists: the
entry there holds its nonce or another's.  The appender reloads, decides, and either
returns (it landed: its keys are reported written) or tries again, checking the keys
anew: an attempt still in flight can only land as a version that does not exist yet,
and the next attempt competes for that same version, so the keys are never stored
twice and a landed attempt is never reported lost.  A commit abandoned past the store's
call deadline (:mod:`.deadline`) is such an attempt: it may still be running, and is
decided the same way.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import (
    CommitProperties,
    PostCommitHookProperties,
    Transaction,
    WriterProperties,
    write_deltalake,
)

from cold_store import rows as checks
from cold_store.base import AppendResult
from cold_store.delta.boundary import STORE_ERRORS, Conflict, lost_race, store_error
from cold_store.delta.deadline import DeadlineExceeded
from cold_store.delta.keys import KeyCache
from cold_store.delta.log import TableLog
from cold_store.errors import (
    ColdStoreError,
    CommitFailed,
    CommitStateUnknown,
    SchemaError,
    StoreUnavailable,
)

COMMIT_ATTEMPTS = 50
"""Attempts of one append before it gives up; each lost race means another writer
committed, so many writers still all get through."""
FAILED_ATTEMPTS = 3
"""Attempts that fail for another reason than a lost race (the store timing out,
refusing, resetting) before the append gives up."""
NONCE = "coldStoreAttempt"
"""The ``commitInfo`` field holding the attempt's nonce."""
NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
"""Appends never checkpoint or clean the log: that is maintenance, run by one process
at a time."""

Batches = Sequence[tuple[str, Sequence[Mapping[str, Any]]]]


def writer_properties(row_group_size: int) -> WriterProperties:
    return WriterProperties(compression="ZSTD", max_row_group_size=row_group_size)


def log_entry(version: int) -> str:
    return f"_delta_log/{version:020d}.json"


@dataclass
class _Attempt:
    nonce: str
    target: int
    """The only version it can land as."""
    keys: tuple[str, ...]
    in_flight: bool = False
    """Its log entry's put failed without an answer: it may still land."""


class Appender:
    """Writes to one table; ``refresh()`` loads the versions since and brings ``cache``
    to them, ``sync()`` brings ``cache`` to the version ``log`` holds; ``read_bytes``
    reads a file of the table (a log entry)."""

    def __init__(
        self,
        log: TableLog,
        cache: KeyCache,
        refresh: Callable[[], None],
        sync: Callable[[], None],
        read_bytes: Callable[[str], bytes],
        lock: threading.RLock,
        row_group_size: int,
    ) -> None:
        self.log = log
        self.cache = cache
        self._refresh = refresh
        self._sync = sync
        self._read_bytes = read_bytes
        self._lock = lock
        self.row_group_size = row_group_size

    def append(
        self,
        batches: Batches,
        every: pa.Table,
        to_arrow: Callable[[list[Mapping[str, Any]]], pa.Table],
        key: str,
    ) -> dict[str, AppendResult]:
        """Store the rows of ``batches`` whose key is new, in one commit (``every``: all
        their rows, checked; ``to_arrow`` checks a subset)."""
        rows = [row for _batch, part in batches for row in part]
        pending: list[_Attempt] = []
        failures: list[ColdStoreError] = []
        for attempt in range(COMMIT_ATTEMPTS):
            with self._lock:
                stored = self._try(batches, rows, every, to_arrow, key, pending, failures)
            if stored is not None:
                return stored
            if len(failures) >= FAILED_ATTEMPTS:
                break
            self._back_off(attempt)
        last = failures[-1] if failures else CommitFailed(f"{COMMIT_ATTEMPTS} attempts lost")
        with self._lock:
            try:  # what the attempts left pending came to, when the store tells
                landed = self._look(pending)
            except (ColdStoreError, *STORE_ERRORS):
                landed = None
            if landed is not None:
                return self._results(batches, key, landed.keys)
        raise self._give_up(pending, last)

    def _try(
        self,
        batches: Batches,
        rows: list[Mapping[str, Any]],
        every: pa.Table,
        to_arrow: Callable[[list[Mapping[str, Any]]], pa.Table],
        key: str,
        pending: list[_Attempt],
        failures: list[ColdStoreError],
    ) -> dict[str, AppendResult] | None:
        """One attempt: the results when the rows are stored (by this attempt or an
        earlier one of the call), ``None`` to try again (a failure is added to
        ``failures``, an attempt that may have landed to ``pending``)."""
        try:
            landed = self._look(pending)
        except (ColdStoreError, *STORE_ERRORS) as exc:
            failures.append(StoreUnavailable(f"the store cannot be read: {exc}"))
            return None
        if landed is not None:
            return self._results(batches, key, landed.keys)
        if len(failures) >= FAILED_ATTEMPTS:
            return None
        fresh, _skipped = checks.fresh_rows(rows, key, self.cache.keys)
        if not fresh:
            return self._results(batches, key, ())
        data = every if len(fresh) == len(rows) else to_arrow(list(fresh.values()))
        this = _Attempt(uuid.uuid4().hex, self.log.version + 1, tuple(fresh))
        try:
            self._commit(data, [b for b, _part in batches], this.nonce)
        except STORE_ERRORS as exc:
            failure = self._failed(exc, this)
            pending.append(this)
            if failure is not None:
                failures.append(failure)
            return None
        return self._results(batches, key, this.keys)

    @staticmethod
    def _back_off(attempt: int) -> None:
        """Another writer won this version, or the store failed: wait a little (not
        holding the lock), so that the writers racing do not all come back at once."""
        time.sleep(random.uniform(0, 0.01 * min(attempt + 1, 20)))

    def _commit(self, data: pa.Table, batches: list[str], nonce: str) -> None:
        self.log.call(
            lambda table: write_deltalake(
                table,
                data,
                mode="append",
                schema_mode="merge" if self.log.merge_schema else None,
                writer_properties=writer_properties(self.row_group_size),
                commit_properties=CommitProperties(
                    max_commit_retries=0,
                    app_transactions=[Transaction(app_id=b, version=1) for b in batches],
                    custom_metadata={NONCE: nonce},
                ),
                post_commithook_properties=NO_HOOKS,
            ),
            "appending",
        )
        self.log.merge_schema = False

    def _failed(self, exc: BaseException, attempt: _Attempt) -> ColdStoreError | None:
        """Judge a failed commit: ``None`` for a lost race (another writer's version
        exists), else the failure; a log entry put that got no answer, or a commit
        abandoned past its deadline, may still land."""
        mapped = store_error(exc, f"appending to {self.log.uri}")
        if isinstance(mapped, SchemaError):
            raise mapped from exc
        if isinstance(exc, DeadlineExceeded):
            attempt.in_flight = True
            return StoreUnavailable(f"appending to {self.log.uri}: {exc}")
        if isinstance(mapped, Conflict):
            if lost_race(exc):
                return None
            attempt.in_flight = True
            return CommitFailed(f"writing the commit failed: {mapped}")
        return mapped

    def _look(self, pending: list[_Attempt]) -> _Attempt | None:
        """Load the versions since, and decide every pending attempt whose version now
        exists: the one that landed, if any (the others are dropped).  Attempts whose
        version does not exist yet stay pending if they may still land."""
        self._refresh()
        version = self.log.version
        for attempt in list(pending):
            if attempt.target <= version:
                if self._nonce_of(attempt.target) == attempt.nonce:
                    self._sync()
                    return attempt
                pending.remove(attempt)
            elif not attempt.in_flight:
                pending.remove(attempt)
        return None

    def _nonce_of(self, version: int) -> str | None:
        for line in self._read_bytes(log_entry(version)).splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                nonce = action["commitInfo"].get(NONCE)
                return None if nonce is None else str(nonce)
        return None

    def _give_up(self, pending: list[_Attempt], last: ColdStoreError) -> ColdStoreError:
        if pending:
            return CommitStateUnknown(
                f"{self.log.uri}: the append may or may not have committed ({last}); a "
                f"commit not visible now may still land; retry the same batch later"
            )
        return CommitFailed(f"{self.log.uri}: {last}; nothing was committed")

    def _results(
        self, batches: Batches, key: str, written: tuple[str, ...]
    ) -> dict[str, AppendResult]:
        """Each batch's share of a commit that stored ``written``."""
        self._sync()
        stored = self.cache.keys
        files = tuple(sorted({stored[k][0] for k in written if k in stored}))
        shares = checks.shares(batches, key, written, files)
        return {b: AppendResult(*share) for (b, _part), share in zip(batches, shares, strict=True)}
