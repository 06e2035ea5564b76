"""The cold store: the abandoned-chain archive, under one location.

The location picks the backend, here and nowhere else:

=================================  ===================================================
``/srv/home/cold``, ``file:///…``  a folder of Parquet files with a SQLite key index
                                   per table (:mod:`cold_store.local`); one process
                                   writes it
``delta+file:///srv/cold``         a Delta table per logical table in a local folder
                                   (:mod:`cold_store.delta`)
``s3://bucket/prefix``             a Delta table per logical table on S3 or an S3-
                                   compatible server; endpoint and credentials come
                                   from ``s3`` (:class:`~cold_store.probe.S3Options`)
=================================  ===================================================

Delta tables may be written by several processes at once.  Before one is opened for
writing, the store is asked whether it refuses a second put-if-absent of one key
(:mod:`cold_store.probe`); one that does not is refused with :class:`UnsafeStore`.
Every call a Delta table makes into deltalake runs within ``call_deadline_s`` (see
:mod:`cold_store.delta.deadline`): one that has not returned by then is abandoned, and
the table fails or retries as its crash-safety rules say.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from cold_store import schemas
from cold_store.base import ColdTable, Maintenance, QuarantinedFile
from cold_store.delta import DEFAULT_CALL_DEADLINE_S, Deadline, DeltaColdTable
from cold_store.errors import BadLocation, ColdStoreError, PointerError
from cold_store.local import ParquetTable
from cold_store.probe import S3Options, probe_folder, probe_s3

SCHEME = "cold://"
TABLES = {
    "chains": (schemas.CHAINS, "chain_id"),
    "tools": (schemas.TOOLS, "record_id"),
}


def make_pointer(table: str, key: str) -> str:
    return f"{SCHEME}{table}/{key}"


def parse_pointer(pointer: str) -> tuple[str, str]:
    """``cold://<table>/<key>`` -> ``(table, key)``."""
    if not pointer.startswith(SCHEME):
        raise PointerError(pointer, f"must start with {SCHEME}")
    table, sep, key = pointer[len(SCHEME) :].partition("/")
    if not sep or not table or not key or "/" in key:
        raise PointerError(pointer, "expected cold://<table>/<id>")
    return table, key


def parse_location(location: str | Path) -> tuple[str, str]:
    """``(backend, where)``: ``("parquet", folder)``, ``("delta", folder)`` or
    ``("s3", "bucket/prefix")``."""
    if isinstance(location, Path):
        return "parquet", str(location)
    text = str(location)
    if "://" not in text:
        if not text:
            raise BadLocation(text, "empty")
        return "parquet", text
    url = urlparse(text)
    if url.scheme in ("file", "delta+file"):
        if url.netloc not in ("", "localhost"):
            raise BadLocation(text, "a file URL names no host: file:///absolute/path")
        if not url.path:
            raise BadLocation(text, "no folder")
        return ("parquet" if url.scheme == "file" else "delta"), unquote(url.path)
    if url.scheme == "s3":
        if not url.netloc:
            raise BadLocation(text, "no bucket: s3://bucket/prefix")
        return "s3", f"{url.netloc}/{url.path.strip('/')}".rstrip("/")
    raise BadLocation(text, "expected a folder, file://, delta+file:// or s3://")


