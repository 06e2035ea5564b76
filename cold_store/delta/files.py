"""Reading a Delta table's data files, and judging a read that fails.

On a local folder pyarrow reads the files itself.  On an object store every read is two
steps: the bytes are fetched first, in as few ranged GETs as the read needs (one for a
footer, one for a whole row group, one per key column chunk), through Delta's object
store client on the calling thread; then they are decoded from memory.  A lookup
therefore costs one request once its file's footer is known, and a failure is judged by
the step it happened in: bytes that do not decode, or a file the log names but the
store lacks or holds at another size, are the file's damage; a fetch that fails on a
file that is there as committed is the store's (:class:`~cold_store.errors.StoreUnavailable`):
a store that answers 503, resets or times out never gets a healthy file quarantined.

Every request to the object store runs within the store's call deadline
(:mod:`.deadline`); one abandoned past it fails as the store's.

The footers of the most recently used files are kept, so that a lookup in one of them
reads only its row group.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.fs import DeltaStorageHandler

from cold_store.delta.boundary import MISSING, STORE_ERRORS, Damaged, raise_store_error
from cold_store.delta.deadline import Deadline
from cold_store.errors import StoreUnavailable
from cold_store.publish import publish

_FETCH_THREADS = 8
FOOTERS_KEPT = 512
"""Footers kept per table (the most recently used), so that a lookup in one of those
files reads only its row group."""
_TAIL = 64 * 1024
"""What pyarrow reads first of a file's end to find its footer."""
_WHOLE = 1024 * 1024
"""A file up to this size is fetched whole when its keys are read (one request)."""
_DECODE_ERRORS = (*STORE_ERRORS, IndexError, KeyError, ValueError)

_T = TypeVar("_T")

KeysOfFile = tuple[list[str], list[int], frozenset[str], pq.FileMetaData]
"""A file's keys in file order, rows per row group, columns, and footer."""


class _Fetched:
    """A file of ``size`` bytes of which only some ranges were fetched, as a file object
    for pyarrow: it reads within those ranges only."""

    def __init__(self, size: int, ranges: list[tuple[int, bytes]]) -> None:
        self._size = size
        self._ranges = ranges
        self._pos = 0
        self.closed = False

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else self._pos + pos if whence == 1 else self._size + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        n = self._size - self._pos if n < 0 else n
        for start, data in self._ranges:
            if start <= self._pos and self._pos + n <= start + len(data):
                out = data[self._pos - start : self._pos - start + n]
                self._pos += n
                return out
        raise ValueError(f"bytes {self._pos}-{self._pos + n} were not fetched")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True

    def file(self) -> pa.NativeFile:
        return pa.PythonFile(self, mode="r")


def _span(column: Any) -> tuple[int, int]:
    """(start, end) of one column chunk in its file."""
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    return int(start), int(start + column.total_compressed_size)


def row_group_span(footer: pq.FileMetaData, group: int) -> tuple[int, int]:
    meta = footer.row_group(group)
    spans = [_span(meta.column(i)) for i in range(meta.num_columns)]
    return min(s for s, _e in spans), max(e for _s, e in spans)


