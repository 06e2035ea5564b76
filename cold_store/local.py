"""An append-only Parquet table: immutable files, a key index, quarantine of bad files.

A table opened with ``writable=False`` never writes: it does not create folders, index
new files or move unreadable ones aside; an unreadable file is reported as such and
left for the owner of the store to quarantine.

Layout under the store root::

    <name>/<partition>=<value>/part-<utc>-<uuid>.parquet   immutable data files
    <name>.index.sqlite                                   key -> (file, row group, row)
    quarantine/<name>/...                                  files that could not be read

The Parquet files are the truth; the SQLite index (:mod:`cold_store.local_index`) is a
cache that makes key lookups read one row group of one file.  A file published but not
yet indexed (a crash between the two steps) is indexed when the table is next opened, so
nothing is lost and a key is never indexed twice: the first published copy wins, later
copies are skipped by :meth:`ParquetTable.scan`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cold_store import rows as checks
from cold_store.base import AppendResult, Maintenance, QuarantinedFile
from cold_store.errors import (
    CommitFailed,
    CommitStateUnknown,
    RecordNotFound,
    RecordQuarantined,
    SchemaError,
)
from cold_store.local_index import KeyIndex
from cold_store.publish import is_temp, make_dirs, publish

STALE_TEMP_SECONDS = 600.0


def _fingerprint(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def _drop_if_stale(path: Path) -> None:
    # A temp file this old belongs to a writer that died before publishing.
    with contextlib.suppress(FileNotFoundError):
        if time.time() - path.stat().st_mtime > STALE_TEMP_SECONDS:
            path.unlink()


def _publish_file(
    folder: Path, partition_by: str, value: str, table: pa.Table, row_group_size: int
) -> str:
    """Publish ``table`` as a new immutable file of partition ``value``; its name
    relative to ``folder``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    rel = f"{partition_by}={value}/part-{stamp}-{uuid.uuid4().hex}.parquet"

    def write(handle: Any) -> None:
        pq.write_table(table, handle, row_group_size=row_group_size, compression="zstd")

    try:
        publish(folder / rel, write)
    except (pa.ArrowException, OSError) as exc:
        raise CommitFailed(f"publishing to {folder.name!r} failed: {exc}") from exc
    return rel


