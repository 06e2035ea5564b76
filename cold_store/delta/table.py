"""A cold table as a Delta table: Parquet files that exist for readers only once a commit
in the table's log names them, on a local folder or on S3, written by any number of
processes.

Layout of one table (``<location>/<name>``)::

    _delta_log/<version>.json        one commit per append or maintenance step
    _delta_log/<version>.checkpoint.parquet, _last_checkpoint   written by checkpoint()
    part-*.parquet                   data files; unpartitioned, so that an append is one
                                     file and compaction can merge any of them

The parts: the log (:mod:`.log`), the data files (:mod:`.files`), each process's key
cache (:mod:`.keys`), the appender (:mod:`.append`), maintenance (:mod:`.maintain`);
errors cross into this package's in one place (:mod:`.boundary`), and every call into
deltalake runs within a deadline (:mod:`.deadline`).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from cold_store import rows as checks
from cold_store.base import AppendResult, Maintenance, QuarantinedFile
from cold_store.delta import maintain, snapshot
from cold_store.delta.append import Appender
from cold_store.delta.boundary import MISSING, STORE_ERRORS, Damaged, raise_store_error
from cold_store.delta.deadline import Deadline
from cold_store.delta.files import DataFiles
from cold_store.delta.keys import KeyCache
from cold_store.delta.log import TableLog
from cold_store.errors import CommitFailed, RecordNotFound, RecordQuarantined, SchemaError


class DeltaColdTable:
    """One logical table as a Delta table at ``uri``, keyed by one string column."""

    def __init__(
        self,
        uri: str,
        name: str,
        schema: pa.Schema,
        key: str,
        partition_by: str,
        storage_options: Mapping[str, str] | None = None,
        row_group_size: int = 1024,
        writable: bool = True,
        deadline: Deadline | None = None,
    ) -> None:
        """``partition_by`` is checked as the local backend checks it (so that any row
        one backend takes, the other takes too), but the Delta table is not partitioned
        by it.  ``writable=False`` never writes, and a table not created yet reads as
        empty.  ``deadline``: how long each call into deltalake may take (shared by the
        tables of one store; see :mod:`.deadline`)."""
        if key not in schema.names or partition_by not in schema.names:
            raise SchemaError(f"key {key!r} and partition {partition_by!r} must be columns")
        self.uri = uri.rstrip("/")
        self.name = name
        self.schema = schema
        self.key = key
        self.partition_by = partition_by
        self.row_group_size = row_group_size
        self.writable = writable
        options = dict(storage_options or {})
        self._lock = threading.RLock()
        deadline = deadline or Deadline()
        self._log = TableLog(self.uri, schema, options, writable, deadline)
        self._cache = KeyCache()
        self._files = DataFiles(self.uri, options, key, self._cache.sizes, self._lock, deadline)
        self._appender = Appender(
            self._log,
            self._cache,
            self._refresh,
            self._sync,
            self._files.read_bytes,
            self._lock,
            row_group_size,
        )
        self._log.open()
        self._sync()

    # ---- the log and the key cache --------------------------------------------------
    def _refresh(self) -> None:
        """Load the versions committed since the last look, then bring the cache to the
        loaded version."""
        with self._lock:
            self._log.refresh()
            self._sync()

    def _sync(self) -> None:
        """Bring the key cache to the version the log holds: forget the files that
        version no longer names, index those it added."""
        if self._log.table is None or self._log.version == self._cache.version:
            return
        current = self._log.files()
        for path in self._cache.forget_gone(current):
            self._files.forget(path)
        if not self._cache.files and current:  # this process's first look
            snapshot.load(self._files, self._cache, current, self._log.version)
            self._files.files_changed()
        if any(p not in self._cache.files for p in current):
            self._files.files_changed()  # made again with the new files' sizes
        for path, (_keys, _groups, _names, footer) in self._cache.add(current, self._files.keys):
            self._files.remember_footer(path, footer)
        self._cache.version = self._log.version

    def _mark_unreadable(self, path: str, reason: str) -> None:
        with self._lock:
            self._cache.mark_unreadable(path, reason)
            self._files.forget(path)

    @property
    def version(self) -> int:
        """The table version the cache reflects (-1: no table yet)."""
        return self._cache.version

    def close(self) -> None:
        """Drop the table, the cache and every pyarrow object holding a file system: a
        Python-implemented one still alive when the interpreter tears pyarrow down can
        abort the process at exit."""
        with self._lock:
            self._log.close()
            self._files.close()
            self._cache.files.clear()
            self._cache.keys.clear()

    # ---- writes -------------------------------------------------------------------
    def append(self, rows: Sequence[Mapping[str, Any]], batch: str | None = None) -> AppendResult:
        """Store the rows whose key is new, in one commit.

        Every row is validated first: a bad row raises :class:`SchemaError` and nothing
        is written.  ``batch`` names the rows (a replayed batch is the same rows): it
        is recorded in the commit as an application transaction; stored keys are what
        makes a replay write nothing."""
        name = batch or uuid.uuid4().hex
        return self.append_batches({name: rows})[name]

    def append_batches(
        self, batches: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> dict[str, AppendResult]:
        """Store several batches, each under its own id, in one commit (a group commit:
        one log entry for many callers' rows), all or nothing.  A key already stored,
        or named by an earlier batch of the call, is skipped in that batch's result;
        every batch id is recorded in the commit, so :meth:`committed_batches` tells
        afterwards which committed."""
        if not self.writable:
            raise CommitFailed(f"cold table {self.name!r} was opened read-only")
        rows = [row for part in batches.values() for row in part]
        checks.check_keys(rows, self.key)
        checks.check_partition(rows, self.partition_by)
        every = self._to_arrow(rows)  # all checked up front
        return self._appender.append(list(batches.items()), every, self._to_arrow, self.key)

    def _to_arrow(self, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
        return checks.to_arrow(rows, self.schema, self.name, self.key)

    def committed(self, batch: str) -> bool:
        """Whether an append naming ``batch`` has committed (a read of the log)."""
        return batch in self.committed_batches([batch])

    def committed_batches(self, batches: Iterable[str]) -> set[str]:
        """Those of ``batches`` an append has committed (a read of the log)."""
        self._refresh()
        return {b for b in batches if self._log.committed(b)}

    # ---- reads --------------------------------------------------------------------
    def contains(self, key: str) -> bool:
        """Whether ``key`` is stored in a readable file."""
        self._refresh()
        return key in self._cache.keys

    def contains_many(self, keys: Iterable[str]) -> set[str]:
        self._refresh()
        return {k for k in keys if k in self._cache.keys}

    def count(self) -> int:
        self._refresh()
        return len(self._cache.keys)

    def all_keys(self) -> list[str]:
        """Every key, in the order the cache first saw the files holding them (compaction
        moves keys to the end)."""
        self._refresh()
        with self._lock:
            return self._cache.in_order()

    def get(self, key: str) -> dict[str, Any]:
        """The full row under ``key``, from one row group of one file.  The cache is
        refreshed when it does not know the key or names a file that is gone (a
        compaction since, then a vacuum)."""
        for fresh in (False, True):
            if fresh:
                self._refresh()
            with self._lock:
                hit = self._cache.keys.get(key)
                lost = self._cache.lost.get(key)
            if hit is None:
                if fresh and lost is not None:
                    reason = self._cache.unreadable.get(lost, "")
                    raise RecordQuarantined(self.name, key, f"{self.uri}/{lost}", reason)
                continue
            path, group, row = hit
            data = self._files.row_group(path, group)
            if isinstance(data, Damaged):
                if data.reason == MISSING and not fresh:
                    continue  # compacted away and vacuumed since the cache looked
                reason = data.reason
            elif (
                row < data.num_rows
                and (got := checks.complete(data.slice(row, 1).to_pylist()[0], self.schema)).get(
                    self.key
                )
                == key
            ):
                return got
            else:
                reason = "the cache points at a row holding another key"
            self._mark_unreadable(path, reason)
            raise RecordQuarantined(self.name, key, f"{self.uri}/{path}", reason)
        raise RecordNotFound(self.name, key)

    def scan(self, columns: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
        """Every row, each key once, file by file; unreadable files are skipped (see
        :meth:`quarantined`)."""
        wanted = list(columns) if columns is not None else None
        if wanted is not None and self.key not in wanted:
            wanted.append(self.key)
        self._refresh()
        with self._lock:
            files = self._cache.readable_files()
        for path, entry in files:
            read = None if wanted is None else [c for c in wanted if c in entry.names]
            data = self._files.table(path, read, "unreadable on scan")
            if isinstance(data, Damaged):
                self._mark_unreadable(path, data.reason)
                continue
            for found in data.to_pylist():
                row = checks.complete(found, self.schema)
                if self._cache.keys.get(row[self.key], ("",))[0] != path:
                    continue  # a copy of a key held by an earlier file
                yield row if wanted is None else {c: row.get(c) for c in wanted}

    # ---- health -------------------------------------------------------------------
    def check_footers(self) -> list[str]:
        """Read every data file's footer and check its row count against the commit that
        added it; returns the files found unreadable (left in place and skipped)."""
        self._refresh()
        with self._lock:
            files = [(p, f.rows) for p, f in self._cache.readable_files()]
        bad: list[str] = []
        for path, rows in files:
            footer = self._files.footer(path, "unreadable on verify", kept=False)
            if isinstance(footer, Damaged):
                reason = footer.reason
            elif (found := footer.num_rows) == rows:
                continue
            else:
                reason = f"holds {found} rows, committed with {rows}"
            self._mark_unreadable(path, reason)
            bad.append(path)
        return bad

    def verify(self, deep: bool = False) -> list[QuarantinedFile]:
        """Readable-looking files that are not what was committed: missing, of another
        size, or (``deep``: every byte read) holding other keys than when indexed.
        Reported, not marked; a read of one marks it."""
        self._refresh()
        with self._lock:
            files = self._cache.readable_files()
        damaged: list[QuarantinedFile] = []
        for path, entry in files:
            where = f"{self.uri}/{path}"
            info = self._files.file_info(path)
            if info.type == pafs.FileType.NotFound:
                damaged.append(QuarantinedFile(path, where, "missing"))
                continue
            if info.size != entry.size:
                why = f"{info.size} bytes where {entry.size} were committed"
                damaged.append(QuarantinedFile(path, where, why))
                continue
            if deep:
                data = self._files.table(path, None, "unreadable")
                if isinstance(data, Damaged):
                    damaged.append(QuarantinedFile(path, where, data.reason))
                elif data.column(self.key).to_pylist() != entry.keys:
                    why = "content differs from the committed"
                    damaged.append(QuarantinedFile(path, where, why))
        return damaged

    def quarantined(self) -> list[QuarantinedFile]:
        with self._lock:
            return [
                QuarantinedFile(
                    p, f"{self.uri}/{p}", f"{r} (left in place: only a commit removes a file)"
                )
                for p, r in self._cache.unreadable.items()
            ]

    # ---- maintenance (one process at a time) -----------------------------------------
    def _writable(self) -> None:
        if not self.writable:
            raise CommitFailed(f"cold table {self.name!r} was opened read-only")
        self._refresh()

    def compact(self) -> Maintenance:
        """Merge small files into large ones (Delta's optimize); see
        :func:`.maintain.compact`."""
        with self._lock:
            self._writable()
            added, removed = maintain.compact(self._log, self.row_group_size)
            self._sync()
            return maintain.done(self.name, self.version, added, removed)

    def checkpoint(self) -> Maintenance:
        """A checkpoint of the current version (see :func:`.maintain.checkpoint`), and a
        snapshot of the key cache beside it (:mod:`.snapshot`)."""
        with self._lock:
            self._writable()
            maintain.checkpoint(self._log)
            try:
                snapshot.write(self._files, self._cache)
            except STORE_ERRORS as exc:
                raise_store_error(exc, f"writing the key snapshot of {self.uri}")
            return maintain.done(self.name, self.version)

    def vacuum(self, retention: timedelta | None = None) -> Maintenance:
        """Delete files no commit names any more; see :func:`.maintain.vacuum`."""
        kept = maintain.vacuum_retention(retention)
        with self._lock:
            self._writable()
            removed = maintain.vacuum(self._log, kept)
            self._sync()
            return maintain.done(self.name, self.version, removed=removed)