class ColdStore:
    """Opens the cold tables at ``location``; resolves pointers to full records.

    ``chains``: abandoned chains (``cold://chains/<chain_id>``); ``tools``: evicted
    tools (``cold://tools/<record_id>``).
    """

    def __init__(
        self,
        location: str | Path,
        writable: bool = True,
        no_writer: Callable[[], bool] | None = None,
        s3: S3Options | None = None,
        call_deadline_s: float = DEFAULT_CALL_DEADLINE_S,
    ) -> None:
        """``writable=False`` opens every table read-only: nothing at ``location`` is
        created, indexed or moved; ``no_writer`` (the local backend) says whether no
        process writes the store now (see :class:`~cold_store.local.ParquetTable`);
        ``s3``: how to reach the store of an ``s3://`` location; ``call_deadline_s``:
        seconds a Delta table's call into deltalake may take before it is abandoned."""
        self.backend, where = parse_location(location)
        self.deadline = Deadline(call_deadline_s)
        self.writable = writable
        self.root: Path | None = None
        """The local folder, for the folder backends."""
        self._s3 = s3 or S3Options()
        self._tables: dict[str, ColdTable]
        if self.backend == "parquet":
            self.root = Path(where)
            self.location = str(self.root)
            self._tables = self._open_local(no_writer)
        else:
            self._tables = self._open_delta(where)
        self.chains = self._tables["chains"]
        self.tools = self._tables["tools"]

    def _open_local(self, no_writer: Callable[[], bool] | None) -> dict[str, ColdTable]:
        assert self.root is not None
        tables: dict[str, ColdTable] = {}
        for name, (schema, key) in TABLES.items():
            tables[name] = ParquetTable(
                self.root,
                name,
                schema,
                key=key,
                partition_by="archive_date",
                writable=self.writable,
                no_writer=no_writer,
            )
        return tables

    def _open_delta(self, where: str) -> dict[str, ColdTable]:
        options: dict[str, str] = {}
        if self.backend == "delta":
            self.root = Path(where).absolute()
            self.location = f"delta+file://{self.root}"
            base = str(self.root)
            if self.writable:
                self.root.mkdir(parents=True, exist_ok=True)
                probe_folder(self.root)
        else:
            bucket, _, prefix = where.partition("/")
            self.location = f"s3://{where}"
            base = self.location
            options = self._s3.storage_options()
            if self.writable:
                probe_s3(bucket, prefix, self._s3)
        tables: dict[str, ColdTable] = {}
        try:
            for name, (schema, key) in TABLES.items():
                tables[name] = DeltaColdTable(
                    f"{base}/{name}",
                    name,
                    schema,
                    key=key,
                    partition_by="archive_date",
                    storage_options=options,
                    writable=self.writable,
                    deadline=self.deadline,
                )
        except BaseException:
            for table in tables.values():
                table.close()
            raise
        return tables

    def table(self, name: str) -> ColdTable:
        return self._tables[name]

    def resolve(self, pointer: str) -> dict[str, Any]:
        table, key = parse_pointer(pointer)
        if table not in self._tables:
            raise PointerError(pointer, f"unknown table {table!r}")
        return self._tables[table].get(key)

    def verify(self, deep: bool = False) -> list[QuarantinedFile]:
        """Files of every table that are not what was published (see
        :meth:`ColdTable.verify`)."""
        return [q for t in self._tables.values() for q in t.verify(deep)]

    def check_footers(self) -> list[str]:
        """Check every data file's footer (see :meth:`ColdTable.check_footers`); returns the
        files found unreadable, as ``<table>/<file>``."""
        return [f"{name}/{rel}" for name, t in self._tables.items() for rel in t.check_footers()]

    def quarantined(self) -> list[QuarantinedFile]:
        return [q for t in self._tables.values() for q in t.quarantined()]

    def health(self) -> str:
        """``ok`` when the store takes writes now, else why not: a byte written to a new
        file in each folder (a table's own folder too: a store can fail below its root),
        or, on S3, the conditional-write probe passing."""
        if self.backend == "s3":
            bucket, _, prefix = self.location[len("s3://") :].partition("/")
            try:
                probe_s3(bucket, prefix, self._s3)
            except ColdStoreError as exc:
                return f"not writable: {exc}"
            return "ok"
        assert self.root is not None
        for folder in [self.root, *(self.root / name for name in self._tables)]:
            try:
                with tempfile.NamedTemporaryFile(dir=folder, prefix=".ready-") as handle:
                    handle.write(b"x")
                    handle.flush()  # a full disk refuses the byte, not the empty file
            except OSError as exc:
                return f"not writable: {exc.strerror} ({folder})"
        return "ok"

    # ---- maintenance: the caller runs these in one process at a time -----------------
    def compact(self) -> list[Maintenance]:
        return [t.compact() for t in self._tables.values()]

    def checkpoint(self) -> list[Maintenance]:
        return [t.checkpoint() for t in self._tables.values()]

    def vacuum(self, retention: timedelta | None = None) -> list[Maintenance]:
        return [t.vacuum(retention) for t in self._tables.values()]

    def close(self) -> None:
        for table in self._tables.values():
            with contextlib.suppress(ColdStoreError):
                table.close()
