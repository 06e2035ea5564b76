"""Reading a Delta table's data files: through pyarrow's own file system on a local
folder, through Delta's object store client on S3 (one configuration for both), with
the footers of the most recently used files kept so that a lookup reads only its row
group.

A read that fails is judged here: the file is damaged (bytes that do not decode, a file
the log names but the store lacks) or the store did not answer (the file is not to
blame, :class:`~cold_store.errors.StoreUnavailable`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.fs import DeltaStorageHandler

from cold_store.delta.boundary import MISSING, STORE_ERRORS, Damaged, raise_store_error

_INDEX_THREADS = 8
FOOTERS_KEPT = 512
"""Footers kept per table (the most recently used), so that a lookup in one of those
files reads only its row group."""

_T = TypeVar("_T")

KeysOfFile = tuple[list[str], list[int], frozenset[str], pq.FileMetaData]
"""A file's keys in file order, rows per row group, columns, and footer."""


class DataFiles:
    """The data files of the table at ``uri``; ``sizes()`` tells each known file's size
    as committed (so that opening one costs no request of its own)."""

    def __init__(
        self,
        uri: str,
        options: Mapping[str, str],
        key: str,
        sizes: Callable[[], dict[str, int]],
        lock: threading.RLock,
    ) -> None:
        self.uri = uri
        self.key = key
        self._options = dict(options)
        self._sizes = sizes
        self._lock = lock
        self._handle: pafs.FileSystem | None = None
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()

    @property
    def remote(self) -> bool:
        return "://" in self.uri

    @property
    def fs(self) -> pafs.FileSystem:
        if self._handle is None:
            if not self.remote:
                self._handle = pafs.SubTreeFileSystem(self.uri, pafs.LocalFileSystem())
                return self._handle
            try:
                handler = DeltaStorageHandler(self.uri, self._options, known_sizes=self._sizes())
            except STORE_ERRORS as exc:
                raise_store_error(exc, f"opening {self.uri}")
            self._handle = pafs.PyFileSystem(handler)
        return self._handle

    def files_changed(self) -> None:
        """New files are known: the object store's handle is made again with their
        sizes."""
        if self.remote:
            self._handle = None

    def forget(self, path: str) -> None:
        self._footers.pop(path, None)

    def read(self, path: str, read: Callable[[], _T], what: str = "unreadable") -> _T | Damaged:
        """``read()`` of one data file, or what is wrong with the file.  pyarrow raises
        ``OSError`` both for bytes it cannot decode and for a store that does not answer,
        so after one the store is asked about the file itself: when it answers, the read
        is tried once more and a second failure is the file's; when it does not,
        :class:`StoreUnavailable` (the file is not to blame)."""
        for attempt in (1, 2):
            try:
                return read()
            except FileNotFoundError:
                return Damaged(MISSING)
            except (pa.ArrowInvalid, IndexError, KeyError) as exc:
                return Damaged(f"{what}: {exc}")
            except STORE_ERRORS as exc:
                try:
                    info = self.fs.get_file_info(path)
                except STORE_ERRORS:
                    raise_store_error(exc, f"reading {self.uri}/{path}")
                if info.type == pafs.FileType.NotFound:
                    return Damaged(MISSING)
                if attempt == 2:
                    return Damaged(f"{what}: {exc}")
        raise AssertionError("unreachable")

    def remember_footer(self, path: str, footer: pq.FileMetaData) -> None:
        with self._lock:
            self._footers[path] = footer
            self._footers.move_to_end(path)
            while len(self._footers) > FOOTERS_KEPT:
                self._footers.popitem(last=False)

    def open(self, path: str) -> pq.ParquetFile:
        """A data file, with its footer from the cache when there (no read for it)."""
        with self._lock:
            footer = self._footers.get(path)
            if footer is not None:
                self._footers.move_to_end(path)
        handle = pq.ParquetFile(path, filesystem=self.fs, metadata=footer, pre_buffer=False)
        if footer is None:
            self.remember_footer(path, handle.metadata)
        return handle

    def read_table(self, path: str, columns: list[str] | None) -> pa.Table:
        return pq.read_table(
            path, filesystem=self.fs, columns=columns, use_threads=False, pre_buffer=False
        )

    def read_row_group(self, path: str, group: int) -> pa.Table:
        return self.open(path).read_row_group(group, use_threads=False)

    def read_footer(self, path: str) -> pq.FileMetaData:
        return pq.read_metadata(path, filesystem=self.fs)

    def file_info(self, path: str) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(path)
        except STORE_ERRORS as exc:
            raise_store_error(exc, f"reading {self.uri}/{path}")

    def read_keys(self, paths: Sequence[str]) -> list[KeysOfFile | str]:
        """Each file's keys, row group sizes and columns, read in parallel (on an object
        store each file costs a round trip or two); a string where the file is
        unreadable."""

        def one(path: str) -> KeysOfFile | str:
            def read() -> KeysOfFile:
                handle = pq.ParquetFile(path, filesystem=self.fs, pre_buffer=False)
                keys = handle.read(columns=[self.key], use_threads=False)
                meta = handle.metadata
                groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
                names = frozenset(handle.schema_arrow.names)
                return keys.column(self.key).to_pylist(), groups, names, meta

            got = self.read(path, read)
            return got.reason if isinstance(got, Damaged) else got

        if len(paths) <= 1:
            return [one(p) for p in paths]
        with ThreadPoolExecutor(min(_INDEX_THREADS, len(paths))) as pool:
            return list(pool.map(one, paths))

    def close(self) -> None:
        """Drop every pyarrow object holding a file system: a Python-implemented one
        still alive when the interpreter tears pyarrow down can abort the process."""
        with self._lock:
            self._handle = None
            self._footers.clear()
