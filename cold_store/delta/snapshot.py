"""The key cache kept across processes: a snapshot of key -> (file, row group, row),
written beside the table at each checkpoint, so that a process opening the table loads
its keys in one read instead of reading the key column of every data file.

``<table>/_key_index/<version>.parquet`` holds every key of the files of that version,
file after file, each in file order (one column, ``key``); the schema's metadata says
where each file's keys start and each file's size, rows per row group and columns.
Delta ignores folders whose name starts with ``_``.  A snapshot is only a cache: data
files never change, so its entries for the files the loaded version still names are
true; files committed since it was written are read as before, and a snapshot that is
missing, unreadable or of another table's files is ignored.  Maintenance (one process
at a time) writes it and keeps the two newest.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from cold_store.delta.boundary import STORE_ERRORS
from cold_store.delta.files import DataFiles
from cold_store.delta.keys import CachedFile, KeyCache
from cold_store.delta.log import FileFacts
from cold_store.errors import ColdStoreError

FOLDER = "_key_index"
KEPT = 2
_SCHEMA = pa.schema([pa.field("key", pa.string(), nullable=False)])


@dataclass(frozen=True)
class _FileEntry:
    start: int
    size: int
    groups: list[int]
    names: list[str]


def _name(version: int) -> str:
    return f"{version:020d}.parquet"


def write(files: DataFiles, cache: KeyCache) -> str:
    """Write the snapshot of ``cache`` (at ``cache.version``); returns its path.  Older
    snapshots beyond the newest :data:`KEPT` are deleted."""
    keys: list[str] = []
    meta: dict[str, dict[str, object]] = {}
    for path, entry in cache.readable_files():
        meta[path] = {
            "start": len(keys),
            "size": entry.size,
            "groups": entry.groups,
            "names": sorted(entry.names),
        }
        keys.extend(entry.keys)
    schema = _SCHEMA.with_metadata({"files": json.dumps(meta), "version": str(cache.version)})
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table([pa.array(keys, pa.string())], schema=schema), sink, compression="zstd")
    path = f"{FOLDER}/{_name(cache.version)}"
    files.write_bytes(path, sink.getvalue().to_pybytes())
    for old in files.listing(FOLDER)[:-KEPT]:
        with contextlib.suppress(*STORE_ERRORS):  # deleted by the next checkpoint
            files.delete(f"{FOLDER}/{old}")
    return path


def load(files: DataFiles, cache: KeyCache, current: dict[str, FileFacts], version: int) -> int:
    """Fill an empty ``cache`` from the newest snapshot written at ``version`` or before,
    for the files ``current`` still names; returns how many files it took (0: no
    usable snapshot)."""
    try:
        names = [n for n in files.listing(FOLDER) if n.endswith(".parquet")]
        usable = [n for n in names if n[:20].isdigit() and int(n[:20]) <= version]
        if not usable:
            return 0
        data = pq.read_table(pa.BufferReader(files.read_bytes(f"{FOLDER}/{usable[-1]}")))
        entries = {
            path: _FileEntry(int(e["start"]), int(e["size"]), list(e["groups"]), list(e["names"]))
            for path, e in json.loads(data.schema.metadata[b"files"]).items()
        }
    except (*STORE_ERRORS, ColdStoreError, KeyError, TypeError, ValueError):
        return 0  # only a cache: the files' own keys are read instead
    column = data.column("key")
    taken = 0
    for path, entry in sorted(entries.items(), key=lambda item: item[1].start):
        facts = current.get(path)
        rows = sum(entry.groups)
        if facts is None or facts.size != entry.size or entry.start + rows > len(column):
            continue  # compacted away since, or not this table's file
        keys = column.slice(entry.start, rows).to_pylist()
        cache.take(
            path, CachedFile(-1, entry.size, rows, keys, entry.groups, frozenset(entry.names))
        )
        taken += 1
    return taken
