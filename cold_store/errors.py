"""Errors raised by the cold store.

ColdStoreError                 root of everything this package raises
├── PointerError               a cold storage pointer that is not well formed
├── RecordNotFound             no record under that key
├── RecordQuarantined          the record's file was unreadable and moved aside
├── SchemaError                rows that do not fit the table's schema
├── CommitFailed               nothing was published; the append may be retried as is
├── CommitStateUnknown         a file may or may not be published; reopen the table
│                              (which reconciles its index) before retrying
├── StoreUnavailable           the object store or folder cannot be reached or read
├── UnsafeStore                the store does not refuse a second put-if-absent of one
│                              key, so concurrent writers could overwrite each other's
│                              commits; the store is not opened
└── BadLocation                a cold store location that names no known backend
"""

from __future__ import annotations

from pathlib import Path


class ColdStoreError(Exception):
    """Root of every error raised by :mod:`cold_store`."""


class PointerError(ColdStoreError):
    def __init__(self, pointer: str, why: str) -> None:
        super().__init__(f"bad cold storage pointer {pointer!r}: {why}")
        self.pointer = pointer


class RecordNotFound(ColdStoreError):
    def __init__(self, table: str, key: str) -> None:
        super().__init__(f"no record {key!r} in cold table {table!r}")
        self.table = table
        self.key = key


class RecordQuarantined(ColdStoreError):
    def __init__(self, table: str, key: str, path: Path | str, reason: str) -> None:
        super().__init__(
            f"record {key!r} of cold table {table!r} is in an unreadable file, "
            f"quarantined at {path}: {reason}"
        )
        self.table = table
        self.key = key
        self.path = path
        self.reason = reason


class SchemaError(ColdStoreError):
    pass


class CommitFailed(ColdStoreError):
    pass


class CommitStateUnknown(ColdStoreError):
    pass


class StoreUnavailable(ColdStoreError):
    pass


class UnsafeStore(ColdStoreError):
    pass


class BadLocation(ColdStoreError):
    def __init__(self, location: str, why: str) -> None:
        super().__init__(f"bad cold store location {location!r}: {why}")
        self.location = location
