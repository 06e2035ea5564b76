"""Maintenance of a Delta table, run by one process at a time: compaction (Delta's
optimize), checkpoints, and vacuum of the files no commit names any more."""

from __future__ import annotations

import math
from datetime import timedelta

from cold_store.base import Maintenance
from cold_store.delta.append import NO_HOOKS, writer_properties
from cold_store.delta.boundary import STORE_ERRORS, raise_store_error
from cold_store.delta.log import TableLog
from cold_store.errors import ColdStoreError

DEFAULT_VACUUM_RETENTION = timedelta(days=7)
"""How long a file no commit names (a compacted-away file, or one written by an append
that lost its race or has not committed yet) is kept before vacuum may delete it."""
MIN_VACUUM_RETENTION = timedelta(hours=1)
"""Vacuum refuses a shorter retention: a writer between writing its data file and
committing it (a slow upload, a retried commit) must never find the file gone, and a
reader whose cache still names a compacted-away file must still be able to read it."""


def compact(log: TableLog, row_group_size: int) -> tuple[int, int]:
    """Merge small files into large ones: a commit that removes them and adds files
    holding the same rows; appends racing it commit after it.  Returns (files added,
    files removed)."""
    try:
        metrics = log.call(
            lambda table: table.optimize.compact(
                writer_properties=writer_properties(row_group_size),
                post_commithook_properties=NO_HOOKS,
            ),
            "compacting",
        )
    except STORE_ERRORS as exc:
        raise_store_error(exc, f"compacting {log.uri}")
    return int(metrics.get("numFilesAdded", 0)), int(metrics.get("numFilesRemoved", 0))


def checkpoint(log: TableLog) -> None:
    """Write a checkpoint of the loaded version (a new reader then loads one file
    instead of every commit), and delete log entries past the log retention
    (``delta.logRetentionDuration``, 30 days) that the checkpoint makes unneeded."""
    try:
        log.call(lambda table: table.create_checkpoint(), "checkpointing")
        log.call(lambda table: table.cleanup_metadata(), "cleaning the log")
    except STORE_ERRORS as exc:
        raise_store_error(exc, f"checkpointing {log.uri}")


def vacuum_retention(retention: timedelta | None) -> timedelta:
    """``retention``, or :data:`DEFAULT_VACUUM_RETENTION`; never less than
    :data:`MIN_VACUUM_RETENTION`: a file a writer has written but not committed yet is
    younger than that, so it is never deleted under the writer."""
    kept = DEFAULT_VACUUM_RETENTION if retention is None else retention
    if kept < MIN_VACUUM_RETENTION:
        raise ColdStoreError(
            f"vacuum retention {kept} is below {MIN_VACUUM_RETENTION}: a writer's "
            "uncommitted files could be deleted under it"
        )
    return kept


def vacuum(log: TableLog, kept: timedelta) -> int:
    """Delete files no commit names any more that are older than ``kept`` (see
    :func:`vacuum_retention`); returns how many were deleted."""
    try:
        deleted = log.call(
            lambda table: table.vacuum(
                retention_hours=math.ceil(kept.total_seconds() / 3600),
                dry_run=False,
                enforce_retention_duration=False,
                full=True,
                post_commithook_properties=NO_HOOKS,
            ),
            "vacuuming",
        )
    except STORE_ERRORS as exc:
        raise_store_error(exc, f"vacuuming {log.uri}")
    return len(deleted)


def done(name: str, version: int, added: int = 0, removed: int = 0) -> Maintenance:
    return Maintenance(name, files_added=added, files_removed=removed, version=version)
