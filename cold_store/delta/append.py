"""Appends to a Delta table, idempotent by key exactly, with any number of writing
processes.

Each append checks its keys against the version it read and commits only as the very
next version (Delta's own retry, which would rebase a blind append onto newer versions
unchecked, is off).  When another writer got there first, the append reloads, checks
its keys again against the new version and tries once more; a batch another process
already committed leaves nothing to write.  The batch's id goes into the commit as a
Delta application transaction (``txn``), which also tells, after a write whose outcome
was lost (a timeout), whether it committed.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
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
"""Attempts of one append before it gives up as :class:`CommitFailed`; each lost attempt
means another writer committed, so many writers still all get through."""
NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
"""Appends never checkpoint or clean the log: that is maintenance, run by one process
at a time."""


def writer_properties(row_group_size: int) -> WriterProperties:
    return WriterProperties(compression="ZSTD", max_row_group_size=row_group_size)


class Appender:
    """Writes to one table; ``refresh()`` loads the versions since and brings ``cache``
    to them, ``sync()`` brings ``cache`` to the version ``log`` holds."""

    def __init__(
        self,
        log: TableLog,
        cache: KeyCache,
        refresh: Callable[[], None],
        sync: Callable[[], None],
        lock: threading.RLock,
        schema: pa.Schema,
        name: str,
        key: str,
        row_group_size: int,
    ) -> None:
        self.log = log
        self.cache = cache
        self._refresh = refresh
        self._sync = sync
        self._lock = lock
        self.schema = schema
        self.name = name
        self.key = key
        self.row_group_size = row_group_size

    def append(
        self, rows: Sequence[Mapping[str, Any]], every: pa.Table, batch: str | None
    ) -> AppendResult:
        """Store the rows whose key is new, in one commit (``every``: all of ``rows``,
        checked)."""
        app_id = batch or uuid.uuid4().hex
        for attempt in range(COMMIT_ATTEMPTS):
            with self._lock:
                try:
                    self._refresh()
                except StoreUnavailable as exc:
                    # nothing of this call is committed (a lost race before, at most)
                    raise CommitFailed(f"{exc}; nothing was committed") from exc
                fresh, skipped = checks.fresh_rows(rows, self.key, self.cache.keys)
                if not fresh:
                    return AppendResult((), tuple(skipped), ())
                if len(fresh) == len(rows):
                    data = every
                else:
                    data = checks.to_arrow(list(fresh.values()), self.schema, self.name, self.key)
                try:
                    self._commit(data, app_id)
                    committed = True
                except STORE_ERRORS as exc:
                    committed = self._settle(exc, app_id)
                if committed:
                    self._sync()
                    keys = self.cache.keys
                    files = sorted({keys[k][0] for k in fresh if k in keys})
                    return AppendResult(tuple(fresh), tuple(skipped), tuple(files))
            # another writer won this version: back off a little (not holding the lock),
            # so that the writers racing do not all come back at once
            time.sleep(random.uniform(0, 0.01 * min(attempt + 1, 20)))
        raise CommitFailed(
            f"{self.log.uri}: {COMMIT_ATTEMPTS} attempts in a row lost to other writers; "
            "nothing was committed"
        )

    def _commit(self, data: pa.Table, app_id: str) -> None:
        write_deltalake(
            self.log.writable_table(),
            data,
            mode="append",
            schema_mode="merge" if self.log.merge_schema else None,
            writer_properties=writer_properties(self.row_group_size),
            commit_properties=CommitProperties(
                max_commit_retries=0,
                app_transactions=[Transaction(app_id=app_id, version=1)],
            ),
            post_commithook_properties=NO_HOOKS,
        )
        self.log.merge_schema = False

    def _settle(self, exc: BaseException, app_id: str) -> bool:
        """After a failed write: ``True`` when it committed after all, ``False`` when
        another writer won the version (check the keys again and retry).  Otherwise
        raises :class:`CommitFailed` when the failure came before the commit was sent,
        :class:`CommitStateUnknown` when it may have been sent or the store cannot be
        read to tell."""
        uri = self.log.uri
        mapped = store_error(exc, f"appending to {uri}")
        if isinstance(mapped, Conflict) and lost_race(exc):
            return False
        if isinstance(mapped, SchemaError):
            raise mapped from exc
        try:
            self._refresh()
            landed = self.log.committed(app_id)
        except (ColdStoreError, *STORE_ERRORS) as again:
            raise CommitStateUnknown(
                f"{uri}: the append may or may not have committed ({mapped}) and the "
                f"store cannot be read to tell ({again}); retry the same batch later"
            ) from exc
        if landed:
            return True
        if isinstance(mapped, Conflict):  # the log entry's put itself failed
            raise CommitStateUnknown(
                f"{uri}: writing the commit failed ({mapped}); it is not visible now, "
                f"but a put still in flight may land; retry the same batch later"
            ) from exc
        raise CommitFailed(f"{mapped}; nothing was committed") from exc
