"""The table's log: the Delta table object of the version this process last loaded,
opened (or created) once and brought forward by reading only the commits since.

``_delta_log/<version>.json`` holds one commit per append or maintenance step;
``<version>.checkpoint.parquet`` and ``_last_checkpoint`` are written by maintenance so
that a new reader loads one file instead of every commit.

Every call into deltalake runs within the store's deadline (:mod:`.deadline`).  A call
abandoned past it may still hold the table object, so the object is dropped and the
next look opens the table afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from cold_store.delta.boundary import STORE_ERRORS, raise_store_error
from cold_store.delta.deadline import Deadline, DeadlineExceeded
from cold_store.errors import StoreUnavailable

TABLE_CONFIG = {
    # only ever appended to; compaction rewrites files without changing data
    "delta.appendOnly": "true",
    # statistics only for the key: the other columns are never filtered on
    "delta.dataSkippingNumIndexedCols": "1",
}

_T = TypeVar("_T")


@dataclass(frozen=True)
class FileFacts:
    """What the log says of one data file of the loaded version."""

    size: int
    rows: int
    added_at: int
    """Modification time in the add action (ms): the order files were committed in."""


class TableLog:
    """The Delta table at ``uri`` as of the last version loaded (``table`` is ``None``
    while a read-only table has not been created by anyone)."""

    def __init__(
        self,
        uri: str,
        schema: pa.Schema,
        options: Mapping[str, str],
        writable: bool,
        deadline: Deadline,
    ) -> None:
        self.uri = uri
        self.schema = schema
        self.options = dict(options)
        self.writable = writable
        self.deadline = deadline
        self.table: DeltaTable | None = None
        """``None`` while no one has created the table, or after a call on it was
        abandoned (the next look opens it afresh)."""
        self.version = -1
        """The loaded version (-1: no table yet), kept here so that reading it never
        touches a table object an abandoned call may hold."""
        self.merge_schema = False
        """The table lacks columns of ``schema`` (it grew by nullable columns only): the
        next append adds them."""

    def call(self, fn: Callable[[DeltaTable], _T], what: str) -> _T:
        """``fn(table)`` within the deadline, then the table's version (a commit or a
        load moves it); an abandoned call's table is dropped."""
        table = self.writable_table()

        def both() -> tuple[_T, int]:
            return fn(table), table.version()

        try:
            result, self.version = self.deadline.run(both, f"{what} on {self.uri}")
        except DeadlineExceeded:
            if self.table is table:
                self.table = None
            raise
        return result

    def _load(self) -> DeltaTable:
        """The table as of its latest version, opened afresh."""
        return self.deadline.run(
            lambda: DeltaTable(self.uri, storage_options=self.options), f"opening {self.uri}"
        )

    def _loaded(self, table: DeltaTable) -> None:
        self.table = table
        self.version = self.deadline.run(table.version, f"reading the version of {self.uri}")

    def open(self) -> None:
        try:
            try:
                table = self._load()
            except TableNotFoundError:
                if not self.writable:
                    return  # nothing archived yet: reads see an empty table
                table = self._create()
            self._loaded(table)
            present = set(self.call(lambda t: t.schema().to_arrow().names, "reading the schema"))
        except STORE_ERRORS as exc:
            raise_store_error(exc, f"opening {self.uri}")
        self.merge_schema = not set(self.schema.names) <= present

    def _create(self) -> DeltaTable:
        try:
            return self.deadline.run(
                lambda: DeltaTable.create(
                    self.uri,
                    schema=self.schema,
                    mode="ignore",
                    configuration=TABLE_CONFIG,
                    storage_options=self.options,
                ),
                f"creating {self.uri}",
            )
        except STORE_ERRORS as exc:
            # another process may have created it at the same moment
            try:
                return self._load()
            except STORE_ERRORS:
                raise_store_error(exc, f"creating {self.uri}")

    def refresh(self) -> None:
        """Load the versions committed since the last look."""
        if self.table is None:
            try:
                self._loaded(self._load())
            except TableNotFoundError:
                return
            except STORE_ERRORS as exc:
                raise_store_error(exc, f"opening {self.uri}")
            return
        try:
            self.call(lambda t: t.update_incremental(), "loading the log")
        except STORE_ERRORS as exc:
            # the entries after the loaded version may be gone (cleaned after a
            # checkpoint while this process was idle), or the load was abandoned: load
            # the table afresh
            try:
                self._loaded(self._load())
            except STORE_ERRORS:
                raise_store_error(exc, f"reading the log of {self.uri}")

    def files(self) -> dict[str, FileFacts]:
        """The data files of the loaded version."""
        if self.table is None:
            return {}
        try:
            actions = pa.table(self.call(lambda t: t.get_add_actions(flatten=True), "listing"))
        except STORE_ERRORS as exc:
            raise_store_error(exc, f"listing the files of {self.uri}")
        return {
            path: FileFacts(size, rows or 0, mtime)
            for path, size, rows, mtime in zip(
                actions.column("path").to_pylist(),
                actions.column("size_bytes").to_pylist(),
                actions.column("num_records").to_pylist(),
                actions.column("modification_time").to_pylist(),
                strict=True,
            )
        }

    def committed(self, app_id: str) -> bool:
        """Whether the loaded version records the application transaction ``app_id``."""
        if self.table is None:
            return False
        try:
            found = self.call(lambda t: t.transaction_version(app_id), "reading the log")
        except STORE_ERRORS as exc:
            raise_store_error(exc, f"reading the log of {self.uri}")
        return found is not None

    def writable_table(self) -> DeltaTable:
        if self.table is None:  # a writable table is created on open
            raise StoreUnavailable(
                f"{self.uri} is not open: a call on it was abandoned and the table has not "
                "been opened again"
            )
        return self.table

    def close(self) -> None:
        self.table = None
        self.version = -1
