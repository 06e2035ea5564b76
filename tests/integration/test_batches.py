"""A CLI command beside a running server, with inputs of any size: a real ``sidecar
serve`` with a small body limit, and files many times that size.  The command splits
them into requests under the limit the server states; one item over the limit alone is
rejected (a report) or is its own error (exit 10), never "unreachable or wrong token"."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from tests.support.live import SCRIPT, Server

LIMIT = 20_000


def session(n: int, filler: int = 1_000) -> dict[str, object]:
    """A failing session of about ``filler`` bytes."""
    return {
        "steps": [
            {"tool": "get_order", "arguments": {"order_id": f"#W{n}"},
             "output": {"status": "pending", "note": "x" * filler}, "error": None},
            {"tool": "exchange", "arguments": {"order_id": f"#W{n}"}, "output": None,
             "error": "Error: Non-delivered order cannot be exchanged"},
        ],
        "outcome": "abandoned",
        "session_id": f"s{n}",
    }  # fmt: skip


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("batches") / "home"
    Sidecar.open(embedder=HashingEmbedder(), home=home).close()
    srv = Server(home, "--max-body", str(LIMIT))
    yield srv
    srv.stop()


def cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], env=server.env, capture_output=True, text=True, timeout=300
    )


def requests_to(server: Server, path: str) -> int:
    log = server.stderr_path.read_text()
    return sum(f'"path": "{path}"' in line for line in log.splitlines())


def test_the_server_states_its_body_limit(small: Server) -> None:
    version = httpx.get(f"{small.url}/version", headers=small.headers).json()
    assert version["max_body_bytes"] == LIMIT


def test_a_report_file_many_times_the_limit_goes_in_batches(small: Server, tmp_path: Path) -> None:
    reports = tmp_path / "reports.jsonl"
    lines = [json.dumps(session(n)) for n in range(60)]
    lines.insert(30, json.dumps(session(999, filler=3 * LIMIT)))  # over the limit alone
    reports.write_text("\n".join(lines) + "\n")
    assert reports.stat().st_size > 4 * LIMIT
    before = requests_to(small, "/v1/reports")
    proc = cli(small, "report", str(reports))  # no --url: the home's server
    assert proc.returncode == 4, proc.stderr  # the one over the limit was rejected
    out = proc.stdout.splitlines()
    assert out[0].startswith("line 31: rejected - ")
    assert f"over the {LIMIT}-byte request limit of the sidecar at {small.url}" in out[0]
    assert out[-1] == "61 report(s): 60 archived, 0 recorded, 0 not archived, 1 rejected"
    assert requests_to(small, "/v1/reports") - before >= 4  # 60 KB in 20 KB bodies
    status = httpx.get(f"{small.url}/v1/archive/status", headers=small.headers).json()
    assert status["chains"] >= 1


def test_tools_go_in_batches_too(small: Server, tmp_path: Path) -> None:
    tools = tmp_path / "tools.jsonl"
    tools.write_text(
        "".join(
            json.dumps({"tool_id": f"tool_{i:03d}", "description": f"tool {i} " + "y" * 150}) + "\n"
            for i in range(300)
        )
    )
    before = requests_to(small, "/v1/tools")
    proc = cli(small, "tools", "add", str(tools), "--url", small.url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "300 tool(s) added, 0 updated"
    assert requests_to(small, "/v1/tools") - before >= 3
    listed: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:  # the listing comes a page at a time
        params = {"cursor": cursor} if cursor else {}
        page = httpx.get(f"{small.url}/v1/tools", headers=small.headers, params=params).json()
        listed += page["tools"]
        if not (cursor := page.get("next_cursor")):
            break
    assert len([t for t in listed if t["tool_id"].startswith("tool_")]) == 300


def test_a_request_over_the_limit_is_its_own_error(small: Server, tmp_path: Path) -> None:
    steps = tmp_path / "steps.json"
    body = session(1, filler=2 * LIMIT)
    steps.write_text(json.dumps({**body, "next": {"tool": "exchange", "arguments": {}}}))
    proc = cli(small, "check", "--steps", str(steps))
    assert proc.returncode == 10, proc.stderr
    assert f"the sidecar at {small.url} refused the request: request body over {LIMIT}" in (
        proc.stderr
    )
    assert "--max-body" in proc.stderr and "token" not in proc.stderr


def test_a_terminal_gets_a_progress_bar(small: Server, tmp_path: Path) -> None:
    reports = tmp_path / "reports.jsonl"
    reports.write_text("".join(json.dumps(session(100 + n)) + "\n" for n in range(40)))
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [SCRIPT, "report", str(reports)],
            env=small.env,
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            timeout=300,
        )
        os.close(follower)
        follower = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other side is closed: all read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert proc.returncode == 0
    assert b"] 40/40 reports" in drawn and drawn.rstrip().endswith(b"40/40 reports")
    assert b"\r[" in drawn  # redrawn in place
    assert proc.stdout == "40 report(s): 40 archived, 0 recorded, 0 not archived, 0 rejected\n"
