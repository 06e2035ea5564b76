"""The table's log: the Delta table object of the version this process last loaded,
opened (or created) once and brought forward by reading only the commits since.

``_delta_log/<version>.json`` holds one commit per append or maintenance step;
``<version>.checkpoint.parquet`` and ``_last_checkpoint`` are written by maintenance so
that a new reader loads one file instead of every commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from cold_store.delta.boundary import STORE_ERRORS, raise_store_error

TABLE_CONFIG = {
    # only ever appended to; compaction rewrites files without changing data
    "delta.appendOnly": "true",
    # statistics only for the key: the other columns are never filtered on
    "delta.dataSkippingNumIndexedCols": "1",
}


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
        self, uri: str, schema: pa.Schema, options: Mapping[str, str], writable: bool
    ) -> None:
        self.uri = uri
        self.schema = schema
        self.options = dict(options)
        self.writable = writable
        self.table: DeltaTable | None = None
        self.merge_schema = False
        """The table lacks columns of ``schema`` (it grew by nullable columns only): the
        next append adds them."""

    def open(self) -> None:
        try:
            self.table = DeltaTable(self.uri, storage_options=self.options)
        except TableNotFoundError:
            if not self.writable:
                return  # nothing archived yet: reads see an empty table
            self.table = self._create()
        except STORE_ERRORS as exc:
            raise_store_error(exc, f"opening {self.uri}")
        present = set(self.table.schema().to_arrow().names)
        self.merge_schema = not set(self.schema.names) <= present

    def _create(self) -> DeltaTable:
        try:
            return DeltaTable.create(
                self.uri,
                schema=self.schema,
                mode="ignore",
                configuration=TABLE_CONFIG,
                storage_options=self.options,
            )
        except STORE_ERRORS as exc:
            # another process may have created it at the same moment
            try:
                return DeltaTable(self.uri, storage_options=self.options)
            except STORE_ERRORS:
                raise_store_error(exc, f"creating {self.uri}")

    def refresh(self) -> None:
        """Load the versions committed since the last look."""
        if self.table is None:
            try:
                self.table = DeltaTable(self.uri, storage_options=self.options)
            except TableNotFoundError:
                return
            except STORE_ERRORS as exc:
                raise_store_error(exc, f"opening {self.uri}")
            return
        try:
            self.table.update_incremental()
        except STORE_ERRORS as exc:
            # the entries after the loaded version may be gone (cleaned after a
            # checkpoint while this process was idle): load the table afresh
            try:
                self.table = DeltaTable(self.uri, storage_options=self.options)
            except STORE_ERRORS:
                raise_store_error(exc, f"reading the log of {self.uri}")

    @property
    def version(self) -> int:
        """The loaded version (-1: no table yet)."""
        return -1 if self.table is None else self.table.version()

    def files(self) -> dict[str, FileFacts]:
        """The data files of the loaded version."""
        if self.table is None:
            return {}
        try:
            actions = pa.table(self.table.get_add_actions(flatten=True))
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
            return self.table.transaction_version(app_id) is not None
        except STORE_ERRORS as exc:
            raise_store_error(exc, f"reading the log of {self.uri}")

    def writable_table(self) -> DeltaTable:
        assert self.table is not None  # a writable table is created on open
        return self.table

    def close(self) -> None:
        self.table = None