class ParquetTable:
    """One logical table of immutable Parquet files, keyed by one string column."""

    def __init__(
        self,
        root: Path,
        name: str,
        schema: pa.Schema,
        key: str,
        partition_by: str,
        row_group_size: int = 1024,
        writable: bool = True,
        no_writer: Callable[[], bool] | None = None,
    ) -> None:
        """``no_writer`` (read-only tables): whether no process writes the store now,
        which lets a reader open the index where its ``-shm`` file cannot be used."""
        if key not in schema.names or partition_by not in schema.names:
            raise SchemaError(f"key {key!r} and partition {partition_by!r} must be columns")
        self.name = name
        self.schema = schema
        self.key = key
        self.partition_by = partition_by
        self.row_group_size = row_group_size
        self.root = Path(root)
        self.dir = self.root / name
        self.quarantine_dir = self.root / "quarantine" / name
        self.writable = writable
        if writable:
            make_dirs(self.dir)
        self._index = KeyIndex(self.root / f"{name}.index.sqlite", writable, no_writer)
        self._unreadable: dict[str, str] = {}
        """Files a read-only table found unreadable (it cannot quarantine them): left in
        place, reported by :meth:`quarantined`, skipped by every read."""
        if writable:
            self.reconcile()

    def close(self) -> None:
        self._index.close()

    # ---- index maintenance --------------------------------------------------------
    def _data_files(self) -> list[Path]:
        found: list[Path] = []
        for folder, _dirs, files in os.walk(self.dir):  # nothing when the folder is missing
            for fname in files:
                path = Path(folder) / fname
                if is_temp(path):
                    _drop_if_stale(path)
                elif fname.endswith(".parquet"):
                    found.append(path)
        return sorted(found)

    def reconcile(self) -> list[str]:
        """Index every published file the index does not know yet; returns their names."""
        known = self._index.file_names()
        added: list[str] = []
        for path in self._data_files():
            rel = path.relative_to(self.dir).as_posix()
            if rel in known:
                continue
            try:
                handle = pq.ParquetFile(path)
                keys = handle.read(columns=[self.key]).column(self.key).to_pylist()
                groups = [
                    handle.metadata.row_group(i).num_rows for i in range(handle.num_row_groups)
                ]
            except (pa.ArrowException, OSError) as exc:
                self._quarantine(rel, f"unreadable on reconcile: {exc}")
                continue
            self._index_file(rel, keys, groups)
            added.append(rel)
        return added

    def _index_file(
        self, rel: str, keys: Sequence[str], groups: Sequence[int], batches: Sequence[str] = ()
    ) -> None:
        """Index ``keys`` (in file order) of a file whose row groups hold ``groups`` rows,
        with the file's size and checksum as published.  A key already indexed keeps its
        first copy, unless that copy was quarantined."""
        positions = [(g, r) for g, size in enumerate(groups) for r in range(size)]
        if len(positions) != len(keys):
            raise SchemaError(f"{rel}: {len(keys)} keys but {len(positions)} rows in row groups")
        size, digest = _fingerprint(self.dir / rel)
        self._index.add_file(rel, keys, positions, size, digest, batches)

    def _quarantine(self, rel: str, reason: str) -> Path:
        """Move an unreadable file aside (only when writable; a reader leaves it in place
        and returns where it is)."""
        source = self.dir / rel
        if not self.writable:
            self._unreadable[rel] = reason
            return source
        target = self.quarantine_dir / rel
        make_dirs(target.parent)
        if source.exists():
            shutil.move(str(source), str(target))
        self._index.mark_quarantined(rel, reason)
        return target

    def verify(self, deep: bool = False) -> list[QuarantinedFile]:
        """Readable-looking files that are not what was published: missing, of another
        size, or (``deep``: every byte read) of another checksum.  Reported, not moved;
        a read of one quarantines it."""
        damaged: list[QuarantinedFile] = []
        for name, size, digest in self._index.fingerprints():
            path = self.dir / name
            try:
                actual = path.stat().st_size
            except OSError:
                damaged.append(QuarantinedFile(name, path, "missing"))
                continue
            if size is not None and actual != size:
                damaged.append(
                    QuarantinedFile(name, path, f"{actual} bytes where {size} were published")
                )
            elif deep and digest is not None and _fingerprint(path)[1] != digest:
                damaged.append(QuarantinedFile(name, path, "checksum differs from the published"))
        return damaged

    def quarantined(self) -> list[QuarantinedFile]:
        moved = [
            QuarantinedFile(n, self.quarantine_dir / n, r) for n, r in self._index.quarantined()
        ]
        left = [
            QuarantinedFile(n, self.dir / n, f"{r} (left in place: the store is open read-only)")
            for n, r in self._unreadable.items()
        ]
        return moved + left

    def check_footers(self) -> list[str]:
        """Read every data file's footer and check its row count against the index: a
        torn or overwritten file is found now, not when one of its records is next read.
        Unreadable files are quarantined (left in place and skipped, read-only); returns
        their names."""
        bad: list[str] = []
        for rel, rows in self._index.ok_files():
            if rel in self._unreadable:
                continue
            try:
                found = pq.read_metadata(self.dir / rel).num_rows
            except (pa.ArrowException, OSError) as exc:
                self._quarantine(rel, f"unreadable on verify: {exc}")
                bad.append(rel)
                continue
            if found != rows:
                self._quarantine(rel, f"holds {found} rows, indexed with {rows}")
                bad.append(rel)
        return bad

    # ---- writes -------------------------------------------------------------------
    def append(self, rows: Sequence[Mapping[str, Any]], batch: str | None = None) -> AppendResult:
        """Store rows whose key is new, one new immutable file per partition value.

        Every row is validated before anything is published: a bad row raises
        :class:`SchemaError` and no file of the call is written.  ``batch``, when
        given, is recorded with the rows (:meth:`committed_batches`); one process writes
        this table, so skipping stored keys is what makes a replayed batch write nothing.
        """
        return self._append([(batch, rows)])[0]

    def append_batches(
        self, batches: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> dict[str, AppendResult]:
        """Store several batches at once, each under its own id (see
        :meth:`ColdTable.append_batches`)."""
        results = self._append(list(batches.items()))
        return dict(zip(batches, results, strict=True))

    def committed_batches(self, batches: Iterable[str]) -> set[str]:
        return self._index.committed(list(batches))

    def _append(
        self, batches: list[tuple[str | None, Sequence[Mapping[str, Any]]]]
    ) -> list[AppendResult]:
        if not self.writable:
            raise CommitFailed(f"cold table {self.name!r} was opened read-only")
        rows = [row for _batch, part in batches for row in part]
        checks.check_keys(rows, self.key)
        stored = self.contains_many(row[self.key] for row in rows)
        fresh, _skipped = checks.fresh_rows(rows, self.key, stored)
        checks.check_partition(list(fresh.values()), self.partition_by)
        by_partition: dict[str, list[Mapping[str, Any]]] = {}
        for row in fresh.values():
            by_partition.setdefault(row[self.partition_by], []).append(row)
        tables = {value: self._to_table(part) for value, part in sorted(by_partition.items())}
        names = [b for b, _part in batches if b is not None]
        files: list[str] = []
        for number, (value, table) in enumerate(tables.items(), start=1):
            last = number == len(tables)  # its index entry records the batches
            files.append(self._publish(value, table, names if last else []))
        shares = checks.shares(batches, self.key, fresh, tuple(files))
        return [AppendResult(*share) for share in shares]

    def _publish(self, value: str, table: pa.Table, batches: Sequence[str]) -> str:
        rel = _publish_file(self.dir, self.partition_by, value, table, self.row_group_size)
        try:
            groups = [len(b) for b in table.to_batches(max_chunksize=self.row_group_size)]
            self._index_file(rel, table.column(self.key).to_pylist(), groups, batches)
        except sqlite3.Error as exc:
            raise CommitStateUnknown(
                f"{rel} is published but not indexed ({exc}); reopen the table to reconcile"
            ) from exc
        return rel

    def _to_table(self, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
        return checks.to_arrow(rows, self.schema, self.name, self.key)

    # ---- reads --------------------------------------------------------------------
    def contains(self, key: str) -> bool:
        """Whether ``key`` is stored in a readable file (a quarantined copy does not
        count, so the record can be archived again)."""
        rel = self._index.file_of(key)
        return rel is not None and rel not in self._unreadable

    def contains_many(self, keys: Iterable[str]) -> set[str]:
        """The subset of ``keys`` stored in readable files."""
        found = self._index.files_of(list(dict.fromkeys(keys)))
        return {key for key, rel in found if rel not in self._unreadable}

    def count(self) -> int:
        """Keys stored in readable files."""
        if not self._unreadable:
            return self._index.count()
        return sum(n for rel, n in self._index.count_by_file() if rel not in self._unreadable)

    def all_keys(self) -> list[str]:
        """Every indexed key, in publication order."""
        return [key for key, rel in self._index.keys_in_order() if rel not in self._unreadable]

    def get(self, key: str) -> dict[str, Any]:
        """The full row stored under ``key``; reads one row group of one file."""
        hit = self._index.lookup(key)
        if hit is None:
            raise RecordNotFound(self.name, key)
        rel, group, row, status, reason = hit
        if status == "quarantined":
            raise RecordQuarantined(self.name, key, self.quarantine_dir / rel, reason or "")
        if rel in self._unreadable:
            raise RecordQuarantined(self.name, key, self.dir / rel, self._unreadable[rel])
        try:
            table = pq.ParquetFile(self.dir / rel).read_row_group(group)
            record: dict[str, Any] = self._complete(table.slice(row, 1).to_pylist()[0])
        except (pa.ArrowException, OSError, IndexError) as exc:
            reason = f"unreadable: {exc}"
            path = self._quarantine(rel, reason)
            raise RecordQuarantined(self.name, key, path, reason) from exc
        if record.get(self.key) != key:
            reason = "index points at a row holding another key"
            path = self._quarantine(rel, reason)
            raise RecordQuarantined(self.name, key, path, reason)
        return record

    def _read(self, path: Path, columns: list[str] | None) -> list[dict[str, Any]]:
        """A file's rows; a column the table gained after the file was written is
        simply absent from it (and filled in by :meth:`_complete`)."""
        if columns is not None:
            present = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in present]
        rows: list[dict[str, Any]] = pq.read_table(path, columns=columns).to_pylist()
        return rows

    def _complete(self, row: dict[str, Any]) -> dict[str, Any]:
        return checks.complete(row, self.schema)

    def scan(self, columns: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
        """Every row in publication order, each key once; unreadable files are quarantined
        and skipped (see :meth:`quarantined`)."""
        wanted = list(columns) if columns is not None else None
        if wanted is not None and self.key not in wanted:
            wanted.append(self.key)
        seen: set[str] = set()
        for rel, _rows in self._index.ok_files():
            if rel in self._unreadable:
                continue
            try:
                rows = [self._complete(r) for r in self._read(self.dir / rel, wanted)]
            except (pa.ArrowException, OSError) as exc:
                self._quarantine(rel, f"unreadable on scan: {exc}")
                continue
            for row in rows:
                if wanted is not None:
                    row = {c: row.get(c) for c in wanted}
                key = row[self.key]
                if key not in seen:
                    seen.add(key)
                    yield row

    # ---- maintenance --------------------------------------------------------------
    # Files here are never rewritten and there is no log: nothing to compact, checkpoint
    # or vacuum.  The steps exist so that the sidecar runs one schedule for every backend.
    def compact(self) -> Maintenance:
        return Maintenance(self.name)

    def checkpoint(self) -> Maintenance:
        return Maintenance(self.name)

    def vacuum(self, retention: timedelta | None = None) -> Maintenance:
        return Maintenance(self.name)
