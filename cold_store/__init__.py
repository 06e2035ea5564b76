"""The cold store: immutable, atomically published Parquet files for audit.

Never searchable.  Two backends behind one table interface (:class:`ColdTable`): a
local folder of Parquet files (:mod:`cold_store.local`) and Delta tables on a folder or
on S3 (:mod:`cold_store.delta`); :class:`ColdStore` picks one from its location.  This
package never imports :mod:`sidecar` or :mod:`indexes`, and it is the only one that
imports ``pyarrow`` or ``deltalake``.
"""

from cold_store.base import AppendResult, ColdTable, Maintenance, QuarantinedFile
from cold_store.errors import (
    BadLocation,
    ColdStoreError,
    CommitFailed,
    CommitStateUnknown,
    PointerError,
    RecordNotFound,
    RecordQuarantined,
    SchemaError,
    StoreUnavailable,
    UnsafeStore,
)
from cold_store.local import ParquetTable
from cold_store.probe import S3Options
from cold_store.store import ColdStore, make_pointer, parse_location, parse_pointer

__all__ = [
    "AppendResult",
    "BadLocation",
    "ColdStore",
    "ColdStoreError",
    "ColdTable",
    "CommitFailed",
    "CommitStateUnknown",
    "Maintenance",
    "ParquetTable",
    "PointerError",
    "QuarantinedFile",
    "RecordNotFound",
    "RecordQuarantined",
    "S3Options",
    "SchemaError",
    "StoreUnavailable",
    "UnsafeStore",
    "make_pointer",
    "parse_location",
    "parse_pointer",
]
