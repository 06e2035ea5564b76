"""A real ``sidecar serve`` for the tests that talk to one over HTTP: started on a free
port it picks itself, its URL read from the home's ``server.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

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
