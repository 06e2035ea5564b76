"""A cold table as a Delta table: Parquet files that exist for readers only once a commit
in the table's log names them, on a local folder or on S3, written by any number of
processes.

Layout of one table (``<location>/<name>``)::

    _delta_log/<version>.json        one commit per append or maintenance step
    _delta_log/<version>.checkpoint.parquet, _last_checkpoint   written by checkpoint()
    part-*.parquet                   data files; unpartitioned, so that an append is one
                                     file and compaction can merge any of them

Appends are idempotent by key, exactly: each append checks its keys against the
version it read and commits only as the very next version (Delta's own retry, which
would rebase a blind append onto newer versions unchecked, is off).  When another
writer got there first, the append reloads, checks its keys again against the new
version and tries once more; a batch another process already committed leaves nothing
to write.  The batch's id goes into the commit as a Delta application transaction
(``txn``), which also tells, after a write whose outcome was lost (a timeout), whether
it committed.

Lookups by key read one row group of one file: each process keeps a key -> (file, row
group, row) cache, built from the data files of the table's current version and kept
up to date from the files each new version adds or removes (a compaction removes files
and adds one holding the same keys).

Errors of deltalake and of the object store are turned into this package's errors in
one place, :func:`_store_error`: a commit that another writer won is retried here; a
write that surely did not commit is :class:`CommitFailed`; one whose outcome cannot be
learned (the store went away mid-commit) is :class:`CommitStateUnknown`; a store that
cannot be read is :class:`StoreUnavailable`.
"""

from __future__ import annotations

