"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, npm; Node
22) against an upstream directly and through ``sidecar gateway``, for each protocol
revision's requirement set (2025-11-25, 2026-07-28): the gateway must pass every
scenario the upstream passes on its own.

Two upstreams: ``@modelcontextprotocol/server-everything`` (the reference server), and
``fixtures_server.py``, which holds the fixtures the suite's scenarios call (so that its
checks of logging, progress, sampling and elicitation during a call have something to
check).  Node 22 and the packages are installed once into pytest's cache folder from the
npm registry; where that cannot be done the test is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.agents.gateway.conftest import free_port

pytestmark = pytest.mark.integration

CONFORMANCE = "0.2.0-alpha.12"
"""The first release that scores a server against each protocol revision's requirement
set (``--requirements 2025-11-25``, ``--requirements 2026-07-28``)."""
PACKAGES = (
    "node@22",
    f"@modelcontextprotocol/conformance@{CONFORMANCE}",
    "@modelcontextprotocol/server-everything@2026.8.31",
)
REVISIONS = ("2025-11-25", "2026-07-28")
"""The protocol revisions the gateway serves clients of: the handshake era's, and the
stateless one's (no ``Mcp-Session-Id``)."""
FIXTURES = str(Path(__file__).with_name("fixtures_server.py"))
SIDECAR = str(Path(sys.executable).with_name("sidecar"))


@dataclass(frozen=True)
class Node:
    node: Path
    root: Path

    @property
    def conformance(self) -> Path:
        return self.root / "node_modules/@modelcontextprotocol/conformance/dist/index.js"

    @property
    def everything(self) -> Path:
        return self.root / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"


def _node_22(node: Path) -> bool:
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.startswith("v22.")


@pytest.fixture(scope="module")
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Node:
    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir("mcp-conformance")) if cache else tmp_path_factory.mktemp("npm")
    found = Node(root / "node_modules/node/bin/node", root)
    cached = _node_22(found.node) and _version(found.conformance) == CONFORMANCE
    if cached and found.everything.exists():
        return found
    npm, system_node = shutil.which("npm"), shutil.which("node")
    if npm is None or system_node is None:
        pytest.skip("Node 22 cannot be installed here: npm (and node to run it) not on PATH")
    try:
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(root), *PACKAGES],
            check=True,
            capture_output=True,
            timeout=900,
        )
        # npm leaves out the node package's own install step, which fetches the binary
        subprocess.run(
            [system_node, "installArchSpecificPackage.js"],
            cwd=root / "node_modules/node",
            check=True,
            capture_output=True,
            timeout=900,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"Node 22 cannot be installed here: {exc} {detail.decode()[-300:]}")
    if not _node_22(found.node):
        pytest.skip("Node 22 cannot be installed here: the installed node is not 22")
    return found


def _version(entry: Path) -> str | None:
    """The version of the npm package whose ``dist/index.js`` is ``entry``."""
    manifest = entry.parent.parent / "package.json"
    if not manifest.exists():
        return None
    return str(json.loads(manifest.read_text()).get("version"))


def _wait_http(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            assert proc.poll() is None, f"{what} exited"
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.1)


@contextlib.contextmanager
def _running(argv: list[str], url: str, what: str, env: dict[str, str]) -> Iterator[str]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(url, proc, what)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _gateway(upstream: str, home: Path) -> tuple[list[str], str]:
    port = free_port()
    argv = [SIDECAR, "--home", str(home), "gateway", "--port", str(port), "--no-token", upstream]
    return argv, f"http://127.0.0.1:{port}/mcp"


def _suite(node: Node, url: str, out: Path, revision: str) -> dict[str, bool]:
    """Every server scenario ``revision`` requires, against ``url``: scenario -> passed."""
    subprocess.run(
        [str(node.node), str(node.conformance), "server", "--url", url, "-o", str(out),
         "--requirements", revision],
        capture_output=True,
        timeout=900,
    )  # fmt: skip
    passed: dict[str, bool] = {}
    for checks in sorted(out.glob("server-*/checks.json")):
        scenario = checks.parent.name.removeprefix("server-").rsplit("-", 6)[0]
        statuses = [c["status"] for c in json.loads(checks.read_text())]
        passed[scenario] = "SUCCESS" in statuses and not {"FAILURE", "WARNING"} & set(statuses)
    assert len(passed) >= 25, f"the suite ran {len(passed)} scenarios"
    return passed


def _env() -> dict[str, str]:
    return {**os.environ, "SIDECAR_EMBEDDER": "hashing"}


def _compare(direct: dict[str, bool], through: dict[str, bool]) -> None:
    lost = sorted(s for s, ok in direct.items() if ok and not through.get(s, False))
    score = f"direct {sum(direct.values())}/{len(direct)}, gateway {sum(through.values())}/"
    print(f"conformance: {score}{len(through)}; lost through the gateway: {lost or 'none'}")
    assert not lost, f"{score}{len(through)}: lost {lost}"


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_reference_server_keeps_its_score_through_the_gateway(
    node: Node, tmp_path: Path, revision: str
) -> None:
    port = free_port()
    direct_url = f"http://127.0.0.1:{port}/mcp"
    argv = [str(node.node), str(node.everything), "streamableHttp"]
    with _running(argv, direct_url, "server-everything", {**_env(), "PORT": str(port)}):
        direct = _suite(node, direct_url, tmp_path / "direct", revision)
    upstream = f"everything={node.node} {node.everything} stdio"
    argv, url = _gateway(upstream, tmp_path / "home")
    with _running(argv, url, "the gateway", _env()):
        through = _suite(node, url, tmp_path / "gateway", revision)
    _compare(direct, through)
    # what the reference server offers is relayed: lists, subscriptions, logging
    for scenario in ("resources-list", "resources-subscribe", "prompts-list", "logging-set-level"):
        assert through[scenario], scenario


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_suites_fixtures_keep_their_score_through_the_gateway(
    node: Node, tmp_path: Path, revision: str
) -> None:
    port = free_port()
    direct_url = f"http://127.0.0.1:{port}/mcp"
    argv = [sys.executable, FIXTURES, "--http", str(port)]
    with _running(argv, direct_url, "the fixtures server", _env()):
        direct = _suite(node, direct_url, tmp_path / "direct", revision)
    argv, url = _gateway(f"fixtures={sys.executable} {FIXTURES}", tmp_path / "home")
    with _running(argv, url, "the gateway", _env()):
        through = _suite(node, url, tmp_path / "gateway", revision)
    _compare(direct, through)
    # the requests and notifications an upstream sends during a call reach the client
    for scenario in (
        "tools-call-with-logging",
        "tools-call-with-progress",
        "tools-call-sampling",
        "tools-call-elicitation",
        "completion-complete",
        "resources-templates-read",
    ):
        assert through[scenario], scenario
