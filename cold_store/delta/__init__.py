"""The Delta backend of the cold store: one logical table as a Delta table on a local
folder or on S3, written by any number of processes (:class:`DeltaColdTable`).

Appends are idempotent by key, exactly, under racing writers (:mod:`.append`); lookups
by key read one row group of one file (:mod:`.keys`, :mod:`.files`); maintenance is
compaction, checkpoints and vacuum (:mod:`.maintain`); every call into deltalake runs
within a deadline (:mod:`.deadline`).
"""

from cold_store.delta.append import COMMIT_ATTEMPTS
from cold_store.delta.deadline import (
    DEFAULT_CALL_DEADLINE_S,
    MAX_ABANDONED,
    Deadline,
    DeadlineExceeded,
)
from cold_store.delta.maintain import DEFAULT_VACUUM_RETENTION, MIN_VACUUM_RETENTION
from cold_store.delta.table import DeltaColdTable

__all__ = [
    "COMMIT_ATTEMPTS",
    "DEFAULT_CALL_DEADLINE_S",
    "DEFAULT_VACUUM_RETENTION",
    "MAX_ABANDONED",
    "MIN_VACUUM_RETENTION",
    "Deadline",
    "DeadlineExceeded",
    "DeltaColdTable",
]
