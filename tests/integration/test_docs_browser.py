"""The API's documentation pages render in a real browser with no network: headless
Chromium (Debian's ``chromium``, installed here with apt when it is missing) loads
``/docs`` and ``/redoc`` from a real ``sidecar serve`` while every host but the loopback
fails to resolve, and the rendered DOM holds the API's operations."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from tests.integration.test_live import Server

OFFLINE = "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
"""Chromium's resolver rule: no name resolves except the loopback (a CDN script fails)."""


def chromium() -> str:
    """The browser, installed with apt if it is missing; a skip with the reason when it
    cannot be had."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed, and apt-get cannot install it here (not root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:  # the package lists may be missing or stale
        subprocess.run(["apt-get", "update"], capture_output=True, env=env, timeout=900)
        done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    found = shutil.which("chromium")
    if not found:
        pytest.skip(f"chromium could not be installed with apt-get: {done.stderr[-300:]}")
    return found


@pytest.fixture(scope="module")
def browser() -> str:
    return chromium()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("docs") / "home"
    Sidecar.open(embedder=HashingEmbedder(), home=home).close()
    srv = Server(home)
    yield srv
    srv.stop()


def render(browser: str, url: str, profile: Path) -> str:
    """The DOM after the page's scripts ran (virtual time: no waiting on a clock)."""
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--host-resolver-rules={OFFLINE}",
            "--virtual-time-budget=20000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_network_is_closed_to_the_browser(browser: str, tmp_path: Path) -> None:
    """The control: a page that loads Swagger UI from its CDN gets nothing."""
    page = tmp_path / "cdn.html"
    page.write_text(
        '<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js">'
        "</script><p id=out></p><script>document.getElementById('out').textContent = "
        "'loaded: ' + typeof SwaggerUIBundle</script>"
    )
    dom = render(browser, page.as_uri(), tmp_path / "profile")
    assert "loaded: undefined" in dom


def test_swagger_ui_renders_every_operation_offline(
    browser: str, served: Server, tmp_path: Path
) -> None:
    dom = render(browser, f"{served.url}/docs", tmp_path / "profile")
    spec = httpx.get(f"{served.url}/openapi.json").json()
    for path in spec["paths"]:
        assert f'data-path="{path}"' in dom, path
    assert "opblock-summary-path" in dom


def test_redoc_renders_every_operation_offline(
    browser: str, served: Server, tmp_path: Path
) -> None:
    dom = render(browser, f"{served.url}/redoc", tmp_path / "profile")
    spec = httpx.get(f"{served.url}/openapi.json").json()
    operations = [op["operationId"] for item in spec["paths"].values() for op in item.values()]
    assert operations
    for op in operations:
        assert f"operation/{op}" in dom, op
