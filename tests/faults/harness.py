"""Real processes on real homes: a ``sidecar serve --port 0`` that can be SIGKILLed and
started again, the CLI as a subprocess, and the small worlds the scenarios start from.

Everything runs with the hashing embedder (``SIDECAR_EMBEDDER=hashing``) and small
catalogs, so that a scenario costs seconds; the moves and the stores under test are the
real ones (Chroma, Parquet, SQLite, ``flock``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.model import CredentialRef
from tests.sidecar.helpers import abandoned

SCRIPT = str(Path(sys.executable).with_name("sidecar"))
UP_S = 120.0
"""Longest a server may take to come up on a busy machine."""


def env_for(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a sidecar process on ``home``: no setting of the developer's
    shell, the hashing embedder, eviction after one dead end (the moves are under
    test, not the policy)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env.update(SIDECAR_HOME=str(home), SIDECAR_EMBEDDER="hashing", SIDECAR_EVICT_MIN_CHAINS="1")
    env.update(extra)
    return env


def cli(
    home: Path,
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``sidecar ARGS`` on ``home`` (no ``--url``: it finds a server by itself)."""
    return subprocess.run(
        [SCRIPT, *args],
        env=dict(env) if env is not None else env_for(home),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


class Server:
    """``sidecar serve --port 0`` on ``home``; its URL comes from the home's
    ``server.json``.  ``python`` runs the server through ``python -c CODE`` instead of
    the console script (CODE must end by running :func:`sidecar.shells.cli.main`), for the
    scenarios that need to kill it at one exact step."""

    def __init__(
        self, home: Path, env: Mapping[str, str] | None = None, python: str | None = None
    ) -> None:
        self.home = home
        self.env = dict(env) if env is not None else env_for(home)
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: list[bytes] = []
        self.url = ""
        self.start()

    def start(self) -> None:
        (self.home / "server.json").unlink(missing_ok=True)  # a killed server leaves it
        argv = [sys.executable, "-c", self.python] if self.python else [SCRIPT]
        self.proc = subprocess.Popen(
            [*argv, "serve", "--port", "0"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # the request log goes to stderr: read it as it comes, as any supervisor does
        pipe = self.proc.stderr
        assert pipe is not None
        self.reader = threading.Thread(
            target=lambda: self.log.extend(iter(pipe.readline, b"")), daemon=True
        )
        self.reader.start()
        self.url = self._wait_for_url()
        self.token = (self.home / "token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def _wait_for_url(self) -> str:
        assert self.proc is not None
        deadline = time.monotonic() + UP_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited: {self.text()[-2000:]}")
            try:
                url = str(json.loads((self.home / "server.json").read_text())["url"])
                if httpx.get(f"{url}/livez", timeout=1).status_code == 200:
                    return url
            except (OSError, ValueError, KeyError, httpx.HTTPError):
                pass
            time.sleep(0.05)
        raise AssertionError("the server did not come up")

    def client(self, timeout: float = 120) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        with self.client() as http:
            return http.get(path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        with self.client() as http:
            return http.post(path, json=body, **kw)

    def kill(self) -> None:
        """SIGKILL: no handler runs, no file is tidied."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        assert self.proc.returncode == -signal.SIGKILL
        self._drain()

    def stop(self) -> str:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self._drain()
        return self.text()

    def _drain(self) -> None:
        self.reader.join(timeout=10)  # it ends at the pipe's end of file
        assert self.proc is not None and self.proc.stderr is not None
        self.proc.stderr.close()

    def text(self) -> str:
        return b"".join(self.log).decode(errors="replace")

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self._drain()


def wait_until(predicate: Any, timeout: float, what: str, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


# ---- worlds --------------------------------------------------------------------------
def tool_ids(n: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def build_world(home: Path, n_tools: int = 40, chains: int = 10) -> dict[str, Any]:
    """``n_tools`` tools sharing credentials in pairs (``env:C<i // 2>``); ``chains``
    abandoned chains ``t<2i>, t<2i+1>, <last tool>`` make ``t000..t<2*chains-1>``
    prefix tools that one eviction moves to the cold store.  Returns the tools and the
    pointers of the archived chains."""
    tools = tool_ids(n_tools)
    terminal = tools[-1]
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        sc.add_tools(
            [
                Tool(t, f"tool number {t} handles task {i % 7}",
                     credentials=(CredentialRef(f"env:C{i // 2}"),))
                for i, t in enumerate(tools)
            ]
        )  # fmt: skip
        pointers = []
        for i in range(chains):
            got = sc.report(abandoned([tools[2 * i], tools[2 * i + 1], terminal], f"HTTP 400 #{i}"))
            assert got.status == "archived", got
            pointers.append(got.pointer)
    return {"tools": tools, "pointers": pointers, "prefix": tools[: 2 * chains]}


def state_rows(home: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows of the home's state database, read through a read-only connection (the WAL
    included) while the owner may be running."""
    import sqlite3

    db = sqlite3.connect(f"file:{home / 'state.sqlite'}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute(sql, tuple(params)).fetchall()
    finally:
        db.close()
