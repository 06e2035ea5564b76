"""A real ``sidecar serve`` for the tests that talk to one over HTTP: started on a free
port it picks itself, its URL read from the home's ``server.json``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

SCRIPT = str(Path(sys.executable).with_name("sidecar"))
STALL_S = 20.0
"""Longer than any request may take on the busiest machine; longer means a stall."""


def wait_for_url(home: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> str:
    """The URL a server started with ``--port 0`` serves, from the home's server.json."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            url = str(json.loads((home / "server.json").read_text())["url"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
            continue
        try:
            if httpx.get(f"{url}/livez", timeout=1).status_code == 200:
                return url
        except httpx.HTTPError:
            time.sleep(0.05)
    raise AssertionError("the server did not come up")


class Server:
    """A ``sidecar serve --port 0``: the server binds a free port itself (no bind-then-
    close race) and names its URL in the home's server.json."""

    def __init__(self, home: Path, *extra: str) -> None:
        """``extra``: more ``serve`` options (``--max-body 20000``)."""
        self.home = home
        self.env = {
            **os.environ,
            "SIDECAR_HOME": str(home),
            "SIDECAR_EMBEDDER": "hashing",
            "SIDECAR_EVICT_MIN_CHAINS": "1",
        }
        self.env.pop("SIDECAR_TOKEN", None)
        started = time.perf_counter()
        # a file, not a pipe: nobody reads a pipe while the server runs, and once its
        # 64 KiB fill up with request log lines, the server blocks on its next log line
        self.stderr_path = home.parent / f"server-{home.name}-{time.monotonic_ns()}.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [SCRIPT, "serve", "--port", "0", *extra],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self.url = wait_for_url(home, self.proc)
        self.port = int(self.url.rsplit(":", 1)[1])
        self.ready_s = time.perf_counter() - started
        self.token = (home / "token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._stderr.close()
        return self.stderr_path.read_text()


def serving(
    home: Path, settings: dict[str, str] | None = None
) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """``sidecar serve`` on ``home`` (its tokens file written) with ``settings`` (more
    ``SIDECAR_*`` variables), until the caller is done."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env |= {"SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing", **(settings or {})}
    env["SIDECAR_MODEL_CACHE"] = os.environ["SIDECAR_MODEL_CACHE"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [SCRIPT, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                if httpx.get(f"{url}/livez", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url, home, env
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def post(url: str, token: str, path: str, body: Any) -> httpx.Response:
    return httpx.post(
        f"{url}{path}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
