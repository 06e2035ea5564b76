"""Row builders and file helpers shared by the cold store tests."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cold_store.publish import publish
from cold_store.schemas import CHAINS

ROOT = Path(__file__).resolve().parents[2]
DAY = "2024-05-01"
OTHER_DAY = "2024-05-02"

# A small custom table: a key, a partition column and a value.
SMALL = pa.schema(
    [
        pa.field("k", pa.string(), nullable=False),
        pa.field("p", pa.string(), nullable=False),
        pa.field("v", pa.int64()),
    ]
)


def chain_row(chain_id: str, archive_date: str = DAY, **overrides: Any) -> dict[str, Any]:
    """A ``chains`` row with every column of :data:`cold_store.schemas.CHAINS` filled."""
    n = sum(chain_id.encode())  # varies the values per row, deterministically
    row: dict[str, Any] = {
        "chain_id": chain_id,
        "archive_date": archive_date,
        "archived_at": datetime(2024, 5, 1, 12, 30, 15, 123456 + n % 1000, tzinfo=UTC),
        "reported_at": datetime(2024, 5, 1, 12, 29, 59, n % 1000, tzinfo=UTC),
        "session_id": f"session-{chain_id}",
        "topology": ["search", "fetch", f"write-{chain_id}"],
        "tool_types": ["http", "fs"],
        "terminal_signature": f"TimeoutError:{chain_id}",
        "failure_kind": "timeout",
        "classification": "transient",
        "error_json": '{"message":"timed out"}',
        "rule": "never",
        "condition_json": '{"gapped":false,"when":[]}',
        "gapped": n % 2 == 0,
        "tool_snapshots_json": '{"fetch":{"version":"1.2"}}',
        "credentials_json": "{}",
        "logs_json": '["step 1","step 2"]',
        "occurrences": 3 + n,
        "record_version": 2,
        "source": "steps" if n % 2 else "chain",
        "normalized_signature": f"TimeoutError:<id>-{n % 3}",
        "steps_json": '[{"tool":"search","arguments":{"q":"x"},"output":"ok","error":null}]',
        "task_input": f"task {n}",
        "conditions_json": "[]",
    }
    row.update(overrides)
    assert set(row) == set(CHAINS.names)
    return row


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


def run_together(commands: list[list[str]], timeout: float = 1800) -> list[str]:
    """Start one process per command (each prints ``ready``, then waits for a line on
    stdin), let them all go at once, and return the last line each printed; every one
    must exit 0."""
    procs = [
        subprocess.Popen(
            [sys.executable, *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for command in commands
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=timeout)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    codes = [p.returncode for p in procs]
    assert codes == [0] * len(procs), f"a process failed: {codes}"
    return [out.strip().splitlines()[-1] for out in outputs]
