"""Steps files in one shape: what ``python -m benchmarks.tau2 steps`` writes is what
``sidecar check --steps`` and ``POST /v1/check`` take as it stands, on a synthetic
τ²-shaped dataset (shop runs: three refused exchanges, twenty that went through, and
a held-out one; the real data lives outside the repository)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.shells.api import create_app

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(sys.executable).with_name("sidecar"))
REFUSED = "Error: Non-delivered order cannot be exchanged"
TOKEN = "steps-file-token-0123456789"


def flat_run(n: int, task: str, order: str, status: str) -> dict[str, Any]:
    """One run as ``trajectories_flat.jsonl`` holds it: read the order, then exchange."""
    exchanged = status == "delivered"
    calls = [
        {"requestor": "assistant", "name": "get_order_details", "msg_idx": 1,
         "args": {"order_id": order}, "output": {"order_id": order, "status": status},
         "error": False},
        {"requestor": "assistant", "name": "exchange_delivered_order_items", "msg_idx": 3,
         "args": {"order_id": order, "item_ids": ["1"], "new_item_ids": ["2"]},
         "output": {"order_id": order} if exchanged else REFUSED, "error": not exchanged},
    ]  # fmt: skip
    return {"sim_id": f"sim-{n}", "domain": "retail", "task_id": task, "calls": calls,
            "agent_model": "ft-agent", "reward": 1.0 if exchanged else 0.0}  # fmt: skip


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "datasets"
    flat = folder / "tau2-trajectories" / "trajectories_flat.jsonl"
    flat.parent.mkdir(parents=True)
    runs = [
        flat_run(0, "1", "#W1", "pending"),
        flat_run(1, "2", "#W2", "pending"),
        flat_run(2, "3", "#W5", "pending"),
        *(flat_run(n, str(n), f"#W{n}", "delivered") for n in range(10, 30)),
        flat_run(3, "4", "#W4", "pending"),  # the held-out task
    ]
    flat.write_text("".join(json.dumps(r) + "\n" for r in runs))
    return folder


def tau2(dataset: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.tau2", *args, "--dataset", str(dataset)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def sidecar(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing"}
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, timeout=300)


def test_what_tau2_steps_writes_every_check_takes(dataset: Path, tmp_path: Path) -> None:
    home, reports, steps = tmp_path / "home", tmp_path / "reports.jsonl", tmp_path / "steps.json"
    made = tau2(dataset, "reports", "--except-task", "retail/4", "--out", str(reports))
    assert made.returncode == 0 and made.stderr.strip() == f"wrote 23 report(s) to {reports}"
    reported = sidecar(home, "report", str(reports))
    assert reported.stdout.strip() == (
        "23 report(s): 3 archived, 20 recorded, 0 not archived, 0 rejected"
    ), reported.stderr
    until = "exchange_delivered_order_items"
    made = tau2(dataset, "steps", "--task", "retail/4", "--until", until, "--out", str(steps))
    assert made.returncode == 0, made.stderr
    body = json.loads(steps.read_text())
    assert set(body) == {"steps", "task_input", "next", "what_happened"}
    assert body["next"]["tool"] == until and body["what_happened"] == REFUSED

    # the CLI: the file's `next` is the call checked
    checked = sidecar(home, "check", "--steps", str(steps))
    assert checked.returncode == 3, checked.stderr
    first = checked.stdout.splitlines()[0]
    assert first == f"BLOCK: {until}({json.dumps(body['next']['arguments'])})"
    # flags override: another tool (no arguments: the file's are for its own tool)
    other = sidecar(home, "check", "--steps", str(steps), "--next", "get_order_details")
    assert other.returncode == 0 and other.stdout.startswith("ALLOW: get_order_details({})")
    # --next alone, for the file's own tool, keeps the file's arguments
    same = sidecar(home, "check", "--steps", str(steps), "--next", until)
    assert same.returncode == 3 and same.stdout.splitlines()[0] == first
    # --args alone replaces the file's arguments of the file's tool
    args = sidecar(home, "check", "--steps", str(steps), "--args", '{"order_id": "#W3"}')
    assert args.stdout.splitlines()[0].endswith(f': {until}({{"order_id": "#W3"}})')

    # HTTP: the same file is a request body as it stands
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=home) as sc,
        TestClient(create_app(sc, TOKEN, with_mcp=False), base_url="http://127.0.0.1") as http,
    ):
        answer = http.post(
            "/v1/check", content=steps.read_bytes(), headers={
                "Authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert answer.json()["decision"] == "block"
        # a field nobody documented is still refused, and says which
        refused = http.post(
            "/v1/check", json={**body, "extra": 1}, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert refused.status_code == 422 and "extra" in refused.json()["error"]["message"]


def test_a_steps_file_with_no_next_and_no_flag_is_a_usage_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    Sidecar.open(embedder=HashingEmbedder(), home=home).close()
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps({"steps": [{"tool": "get_order_details", "arguments": {}}]}))
    proc = sidecar(home, "check", "--steps", str(steps))
    assert proc.returncode == 2
    assert f"{steps} has no `next` (the call to check): give --next TOOL" in proc.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"steps": [], "next": "exchange"}))
    proc = sidecar(home, "check", "--steps", str(bad))
    assert proc.returncode == 2 and "`next` must be" in proc.stderr
    assert sidecar(home, "check", "a,b", "--args", "{}").returncode == 2
    both = sidecar(home, "check", "a,b", "--steps", str(steps))
    assert both.returncode == 2 and "not both" in both.stderr


def test_tau2_help_explains_each_subcommand() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.tau2", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0
    for words in ("tools:", "reports:", "steps:", "--out FILE", "--except-task", "--until"):
        assert words in proc.stdout, words
