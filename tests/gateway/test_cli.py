"""``sidecar gateway`` as a user runs it: a real process on a fresh home.  An upstream
that cannot be reached is named with the reason, in one line, with the gateway's own
exit code; "serving" is printed only once the gateway serves; SIGTERM stops it as
SIGINT does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from sidecar.errors import EXIT_BLOCKED, EXIT_GATEWAY, EXIT_OK
from tests.gateway.conftest import SHOP, TOKEN, free_port, mcp_session

pytestmark = pytest.mark.integration

SIDECAR = str(Path(sys.executable).with_name("sidecar"))


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SIDECAR_EMBEDDER": "hashing",
        "SIDECAR_TOKEN": TOKEN,
        "SIDECAR_MODEL_CACHE": str(tmp_path / "models"),
    }


def _gateway(tmp_path: Path, *upstreams: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SIDECAR, "--home", str(tmp_path / "home"), "gateway", "--port", "0", *upstreams],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("upstream", "says"),
    [
        (
            "shop=/nonexistent/mcp-server --stdio",
            "upstream shop unavailable: cannot start '/nonexistent/mcp-server --stdio': "
            "command not found",
        ),
        (
            f"shop={sys.executable} -c pass",
            "exited or closed its output before the MCP handshake (is it an MCP server "
            "speaking stdio?)",
        ),
        ("crm=http://127.0.0.1:{port}/mcp", "upstream crm unavailable: cannot connect to "),
    ],
    ids=["missing-command", "not-an-mcp-server", "refused-url"],
)
def test_an_unreachable_upstream_is_named_with_its_reason_and_its_own_exit_code(
    tmp_path: Path, upstream: str, says: str
) -> None:
    done = _gateway(tmp_path, upstream.format(port=free_port()))
    assert done.returncode == EXIT_GATEWAY != EXIT_BLOCKED
    assert says in done.stderr
    assert "Traceback" not in done.stderr and "serving" not in done.stderr
    assert done.stderr.startswith("sidecar: error: ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_serving_is_printed_once_it_serves_and_sigterm_stops_it_cleanly(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            SIDECAR,
            "--home",
            str(tmp_path / "home"),
            "gateway",
            "--port",
            "0",
            f"shop={sys.executable} {SHOP}",
        ],
        env=_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("sidecar gateway serving http://127.0.0.1:")
        url = line.split()[3]

        async def call() -> list[str]:
            # no retry loop: it said it serves, so it must answer now
            async with mcp_session(url) as s:
                await s.call_tool("get_order", {"order_id": "#W1"})
                await s.call_tool("exchange", {"order_id": "#W1", "item": "x"})
                return [t.name for t in (await s.list_tools()).tools]

        names = anyio.run(call)
        assert "exchange" in names
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == EXIT_OK
        rest = proc.stderr.read()
        assert "Traceback" not in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    # the session was concluded and reported before the process ended
    report = subprocess.run(
        [SIDECAR, "--home", str(tmp_path / "home"), "--json", "constraints", "list", "--all"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert "exchange" in report.stdout


NOISY = """
import runpy, sys
for line in {lines!r}:
    sys.stderr.write(line + "\\n")
sys.stderr.flush()
sys.argv = [{shop!r}]
runpy.run_path({shop!r}, run_name="__main__")
"""


def test_an_upstreams_stderr_reaches_the_gateways_log_redacted(tmp_path: Path) -> None:
    """An upstream that logs its connection string, a command line and a private key on
    stderr: before, the gateway handed it its own stderr, so they reached the gateway's
    log as written; now each line passes through the redactor."""
    secrets = {
        "url": "Pw4UrlZx81Kq2Lm0Nb7V",
        "sshpass": "Pw4SshYt62Rr9Qe3Wc5X",
        "login": "Pw4LogUi39Op1As7Df0G",
        "pem": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
    }
    lines = [
        "ctx-kept upstream starting",
        f"connecting to postgresql://shop:{secrets['url']}@db.internal:5432/shop",
        f"running sshpass -p {secrets['sshpass']} ssh deploy@10.0.0.5 uptime",
        f"login failed, password {secrets['login']} is invalid",
        "-----BEGIN PRIVATE KEY-----",
        secrets["pem"],
        "-----END PRIVATE KEY-----",
        "ctx-kept upstream ready",
    ]
    noisy = tmp_path / "noisy_shop.py"
    noisy.write_text(NOISY.format(lines=lines, shop=SHOP))
    proc = subprocess.Popen(
        [SIDECAR, "--home", str(tmp_path / "home"), "gateway", "--port", "0",
         f"shop={sys.executable} {noisy}"],
        env=_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        while not (seen and seen[-1].startswith("sidecar gateway serving")):
            line = proc.stderr.readline()
            assert line, "".join(seen)
            seen.append(line)
        url = seen[-1].split()[3]

        async def call() -> None:
            async with mcp_session(url) as s:
                await s.call_tool("get_order", {"order_id": "#W1"})

        anyio.run(call)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == EXIT_OK
        log = "".join(seen) + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert log.count("ctx-kept upstream") == 2, log  # the upstream's lines came through
    leaked = [name for name, value in secrets.items() if value in log]
    assert not leaked, log
    assert "db.internal:5432/shop" in log and "[REDACTED]" in log
