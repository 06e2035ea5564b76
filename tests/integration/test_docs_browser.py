"""The API's documentation pages render in a real browser with no network: headless
Chromium (Debian's ``chromium``, installed here with apt when it is missing) loads
``/docs`` and ``/redoc`` from a real ``sidecar serve`` while every host but the loopback
fails to resolve, and the rendered DOM holds the API's operations."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from tests.support.browser import OFFLINE, chromium
from tests.support.live import Server


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


class Page:
    """A page in headless Chromium, driven over the DevTools protocol (a click is a
    script's ``click()``, as a person's would be for the page's handlers)."""

    def __init__(self, browser: str, url: str, profile: Path) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--no-first-run",
                f"--user-data-dir={profile}",
                f"--host-resolver-rules={OFFLINE}",
                "--remote-debugging-port=0",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None and time.monotonic() < deadline, "no DevTools port"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        target = next(p for p in pages if p.get("type") == "page")
        from websockets.sync.client import connect

        self.ws = connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self._ids = 0

    def evaluate(self, expression: str) -> Any:
        self._ids += 1
        params = {"expression": expression, "awaitPromise": True, "returnByValue": True}
        self.ws.send(json.dumps({"id": self._ids, "method": "Runtime.evaluate", "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == self._ids:
                return message["result"].get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            assert time.monotonic() < deadline, f"never true: {expression}"
            time.sleep(0.2)
        return value

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


TYPE = """(() => {
  const input = document.querySelector('.auth-container input');
  const setter = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
  setter.call(input, %s);
  input.dispatchEvent(new Event('input', {bubbles: true}));
  return true;
})()"""
STATUS = "document.querySelector('.live-responses-table tbody .response-col_status')?.textContent"


def test_swagger_ui_authorizes_with_the_bearer_token_and_runs_a_request(
    browser: str, served: Server, tmp_path: Path
) -> None:
    """Authorize, paste the token, *Try it out* on ``GET /v1/tools``, *Execute*: the
    request carries the token and answers 200."""
    spec = httpx.get(f"{served.url}/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert spec["paths"]["/livez"]["get"]["security"] == []
    page = Page(browser, f"{served.url}/docs", tmp_path / "profile")
    try:
        page.wait_for("!!document.querySelector('.btn.authorize')")
        page.evaluate("document.querySelector('.btn.authorize').click()")
        page.wait_for("!!document.querySelector('.auth-container input')")
        page.evaluate(TYPE % json.dumps(served.token))
        page.evaluate("document.querySelector('.auth-btn-wrapper .authorize').click()")
        # authorized: the modal offers Logout, and closes
        page.wait_for("!!document.querySelector('.auth-btn-wrapper .btn-done')")
        page.evaluate("document.querySelector('.auth-btn-wrapper .btn-done').click()")
        operation = "#operations-tools-list_tools_v1_tools_get"
        page.evaluate(f"document.querySelector('{operation} .opblock-summary-control').click()")
        page.wait_for(f"!!document.querySelector('{operation} .try-out__btn')")
        page.evaluate(f"document.querySelector('{operation} .try-out__btn').click()")
        page.wait_for(f"!!document.querySelector('{operation} .execute')")
        page.evaluate(f"document.querySelector('{operation} .execute').click()")
        status = page.wait_for(STATUS)
        curl = page.evaluate(f"document.querySelector('{operation} .curl')?.textContent")
    finally:
        page.close()
    assert status.strip() == "200"
    assert "Authorization: Bearer" in curl