def _keys_of(handle: pq.ParquetFile, key: str) -> KeysOfFile:
    keys = handle.read(columns=[key], use_threads=False).column(key).to_pylist()
    meta = handle.metadata
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return keys, groups, frozenset(handle.schema_arrow.names), meta


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
        deadline: Deadline,
    ) -> None:
        self.uri = uri
        self._deadline = deadline
        self.key = key
        self._options = dict(options)
        self._sizes = sizes
        self._lock = lock
        self._local: pafs.FileSystem | None = None
        self._store: DeltaStorageHandler | None = None
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()

    @property
    def remote(self) -> bool:
        return "://" in self.uri

    @property
    def fs(self) -> pafs.FileSystem:
        """The table's files for pyarrow (a local folder only)."""
        if self._local is None:
            self._local = pafs.SubTreeFileSystem(self.uri, pafs.LocalFileSystem())
        return self._local

    def _handler(self) -> DeltaStorageHandler:
        if self._store is None:
            try:
                self._store = DeltaStorageHandler(
                    self.uri, self._options, known_sizes=self._sizes()
                )
            except STORE_ERRORS as exc:
                raise_store_error(exc, f"opening {self.uri}")
        return self._store

    def files_changed(self) -> None:
        """New files are known: the object store's handle is made again with their
        sizes (opening a file then costs no request)."""
        self._store = None

    def forget(self, path: str) -> None:
        with self._lock:
            self._footers.pop(path, None)

    # ---- fetching bytes (object store) ------------------------------------------------
    def _fetch(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, bytes]]:
        """The bytes of ``ranges`` of a file, one ranged GET each (in parallel)."""
        handler = self._handler()

        def get(start: int, end: int) -> bytes:
            with handler.open_input_file(path) as handle:
                data: bytes = handle.read_at(end - start, start)
            return data

        def one(span: tuple[int, int]) -> tuple[int, bytes]:
            start, end = span
            data = self._deadline.run(lambda: get(start, end), f"reading {self.uri}/{path}")
            if len(data) != end - start:
                raise OSError(f"{path}: {len(data)} bytes fetched where {end - start} were asked")
            return start, data

        if len(ranges) == 1:
            return [one(ranges[0])]
        with ThreadPoolExecutor(min(_FETCH_THREADS, len(ranges))) as pool:
            return list(pool.map(one, ranges))

    def _judged(
        self,
        path: str,
        fetch: Callable[[], list[tuple[int, bytes]]],
        decode: Callable[[_Fetched], _T],
        what: str,
    ) -> _T | Damaged:
        """Fetch, then decode; see the module's docstring for who is to blame."""
        size = self._sizes().get(path)
        for attempt in (1, 2):
            try:
                ranges = fetch()
            except FileNotFoundError:
                return Damaged(MISSING)
            except STORE_ERRORS as exc:
                info = self.file_info(path)  # the store not answering raises here
                if info.type == pafs.FileType.NotFound:
                    return Damaged(MISSING)
                if size is not None and info.size != size:
                    return Damaged(f"{what}: {info.size} bytes where {size} were committed")
                if attempt == 2:
                    raise StoreUnavailable(f"reading {self.uri}/{path}: {exc}") from exc
                continue
            try:
                return decode(_Fetched(size if size is not None else 0, ranges))
            except _DECODE_ERRORS as exc:
                return Damaged(f"{what}: {exc}")
        raise AssertionError("unreachable")

    def _tail(self, path: str) -> list[tuple[int, bytes]]:
        """The end of a file holding its whole footer: what pyarrow reads first, or more
        when the footer is longer."""
        size = self._sizes()[path]
        ranges = self._fetch(path, [(max(0, size - _TAIL), size)])
        data = ranges[0][1]
        if len(data) >= 8 and data[-4:] == b"PAR1":
            footer = int.from_bytes(data[-8:-4], "little") + 8
            if len(data) < footer <= size:
                ranges = self._fetch(path, [(size - footer, size)])
        return ranges

    # ---- reads, judged ------------------------------------------------------------------
    def _read_local(self, path: str, read: Callable[[], _T], what: str) -> _T | Damaged:
        """``read()`` of a local file.  pyarrow raises ``OSError`` both for bytes it
        cannot decode and for a disk that fails, so after one the file itself is looked
        at: missing, or failing a second read, it is damaged."""
        for attempt in (1, 2):
            try:
                return read()
            except FileNotFoundError:
                return Damaged(MISSING)
            except (pa.ArrowInvalid, IndexError, KeyError) as exc:
                return Damaged(f"{what}: {exc}")
            except STORE_ERRORS as exc:
                if self.file_info(path).type == pafs.FileType.NotFound:
                    return Damaged(MISSING)
                if attempt == 2:
                    return Damaged(f"{what}: {exc}")
        raise AssertionError("unreachable")

    def footer(
        self, path: str, what: str = "unreadable", kept: bool = True
    ) -> pq.FileMetaData | Damaged:
        """A file's footer, kept for the next lookups (``kept=False``: read again)."""
        with self._lock:
            known = self._footers.get(path) if kept else None
            if known is not None:
                self._footers.move_to_end(path)
                return known
        if self.remote:
            got = self._judged(
                path,
                lambda: self._tail(path),
                lambda fetched: pq.ParquetFile(fetched.file(), pre_buffer=False).metadata,
                what,
            )
        else:
            got = self._read_local(path, lambda: pq.read_metadata(path, filesystem=self.fs), what)
        if not isinstance(got, Damaged):
            self.remember_footer(path, got)
        return got

    def row_group(self, path: str, group: int) -> pa.Table | Damaged:
        """One row group of a file: one request once the footer is known."""
        footer = self.footer(path)
        if isinstance(footer, Damaged):
            return footer
        if group >= footer.num_row_groups:
            return Damaged(f"unreadable: no row group {group}")

        def decode(source: pa.NativeFile | str, fs: pafs.FileSystem | None = None) -> pa.Table:
            handle = pq.ParquetFile(source, filesystem=fs, metadata=footer, pre_buffer=False)
            return handle.read_row_group(group, use_threads=False)

        if not self.remote:
            return self._read_local(path, lambda: decode(path, self.fs), "unreadable")
        span = row_group_span(footer, group)
        return self._judged(
            path, lambda: self._fetch(path, [span]), lambda f: decode(f.file()), "unreadable"
        )

    def table(self, path: str, columns: list[str] | None, what: str) -> pa.Table | Damaged:
        """A whole file, or some of its columns."""
        if not self.remote:
            return self._read_local(
                path,
                lambda: pq.read_table(
                    path, filesystem=self.fs, columns=columns, use_threads=False, pre_buffer=False
                ),
                what,
            )
        size = self._sizes()[path]
        return self._judged(
            path,
            lambda: self._fetch(path, [(0, size)]),
            lambda f: pq.read_table(f.file(), columns=columns, use_threads=False, pre_buffer=False),
            what,
        )

    def keys(self, paths: Sequence[str]) -> list[KeysOfFile | str]:
        """Each file's keys, row group sizes, columns and footer; a string where the file
        is unreadable.  Files are read in parallel on an object store."""

        def one(path: str) -> KeysOfFile | str:
            got = self._keys_of_file(path)
            return got.reason if isinstance(got, Damaged) else got

        if not self.remote or len(paths) <= 1:
            return [one(p) for p in paths]
        with ThreadPoolExecutor(min(_FETCH_THREADS, len(paths))) as pool:
            return list(pool.map(one, paths))

    def _keys_of_file(self, path: str) -> KeysOfFile | Damaged:
        if not self.remote:
            return self._read_local(
                path,
                lambda: _keys_of(
                    pq.ParquetFile(path, filesystem=self.fs, pre_buffer=False), self.key
                ),
                "unreadable",
            )
        size = self._sizes()[path]
        if size <= _WHOLE:
            return self._judged(
                path,
                lambda: self._fetch(path, [(0, size)]),
                lambda f: _keys_of(pq.ParquetFile(f.file(), pre_buffer=False), self.key),
                "unreadable",
            )
        footer = self.footer(path)
        if isinstance(footer, Damaged):
            return footer
        column = footer.schema.to_arrow_schema().get_field_index(self.key)
        spans = [_span(footer.row_group(g).column(column)) for g in range(footer.num_row_groups)]
        return self._judged(
            path,
            lambda: self._fetch(path, spans),
            lambda f: _keys_of(
                pq.ParquetFile(f.file(), metadata=footer, pre_buffer=False), self.key
            ),
            "unreadable",
        )

    def remember_footer(self, path: str, footer: pq.FileMetaData) -> None:
        with self._lock:
            self._footers[path] = footer
            self._footers.move_to_end(path)
            while len(self._footers) > FOOTERS_KEPT:
                self._footers.popitem(last=False)

    def read_bytes(self, path: str) -> bytes:
        """A whole file of the table (a log entry), or the store's error."""
        if not self.remote:
            with self.fs.open_input_stream(path) as handle:
                data: bytes = handle.read()
            return data
        handler = self._handler()

        def read() -> bytes:
            with handler.open_input_stream(path) as stream:
                whole: bytes = stream.read()
            return whole

        return self._deadline.run(read, f"reading {self.uri}/{path}")

    def _any_fs(self) -> pafs.FileSystem:
        return self.fs if not self.remote else pafs.PyFileSystem(self._handler())

    def listing(self, folder: str) -> list[str]:
        """The names of the files in ``folder`` of the table (none when it is absent)."""
        selector = pafs.FileSelector(folder, allow_not_found=True)
        fs = self._any_fs()
        infos = self._deadline.run(lambda: fs.get_file_info(selector), f"listing {folder}")
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Create a file of the table whole: on a folder through a temp name and a
        rename, so that a reader never sees part of it; on S3 by one PUT."""
        if not self.remote:

            def whole(handle: BinaryIO) -> None:
                handle.write(data)

            publish(Path(self.uri) / path, whole)
            return
        # deltalake's stream takes bytes, not the pyarrow buffers a NativeFile passes on
        handler = self._handler()

        def put() -> None:
            stream: Any = handler._handler.open_output_stream(path, None)
            try:
                stream.write(data)
            finally:
                stream.close()

        self._deadline.run(put, f"writing {self.uri}/{path}")

    def delete(self, path: str) -> None:
        fs = self._any_fs()
        self._deadline.run(lambda: fs.delete_file(path), f"deleting {self.uri}/{path}")

    def file_info(self, path: str) -> pafs.FileInfo:
        try:
            if not self.remote:
                return self.fs.get_file_info(path)
            handler = self._handler()
            (info,) = self._deadline.run(
                lambda: handler.get_file_info([path]), f"looking up {self.uri}/{path}"
            )
            return info
        except STORE_ERRORS as exc:
            raise_store_error(exc, f"reading {self.uri}/{path}")

    def close(self) -> None:
        """Drop every pyarrow object holding a file system: a Python-implemented one
        still alive when the interpreter tears pyarrow down can abort the process."""
        with self._lock:
            self._local = None
            self._store = None
            self._footers.clear()
