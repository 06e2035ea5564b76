"""The gateway served over stdio to the ``mcp`` client, as a real subprocess: the
session is the process's one connection, reported when the client closes it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

# real servers and subprocesses: the slow suite, not `make test-fast`
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def test_stdio_session_is_reported_when_the_client_closes_it(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    reports = tmp_path / "reports.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.agents.gateway.stdio_gateway", str(reports)],
        env={
            "PYTHONPATH": str(ROOT),
            **({"HOME": os.environ["HOME"]} if "HOME" in os.environ else {}),
        },
        cwd=str(ROOT),
    )

    async def main() -> dict[str, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            names = [t.name for t in (await s.list_tools()).tools]
            looked = await s.call_tool("get_order", {"order_id": "#W2"})
            failed = await s.call_tool("exchange", {"order_id": "#W2", "item": "socks"})
            return {"names": names, "looked": looked, "failed": failed}

    out = anyio.run(main)
    assert out["names"] == [
        "get_order",
        "exchange",
        "slow",
        "trace_context",
        "crash",
        "upgrade",
        "report_outcome",
    ]
    assert out["looked"].structured_content == {"order_id": "#W2", "status": "pending"}
    assert out["failed"].is_error
    [report] = [json.loads(line) for line in reports.read_text().splitlines()]
    assert report["outcome"] == "abandoned"
    assert [s["tool"] for s in report["steps"]] == ["get_order", "exchange"]
    assert report["steps"][1]["error"].endswith("Non-delivered order cannot be exchanged")
