"""The cold store: immutable, atomically published Parquet files for audit.

Never searchable.  This package never imports :mod:`sidecar` or :mod:`indexes`, and it
is the only one that imports ``pyarrow``.
"""

from cold_store.errors import (
    ColdStoreError,
    CommitFailed,
    CommitStateUnknown,
    PointerError,
    RecordNotFound,
    RecordQuarantined,
    SchemaError,
)
from cold_store.store import ColdStore, make_pointer, parse_pointer
from cold_store.table import AppendResult, ParquetTable, QuarantinedFile

__all__ = [
    "AppendResult",
    "ColdStore",
    "ColdStoreError",
    "CommitFailed",
    "CommitStateUnknown",
    "ParquetTable",
    "PointerError",
    "QuarantinedFile",
    "RecordNotFound",
    "RecordQuarantined",
    "SchemaError",
    "make_pointer",
    "parse_pointer",
]
