"""Row builders and file helpers shared by the cold store tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.cold_rows import DAY, chain_row, run_together
from cold_store.publish import publish
from cold_store.schemas import CHAINS

if TYPE_CHECKING:
    from tests.cold_store.backends import Backend

__all__ = [
    "DAY",
    "OTHER_DAY",
    "SMALL",
    "all_files",
    "chain_row",
    "corrupt",
    "parquet_files",
    "run_together",
    "tear",
    "write_parquet",
]

ROOT = Path(__file__).resolve().parents[2]
OTHER_DAY = "2024-05-02"

# A small custom table: a key, a partition column and a value.
SMALL = pa.schema(
    [
        pa.field("k", pa.string(), nullable=False),
        pa.field("p", pa.string(), nullable=False),
        pa.field("v", pa.int64()),
    ]
)


def parquet_files(folder: Path) -> list[Path]:
    """Every ``*.parquet`` under ``folder``, dot-prefixed ones included, sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(".parquet"))


def all_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def write_parquet(
    path: Path, rows: list[dict[str, Any]], schema: pa.Schema = CHAINS, row_group_size: int = 1024
) -> None:
    """Publish a Parquet file directly, bypassing the table (as a crashed writer would)."""
    table = pa.Table.from_pylist(rows, schema=schema)
    publish(path, lambda handle: pq.write_table(table, handle, row_group_size=row_group_size))


def corrupt(path: Path) -> None:
    """Overwrite a file's bytes with garbage of the same length."""
    size = path.stat().st_size
    path.write_bytes(b"\xde\xad\xbe\xef" * (size // 4 + 1))


def tear(path: Path) -> None:
    """Cut a file in half, as a crash during an in-place write would."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def run_writers(backend: Backend, workers: int, batches: int, size: int) -> list[list[str]]:
    """Start ``workers`` writer processes on the backend's store, let them all go at
    once, and return what each reported written."""
    endpoint = backend.server.endpoint if backend.server is not None else "-"
    args = [backend.location, endpoint]
    commands = [
        ["-m", "tests.cold_store.writer", *args, str(w), str(batches), str(size)]
        for w in range(workers)
    ]
    return [json.loads(line)["written"] for line in run_together(commands, timeout=300)]
