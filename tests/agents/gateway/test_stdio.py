"""The gateway served over stdio to the ``mcp`` client, as a real subprocess: the
session is the process's one connection, reported when the client closes it.  A stdio
upstream's stderr reaches the gateway's own redacted, a line at a time."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

if TYPE_CHECKING:
    from mcp import StdioServerParameters

from sidecar.agents.gateway.proxy.stdio import MAX_STDERR_LINE, StderrLines, copy_stderr
from sidecar.trust.redact import MASK

ROOT = Path(__file__).resolve().parents[3]


def shown(*lines: str) -> list[str]:
    seen = StderrLines()
    return [seen.shown(line.encode()) for line in lines]


def test_an_upstreams_stderr_lines_are_redacted_with_what_the_lines_before_said() -> None:
    assert shown(
        "starting",
        "dsn postgresql://shop:Pw4UrlZx81Kq2Lm0Nb7V@db.internal/shop",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
        "-----END OPENSSH PRIVATE KEY-----",
        "ready",
    ) == [
        "starting",
        f"dsn postgresql://{MASK}@db.internal/shop",
        MASK,
        MASK,
        MASK,
        "ready",
    ]


def test_secrets_that_span_lines_are_masked_on_stderr_and_the_lines_around_them_kept() -> None:
    from tests.agents.gateway import stderr_shop

    log = "\n".join(shown(*stderr_shop.LINES))
    assert [secret for secret in stderr_shop.SECRETS if secret in log] == [], log
    assert [line for line in stderr_shop.KEPT if line not in log] == [], log


def test_copy_stderr_writes_each_line_redacted_and_a_long_one_as_a_note() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"-----BEGIN RSA PRIVATE KEY-----\nMIIEow"
        yield b"IBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"
        yield b"x" * (MAX_STDERR_LINE + 1) + b"\nbye\n"

    log = io.StringIO()
    anyio.run(copy_stderr, chunks(), log)
    assert log.getvalue().splitlines() == [
        MASK,
        MASK,
        MASK,
        f"[an upstream stderr line over {MAX_STDERR_LINE} bytes was dropped]",
        "bye",
    ]


def gateway(reports: Path, *upstream: str) -> StdioServerParameters:
    """The gateway over stdio in front of the shop (or the script ``upstream``)."""
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.agents.gateway.stdio_gateway", str(reports), *upstream],
        env={
            "PYTHONPATH": str(ROOT),
            **({"HOME": os.environ["HOME"]} if "HOME" in os.environ else {}),
        },
        cwd=str(ROOT),
    )


@pytest.mark.integration  # a real subprocess: the slow suite, not `make test-fast`
def test_stdio_session_is_reported_when_the_client_closes_it(tmp_path: Path) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    reports = tmp_path / "reports.jsonl"
    params = gateway(reports)

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
    # reported as the exchange failed (the session goes on), then when it was closed
    failed, report = [json.loads(line) for line in reports.read_text().splitlines()]
    assert failed["outcome"] == "unknown" and failed["steps"] == report["steps"]
    assert report["outcome"] == "abandoned"
    assert [s["tool"] for s in report["steps"]] == ["get_order", "exchange"]
    assert report["steps"][1]["error"].endswith("Non-delivered order cannot be exchanged")


@pytest.mark.integration
def test_an_upstreams_stderr_reaches_the_gateways_without_secrets_that_span_lines(
    tmp_path: Path,
) -> None:
    """A stdio upstream writes a PGP private key block, an AWS secret access key after
    its label and YAML values under their keys to its stderr; the gateway's stderr has
    the lines around them and none of their secret material."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    from tests.agents.gateway import stderr_shop

    errlog = tmp_path / "gateway.stderr"
    params = gateway(tmp_path / "reports.jsonl", stderr_shop.__file__)

    async def main() -> None:
        with errlog.open("w") as log:
            async with (
                stdio_client(params, errlog=log) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                assert "get_order" in [t.name for t in (await s.list_tools()).tools]
                with anyio.fail_after(30):  # copied as it comes: wait for the last
                    while stderr_shop.KEPT[-1] not in errlog.read_text():
                        await anyio.sleep(0.05)

    anyio.run(main)
    log = errlog.read_text()
    assert [line for line in stderr_shop.KEPT if line not in log] == [], log
    assert [secret for secret in stderr_shop.SECRETS if secret in log] == [], log
