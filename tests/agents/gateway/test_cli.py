"""``sidecar gateway`` as a user runs it: a real process on a fresh home.  An upstream
that cannot be reached is named with the reason, in one line, with the gateway's own
exit code; "serving" is printed only once the gateway serves; SIGTERM stops it as
SIGINT does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from sidecar.errors import EXIT_BLOCKED, EXIT_GATEWAY, EXIT_OK
from tests.agents.gateway.conftest import SHOP, TOKEN, free_port, mcp_session

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


def _serving_gateway(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [SIDECAR, *args, "gateway", "--port", "0", f"shop={sys.executable} {SHOP}"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    return proc, proc.stderr.readline()


async def _failing_session(url: str, order: str) -> None:
    async with mcp_session(url) as s:
        await s.call_tool("get_order", {"order_id": order})
        await s.call_tool("exchange", {"order_id": order, "item": "x"})
        await s.call_tool("report_outcome", {"outcome": "abandoned"})


def test_beside_a_running_server_the_gateway_goes_through_it(tmp_path: Path) -> None:
    """On a home a server owns, ``sidecar gateway`` sends its checks and its evidence to
    that server (as the other commands do); with ``--url`` from another home too: what
    it saw is in the server's one memory, attributed to the gateway."""
    from sidecar.app.home import server_url

    home, env = tmp_path / "home", _env(tmp_path)
    server = subprocess.Popen(
        [SIDECAR, "--home", str(home), "serve", "--port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started: list[subprocess.Popen[str]] = []
    try:
        for _ in range(600):
            if (url := server_url(home)) is not None:
                break
            assert server.poll() is None, "the server exited"
            time.sleep(0.1)
        assert url is not None
        beside, said = _serving_gateway(["--home", str(home)], env)
        started.append(beside)
        assert (
            said.startswith("sidecar gateway serving ") and f"memory: the sidecar at {url}" in said
        )
        anyio.run(_failing_session, said.split()[3], "#W1")
        other = ["--home", str(tmp_path / "elsewhere"), "--url", url]
        by_url, said = _serving_gateway(other, env)
        started.append(by_url)
        assert f"memory: the sidecar at {url}" in said, said
        anyio.run(_failing_session, said.split()[3], "#W2")
        listed = subprocess.run(
            [SIDECAR, "--home", str(home), "--json", "constraints", "list", "--all"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for proc in [*started, server]:
            proc.terminate()
            proc.wait(timeout=60)
            if proc.stderr is not None:
                proc.stderr.close()
    assert listed.returncode == 0, listed.stderr
    views = [v for v in json.loads(listed.stdout)["constraints"] if v["kind"] == "call"]
    rule = next(v for v in views if "status 'pending'" in v["rule"])
    assert rule["sessions"] == 2 and rule["sources"] == ["gateway"]


@pytest.mark.parametrize(
    ("entries", "extra", "says"),
    [
        (
            [{"name": "alice", "role": "agent", "token": f"  {TOKEN}  "}],
            {},
            "'local' and 'alice' are one token with two roles",
        ),
        (
            [
                {"name": "alice", "role": "agent", "token": "y" * 20},
                {"name": "bob", "role": "agent", "token": "y" * 20},
            ],
            {},
            "'alice' and 'bob' are the same token",
        ),
        (None, {"SIDECAR_TOKENS_FILE": "/nonexistent/tokens.json"}, "is not a file"),
    ],
    ids=["home-token-shared-with-an-agent", "one-token-two-entries", "missing-tokens-file"],
)
def test_tokens_that_are_not_each_ones_own_stop_the_gateway_at_start(
    tmp_path: Path, entries: list[dict[str, str]] | None, extra: dict[str, str], says: str
) -> None:
    """Before: the gateway read the tokens file without the home's token, so an agent's
    entry holding the home's token was let in as the home itself (its calls the
    gateway's own, not the agent's, and no ``forget --source alice`` could undo them)."""
    home = tmp_path / "home"
    home.mkdir()
    if entries is not None:
        (home / "tokens.json").write_text(json.dumps({"tokens": entries}))
    proc = subprocess.Popen(
        [SIDECAR, "--home", str(home), "gateway", "--port", "0", f"shop={sys.executable} {SHOP}"],
        env={**_env(tmp_path), **extra},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert not first.startswith("sidecar gateway serving"), first
        assert proc.wait(timeout=120) == 2, first  # ConfigError's exit code
        printed = first + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert says in printed and "Traceback" not in printed, printed