import functools
import math
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import (
    CommitProperties,
    DeltaTable,
    PostCommitHookProperties,
    Transaction,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler

from cold_store import rows as checks
from cold_store.base import AppendResult, Maintenance, QuarantinedFile
from cold_store.errors import (
    ColdStoreError,
    CommitFailed,
    CommitStateUnknown,
    RecordNotFound,
    RecordQuarantined,
    SchemaError,
    StoreUnavailable,
)

DEFAULT_VACUUM_RETENTION = timedelta(days=7)
"""How long a file no commit names (a compacted-away file, or one written by an append
that lost its race or has not committed yet) is kept before vacuum may delete it."""
MIN_VACUUM_RETENTION = timedelta(hours=1)
"""Vacuum refuses a shorter retention: a writer between writing its data file and
committing it (a slow upload, a retried commit) must never find the file gone, and a
reader whose cache still names a compacted-away file must still be able to read it."""
COMMIT_ATTEMPTS = 50
"""Attempts of one append before it gives up as :class:`CommitFailed`; each lost attempt
means another writer committed, so many writers still all get through."""
_INDEX_THREADS = 8
_FOOTERS_KEPT = 512
"""Footers kept per table (the most recently used), so that a lookup in one of those
files reads only its row group."""
_MISSING = "missing: the log names it but the store does not hold it"
_TABLE_CONFIG = {
    # only ever appended to; compaction rewrites files without changing data
    "delta.appendOnly": "true",
    # statistics only for the key: the other columns are never filtered on
    "delta.dataSkippingNumIndexedCols": "1",
}
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
"""Appends never checkpoint or clean the log: that is maintenance, run by one process
at a time (:meth:`DeltaColdTable.checkpoint`)."""


class _Conflict(Exception):
    """Another writer committed the version this append was written against."""


def _store_error(exc: BaseException, where: str) -> ColdStoreError | _Conflict:
    """The one boundary between deltalake's and the object store's errors and ours."""
    if isinstance(exc, CommitFailedError):
        return _Conflict(str(exc))
    if isinstance(exc, ColdStoreError):
        return exc
    if isinstance(exc, pa.ArrowInvalid):
        return SchemaError(f"{where}: {exc}")
    return StoreUnavailable(f"{where}: {type(exc).__name__}: {exc}")


def _raise(exc: BaseException, where: str) -> NoReturn:
    mapped = _store_error(exc, where)
    if isinstance(mapped, _Conflict):  # outside an append a conflict is just a failure
        raise CommitFailed(f"{where}: {mapped}") from exc
    raise mapped from exc


_STORE_ERRORS = (DeltaError, OSError, pa.ArrowException)
# Every pyarrow read here runs on the calling thread (use_threads=False, no pre-buffering):
# the object store is reached through a file system written in Python, and a pyarrow
# worker thread still calling into Python while the interpreter exits aborts the process
# ("terminate called without an active exception").


def _lost_race(exc: BaseException) -> bool:
    """Whether a failed commit failed only because the version it was written against
    was no longer the latest (deltalake reports every commit error as one exception
    class; the message tells which)."""
    text = str(exc)
    return "Failed to commit transaction" in text or "existing table version" in text


@dataclass(frozen=True)
class _Damaged:
    """What is wrong with a data file that could not be read."""

    reason: str


_T = TypeVar("_T")


@dataclass
class _File:
    seq: int
    size: int
    rows: int
    keys: list[str]
    groups: list[int]
    """Rows per row group."""
    names: frozenset[str]
    """The columns the file holds (older files lack columns added since)."""


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
    ) -> None:
        """``partition_by`` is checked as the local backend checks it (so that any row
        one backend takes, the other takes too), but the Delta table is not partitioned
        by it.  ``writable=False`` never writes, and a table not created yet reads as
        empty."""
        if key not in schema.names or partition_by not in schema.names:
            raise SchemaError(f"key {key!r} and partition {partition_by!r} must be columns")
        self.uri = uri.rstrip("/")
        self.name = name
        self.schema = schema
        self.key = key
        self.partition_by = partition_by
        self.row_group_size = row_group_size
        self.writable = writable
        self._options = dict(storage_options or {})
        self._lock = threading.RLock()
        self._table: DeltaTable | None = None
        self._merge_schema = False
        self._version = -1
        self._files: dict[str, _File] = {}
        self._next_seq = 0
        self._keys: dict[str, tuple[str, int, int]] = {}
        self._lost: dict[str, str] = {}
        """Keys whose file turned out unreadable -> that file."""
        self._unreadable: dict[str, str] = {}
        """Files found unreadable -> why; left in place (only a commit removes a file
        from a Delta table) and skipped by every read."""
        self._fs_handle: pafs.FileSystem | None = None
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        self._open()

    # ---- the table and its key cache ----------------------------------------------
    def _open(self) -> None:
        try:
            self._table = DeltaTable(self.uri, storage_options=self._options)
        except TableNotFoundError:
            if not self.writable:
                return  # nothing archived yet: reads see an empty table
            self._table = self._create()
        except _STORE_ERRORS as exc:
            _raise(exc, f"opening {self.uri}")
        present = set(self._table.schema().to_arrow().names)
        if not set(self.schema.names) <= present:
            # the schema grew (by nullable columns only): the next append adds them
            self._merge_schema = True
        self._sync()

    def _create(self) -> DeltaTable:
        try:
            return DeltaTable.create(
                self.uri,
                schema=self.schema,
                mode="ignore",
                configuration=_TABLE_CONFIG,
                storage_options=self._options,
            )
        except _STORE_ERRORS as exc:
            # another process may have created it at the same moment
            try:
                return DeltaTable(self.uri, storage_options=self._options)
            except _STORE_ERRORS:
                _raise(exc, f"creating {self.uri}")

    def _refresh(self) -> None:
        """Load the versions committed since the last look, then bring the cache to the
        loaded version."""
        with self._lock:
            if self._table is None:
                try:
                    self._table = DeltaTable(self.uri, storage_options=self._options)
                except TableNotFoundError:
                    return
                except _STORE_ERRORS as exc:
                    _raise(exc, f"opening {self.uri}")
            else:
                try:
                    self._table.update_incremental()
                except _STORE_ERRORS as exc:
                    # the entries after the loaded version may be gone (cleaned after a
                    # checkpoint while this process was idle): load the table afresh
                    try:
                        self._table = DeltaTable(self.uri, storage_options=self._options)
                    except _STORE_ERRORS:
                        _raise(exc, f"reading the log of {self.uri}")
            self._sync()

    def _sync(self) -> None:
        """Bring the key cache to the version the table object holds: forget the files
        that version no longer names, index those it added."""
        table = self._table
        if table is None or table.version() == self._version:
            return
        try:
            actions = pa.table(table.get_add_actions(flatten=True))
        except _STORE_ERRORS as exc:
            _raise(exc, f"listing the files of {self.uri}")
        current = {
            path: (size, rows, mtime)
            for path, size, rows, mtime in zip(
                actions.column("path").to_pylist(),
                actions.column("size_bytes").to_pylist(),
                actions.column("num_records").to_pylist(),
                actions.column("modification_time").to_pylist(),
                strict=True,
            )
        }
        for path in [p for p in self._files if p not in current]:
            gone = self._files.pop(path)
            self._unreadable.pop(path, None)
            self._footers.pop(path, None)
            for k in gone.keys:
                if self._keys.get(k, ("",))[0] == path:
                    del self._keys[k]
        fresh = sorted((p for p in current if p not in self._files), key=lambda p: current[p][2])
        for path in fresh:  # sizes first: reading the new files needs them
            self._files[path] = _File(-1, current[path][0], 0, [], [], frozenset())
        if "://" in self.uri:
            self._fs_handle = None  # made again with the new files' sizes
        try:
            read = self._read_keys(fresh)
        except BaseException:
            for path in fresh:  # not indexed: the next look tries them again
                del self._files[path]
            raise
        for path, found in zip(fresh, read, strict=True):
            size, rows, _mtime = current[path]
            if isinstance(found, str):
                self._unreadable[path] = found
                self._files[path] = _File(self._next_seq, size, rows or 0, [], [], frozenset())
            else:
                keys, groups, names, footer = found
                self._files[path] = _File(self._next_seq, size, len(keys), keys, groups, names)
                self._remember_footer(path, footer)
                offsets = [(g, r) for g, n in enumerate(groups) for r in range(n)]
                for k, (g, r) in zip(keys, offsets, strict=True):
                    self._keys.setdefault(k, (path, g, r))
                    self._lost.pop(k, None)
            self._next_seq += 1
        self._version = table.version()

    def _read_keys(
        self, paths: Sequence[str]
    ) -> list[tuple[list[str], list[int], frozenset[str], pq.FileMetaData] | str]:
        """Each file's keys, row group sizes and columns, read in parallel (on an object
        store each file costs a round trip or two); a string where the file is
        unreadable."""

        def one(path: str) -> tuple[list[str], list[int], frozenset[str], pq.FileMetaData] | str:
            def read() -> tuple[list[str], list[int], frozenset[str], pq.FileMetaData]:
                handle = pq.ParquetFile(path, filesystem=self._fs, pre_buffer=False)
                keys = handle.read(columns=[self.key], use_threads=False)
                keys = keys.column(self.key).to_pylist()
                meta = handle.metadata
                groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
                return keys, groups, frozenset(handle.schema_arrow.names), meta

            got = self._read_file(path, read)
            return got.reason if isinstance(got, _Damaged) else got

        if len(paths) <= 1:
            return [one(p) for p in paths]
        with ThreadPoolExecutor(min(_INDEX_THREADS, len(paths))) as pool:
            return list(pool.map(one, paths))

    def _read_file(
        self, path: str, read: Callable[[], _T], what: str = "unreadable"
    ) -> _T | _Damaged:
        """``read()`` of one data file, or what is wrong with the file.  pyarrow raises
        ``OSError`` both for bytes it cannot decode and for a store that does not answer,
        so after one the store is asked about the file itself: when it answers, the read
        is tried once more and a second failure is the file's; when it does not,
        :class:`StoreUnavailable` (the file is not to blame)."""
        for attempt in (1, 2):
            try:
                return read()
            except FileNotFoundError:
                return _Damaged(_MISSING)
            except (pa.ArrowInvalid, IndexError, KeyError) as exc:
                return _Damaged(f"{what}: {exc}")
            except _STORE_ERRORS as exc:
                try:
                    info = self._fs.get_file_info(path)
                except _STORE_ERRORS:
                    _raise(exc, f"reading {self.uri}/{path}")
                if info.type == pafs.FileType.NotFound:
                    return _Damaged(_MISSING)
                if attempt == 2:
                    return _Damaged(f"{what}: {exc}")
        raise AssertionError("unreachable")

    def _remember_footer(self, path: str, footer: pq.FileMetaData) -> None:
        self._footers[path] = footer
        self._footers.move_to_end(path)
        while len(self._footers) > _FOOTERS_KEPT:
            self._footers.popitem(last=False)

    def _open_file(self, path: str) -> pq.ParquetFile:
        """A data file, with its footer from the cache when there (no read for it)."""
        with self._lock:
            footer = self._footers.get(path)
            if footer is not None:
                self._footers.move_to_end(path)
        handle = pq.ParquetFile(path, filesystem=self._fs, metadata=footer, pre_buffer=False)
        if footer is None:
            with self._lock:
                self._remember_footer(path, handle.metadata)
        return handle

    def _read_table(self, path: str, columns: list[str] | None) -> pa.Table:
        return pq.read_table(
            path, filesystem=self._fs, columns=columns, use_threads=False, pre_buffer=False
        )

    def _mark_unreadable(self, path: str, reason: str) -> None:
        with self._lock:
            self._unreadable[path] = reason
            self._footers.pop(path, None)
            entry = self._files.get(path)
            for k in entry.keys if entry else ():
                if self._keys.get(k, ("",))[0] == path:
                    del self._keys[k]
                    self._lost[k] = path

    @property
    def _fs(self) -> pafs.FileSystem:
        """The table's files, for pyarrow: a local folder through pyarrow's own
        filesystem; an object store through Delta's object store client (one
        configuration for both), made again after the files changed."""
        if self._fs_handle is None:
            if "://" not in self.uri:
                self._fs_handle = pafs.SubTreeFileSystem(self.uri, pafs.LocalFileSystem())
                return self._fs_handle
            # with each file's size known, opening a file costs no request of its own
            sizes = {path: entry.size for path, entry in self._files.items()}
            try:
                handler = DeltaStorageHandler(self.uri, self._options, known_sizes=sizes)
            except _STORE_ERRORS as exc:
                _raise(exc, f"opening {self.uri}")
            self._fs_handle = pafs.PyFileSystem(handler)
        return self._fs_handle

    @property
    def version(self) -> int:
        """The table version the cache reflects (-1: no table yet)."""
        return self._version

    def close(self) -> None:
        """Drop the table, the cache and every pyarrow object holding a file system: a
        Python-implemented one still alive when the interpreter tears pyarrow down can
        abort the process at exit."""
        with self._lock:
            self._table = None
            self._fs_handle = None
            self._footers.clear()
            self._files.clear()
            self._keys.clear()

    # ---- writes -------------------------------------------------------------------
    def append(self, rows: Sequence[Mapping[str, Any]], batch: str | None = None) -> AppendResult:
        """Store the rows whose key is new, in one commit.

        Every row is validated first: a bad row raises :class:`SchemaError` and nothing
        is written.  ``batch`` names the rows (a replayed batch is the same rows): it
        is recorded in the commit as an application transaction; stored keys are what
        makes a replay write nothing."""
        if not self.writable:
            raise CommitFailed(f"cold table {self.name!r} was opened read-only")
        checks.check_keys(rows, self.key)
        checks.check_partition(rows, self.partition_by)
        every = checks.to_arrow(rows, self.schema, self.name, self.key)  # all checked up front
        app_id = batch or uuid.uuid4().hex
        for attempt in range(COMMIT_ATTEMPTS):
            with self._lock:
                try:
                    self._refresh()
                except StoreUnavailable as exc:
                    # nothing of this call is committed (a lost race before, at most)
                    raise CommitFailed(f"{exc}; nothing was committed") from exc
                fresh, skipped = checks.fresh_rows(rows, self.key, self._keys)
                if not fresh:
                    return AppendResult((), tuple(skipped), ())
                if len(fresh) == len(rows):
                    data = every
                else:
                    data = checks.to_arrow(list(fresh.values()), self.schema, self.name, self.key)
                try:
                    self._commit(data, app_id)
                    committed = True
                except _STORE_ERRORS as exc:
                    committed = self._settle(exc, app_id)
                if committed:
                    self._sync()
                    files = sorted({self._keys[k][0] for k in fresh if k in self._keys})
                    return AppendResult(tuple(fresh), tuple(skipped), tuple(files))
            # another writer won this version: back off a little (not holding the lock),
            # so that the writers racing do not all come back at once
            time.sleep(random.uniform(0, 0.01 * min(attempt + 1, 20)))
        raise CommitFailed(
            f"{self.uri}: {COMMIT_ATTEMPTS} attempts in a row lost to other writers; "
            "nothing was committed"
        )

    def _commit(self, data: pa.Table, app_id: str) -> None:
        assert self._table is not None  # a writable table is created on open
        write_deltalake(
            self._table,
            data,
            mode="append",
            schema_mode="merge" if self._merge_schema else None,
            writer_properties=WriterProperties(
                compression="ZSTD", max_row_group_size=self.row_group_size
            ),
            commit_properties=CommitProperties(
                max_commit_retries=0,
                app_transactions=[Transaction(app_id=app_id, version=1)],
            ),
            post_commithook_properties=_NO_HOOKS,
        )
        self._merge_schema = False

    def _settle(self, exc: BaseException, app_id: str) -> bool:
        """After a failed write: ``True`` when it committed after all, ``False`` when
        another writer won the version (check the keys again and retry).  Otherwise
        raises :class:`CommitFailed` when the failure came before the commit was sent,
        :class:`CommitStateUnknown` when it may have been sent or the store cannot be
        read to tell."""
        mapped = _store_error(exc, f"appending to {self.uri}")
        if isinstance(mapped, _Conflict) and _lost_race(exc):
            return False
        if isinstance(mapped, SchemaError):
            raise mapped from exc
        try:
            self._refresh()
            landed = self._table is not None and (
                self._table.transaction_version(app_id) is not None
            )
        except (ColdStoreError, *_STORE_ERRORS) as again:
            raise CommitStateUnknown(
                f"{self.uri}: the append may or may not have committed ({mapped}) and the "
                f"store cannot be read to tell ({again}); retry the same batch later"
            ) from exc
        if landed:
            return True
        if isinstance(mapped, _Conflict):  # the log entry's put itself failed
            raise CommitStateUnknown(
                f"{self.uri}: writing the commit failed ({mapped}); it is not visible now, "
                f"but a put still in flight may land; retry the same batch later"
            ) from exc
        raise CommitFailed(f"{mapped}; nothing was committed") from exc

    def committed(self, batch: str) -> bool:
        """Whether an append naming ``batch`` has committed (a read of the log)."""
        self._refresh()
        if self._table is None:
            return False
        try:
            return self._table.transaction_version(batch) is not None
        except _STORE_ERRORS as exc:
            _raise(exc, f"reading the log of {self.uri}")

    # ---- reads --------------------------------------------------------------------
    def contains(self, key: str) -> bool:
        """Whether ``key`` is stored in a readable file."""
        self._refresh()
        return key in self._keys

    def contains_many(self, keys: Iterable[str]) -> set[str]:
        self._refresh()
        return {k for k in keys if k in self._keys}

    def count(self) -> int:
        self._refresh()
        return len(self._keys)

    def all_keys(self) -> list[str]:
        """Every key, in the order the cache first saw the files holding them (compaction
        moves keys to the end)."""
        self._refresh()
        with self._lock:
            return sorted(
                self._keys,
                key=lambda k: (
                    self._files[self._keys[k][0]].seq,
                    self._keys[k][1],
                    self._keys[k][2],
                ),
            )

    def get(self, key: str) -> dict[str, Any]:
        """The full row under ``key``, from one row group of one file.  The cache is
        refreshed when it does not know the key or names a file that is gone (a
        compaction since, then a vacuum)."""
        for fresh in (False, True):
            if fresh:
                self._refresh()
            with self._lock:
                hit = self._keys.get(key)
                lost = self._lost.get(key)
            if hit is None:
                if fresh and lost is not None:
                    raise RecordQuarantined(
                        self.name, key, f"{self.uri}/{lost}", self._unreadable.get(lost, "")
                    )
                continue
            path, group, row = hit

            def read(path: str = path, group: int = group, row: int = row) -> dict[str, Any]:
                data = self._open_file(path).read_row_group(group, use_threads=False)
                return checks.complete(data.slice(row, 1).to_pylist()[0], self.schema)

            got = self._read_file(path, read)
            if isinstance(got, _Damaged):
                if got.reason == _MISSING and not fresh:
                    continue  # compacted away and vacuumed since the cache looked
                reason = got.reason
            elif got.get(self.key) == key:
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
            files = sorted(
                ((p, f) for p, f in self._files.items() if p not in self._unreadable),
                key=lambda item: item[1].seq,
            )
        for path, entry in files:
            read = None if wanted is None else [c for c in wanted if c in entry.names]
            data = self._read_file(
                path,
                functools.partial(self._read_table, path, read),
                "unreadable on scan",
            )
            if isinstance(data, _Damaged):
                self._mark_unreadable(path, data.reason)
                continue
            for found in data.to_pylist():
                row = checks.complete(found, self.schema)
                if self._keys.get(row[self.key], ("",))[0] != path:
                    continue  # a copy of a key held by an earlier file
                yield row if wanted is None else {c: row.get(c) for c in wanted}

    # ---- health -------------------------------------------------------------------
    def check_footers(self) -> list[str]:
        """Read every data file's footer and check its row count against the commit that
        added it; returns the files found unreadable (left in place and skipped)."""
        self._refresh()
        with self._lock:
            files = [(p, f.rows) for p, f in self._files.items() if p not in self._unreadable]
        bad: list[str] = []
        for path, rows in files:
            footer = self._read_file(
                path,
                functools.partial(pq.read_metadata, path, filesystem=self._fs),
                "unreadable on verify",
            )
            if isinstance(footer, _Damaged):
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
            files = [(p, f) for p, f in self._files.items() if p not in self._unreadable]
        damaged: list[QuarantinedFile] = []
        for path, entry in files:
            where = f"{self.uri}/{path}"
            try:
                info = self._fs.get_file_info(path)
            except _STORE_ERRORS as exc:
                _raise(exc, f"reading {where}")
            if info.type == pafs.FileType.NotFound:
                damaged.append(QuarantinedFile(path, where, "missing"))
                continue
            if info.size != entry.size:
                damaged.append(
                    QuarantinedFile(
                        path, where, f"{info.size} bytes where {entry.size} were committed"
                    )
                )
                continue
            if deep:
                data = self._read_file(path, functools.partial(self._read_table, path, None))
                if isinstance(data, _Damaged):
                    damaged.append(QuarantinedFile(path, where, data.reason))
                elif data.column(self.key).to_pylist() != entry.keys:
                    damaged.append(
                        QuarantinedFile(path, where, "content differs from the committed")
                    )
        return damaged

    def quarantined(self) -> list[QuarantinedFile]:
        with self._lock:
            return [
                QuarantinedFile(
                    p, f"{self.uri}/{p}", f"{r} (left in place: only a commit removes a file)"
                )
                for p, r in self._unreadable.items()
            ]

    # ---- maintenance (one process at a time) -----------------------------------------
    def _writable_table(self) -> DeltaTable:
        if not self.writable:
            raise CommitFailed(f"cold table {self.name!r} was opened read-only")
        self._refresh()
        assert self._table is not None  # a writable table is created on open
        return self._table

    def compact(self) -> Maintenance:
        """Merge small files into large ones (Delta's optimize): a commit that removes
        them and adds files holding the same rows.  Appends racing it commit after it."""
        with self._lock:
            table = self._writable_table()
            try:
                metrics = table.optimize.compact(
                    writer_properties=WriterProperties(
                        compression="ZSTD", max_row_group_size=self.row_group_size
                    ),
                    post_commithook_properties=_NO_HOOKS,
                )
            except _STORE_ERRORS as exc:
                _raise(exc, f"compacting {self.uri}")
            self._sync()
            return Maintenance(
                self.name,
                files_added=int(metrics.get("numFilesAdded", 0)),
                files_removed=int(metrics.get("numFilesRemoved", 0)),
                version=self._version,
            )

    def checkpoint(self) -> Maintenance:
        """Write a checkpoint of the current version (a new reader then loads one file
        instead of every commit), and delete log entries past the log retention
        (``delta.logRetentionDuration``, 30 days) that the checkpoint makes unneeded."""
        with self._lock:
            table = self._writable_table()
            try:
                table.create_checkpoint()
                table.cleanup_metadata()
            except _STORE_ERRORS as exc:
                _raise(exc, f"checkpointing {self.uri}")
            return Maintenance(self.name, version=self._version)

    def vacuum(self, retention: timedelta | None = None) -> Maintenance:
        """Delete files no commit names any more that are older than ``retention``
        (default :data:`DEFAULT_VACUUM_RETENTION`; never less than
        :data:`MIN_VACUUM_RETENTION`): a file a writer has written but not committed yet
        is younger than that, so it is never deleted under the writer."""
        kept = DEFAULT_VACUUM_RETENTION if retention is None else retention
        if kept < MIN_VACUUM_RETENTION:
            raise ColdStoreError(
                f"vacuum retention {kept} is below {MIN_VACUUM_RETENTION}: a writer's "
                "uncommitted files could be deleted under it"
            )
        with self._lock:
            table = self._writable_table()
            try:
                deleted = table.vacuum(
                    retention_hours=math.ceil(kept.total_seconds() / 3600),
                    dry_run=False,
                    enforce_retention_duration=False,
                    full=True,
                    post_commithook_properties=_NO_HOOKS,
                )
            except _STORE_ERRORS as exc:
                _raise(exc, f"vacuuming {self.uri}")
            self._sync()
            return Maintenance(self.name, files_removed=len(deleted), version=self._version)
