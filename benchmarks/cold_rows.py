"""A complete cold ``chains`` row, and processes started together: what the Delta stress
writers (:mod:`benchmarks.delta_stress`) and the cold store tests build on."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cold_store.schemas import CHAINS

ROOT = Path(__file__).resolve().parents[1]
DAY = "2024-05-01"


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
