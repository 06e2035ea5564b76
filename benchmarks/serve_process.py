"""A ``sidecar serve`` process as the serve, ready and soak benchmarks start it, timed from
its start; the variants it runs with, and the pure helpers those benchmarks share."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from benchmarks.harness.results import REPO_ROOT
from benchmarks.harness.services import read_server_url, sidecar_argv, stop_process

VARIANTS = ("onnx", "torch")


READY_VARIANTS = (*VARIANTS, "hashing")


SERVER_EMBEDDER = {"onnx": "minilm", "torch": "minilm-torch", "hashing": "hashing"}
"""``SIDECAR_EMBEDDER`` of each variant: the default path, the torch reference, and the
hashing stand-in (no model at all: the floor of a server's start)."""


READY_TARGET_S = 3.0


POLL_S = 0.01


START_TIMEOUT_S = 180.0


FIRST_QUERY = "extract prices from the page text"


# ---- pure helpers ---------------------------------------------------------------------
def rotated(names: Sequence[str], round_no: int) -> list[str]:
    """``names`` starting at ``round_no`` modulo their count: each goes first as often."""
    shift = round_no % len(names)
    return [*names[shift:], *names[:shift]]


HTTP_PATHS = {"new": "/v1/search", "repeated": "/v1/search", "livez": "/livez"}


def server_times(log_text: str, calls: Sequence[str]) -> dict[str, list[float]] | None:
    """The server's own time (its request log's ``ms``: from the request reaching the
    app to the response leaving it) of each of ``calls`` (``new``, ``repeated`` or
    ``livez``, in the order they were made, and the last requests the server logged),
    by kind; ``None`` when the log does not line up with the calls (a dropped line)."""
    import json

    logged: list[tuple[str, float]] = []
    for line in log_text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == "request":
            logged.append((str(entry.get("path")), float(entry["ms"])))
    if len(logged) < len(calls):
        return None
    out: dict[str, list[float]] = {kind: [] for kind in HTTP_PATHS}
    for kind, (path, ms) in zip(calls, logged[len(logged) - len(calls) :], strict=True):
        if path != HTTP_PATHS[kind]:
            return None
        out[kind].append(ms)
    return out


def medians(samples: Sequence[Mapping[str, float]], key: str) -> dict[str, float]:
    values = [s[key] for s in samples]
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


# ---- a server process -----------------------------------------------------------------
def server_env(home: Path, embedder: str, cache: Path) -> dict[str, str]:
    """This environment without any ``SIDECAR_*`` variable, the repository first on the
    path, then the home, the embedder and the model cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env |= {
        "PYTHONPATH": str(REPO_ROOT),
        "SIDECAR_HOME": str(home),
        "SIDECAR_EMBEDDER": embedder,
        "SIDECAR_MODEL_CACHE": str(cache),
    }
    return env


class ServerProcess:
    """``sidecar serve --port 0`` on ``home``; times are seconds from its start."""

    def __init__(self, home: Path, env: Mapping[str, str], log: Path) -> None:
        (home / "server.json").unlink(missing_ok=True)
        self.home = home
        self.log = log
        # a file, not a pipe: nobody reads a pipe while the server runs
        self._log = log.open("ab")
        self.url = ""
        self.headers: dict[str, str] = {}
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*sidecar_argv(), "serve", "--port", "0"],
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"sidecar serve exited with {code}:\n{tail}")
        if self.elapsed() > START_TIMEOUT_S:
            raise TimeoutError(f"sidecar serve not ready after {START_TIMEOUT_S} s")

    def wait_url(self) -> float:
        """Until the server names its URL in ``server.json`` (after its warm-up)."""
        while True:
            url = read_server_url(self.home, self.proc.pid)
            if url is not None:
                break
            self._alive()
            time.sleep(POLL_S)
        at = self.elapsed()
        self.url = url
        token = (self.home / "token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {token}"}
        return at

    def wait_ready(self) -> tuple[float, int]:
        """Until ``GET /readyz`` answers 200; with how many answers said not ready."""
        import httpx

        not_ready = 0
        while True:
            try:
                answer = httpx.get(f"{self.url}/readyz", headers=self.headers, timeout=30)
                if answer.status_code == 200:
                    return self.elapsed(), not_ready
                not_ready += 1
            except httpx.HTTPError:
                pass
            self._alive()
            time.sleep(POLL_S)

    def first_search(self) -> tuple[float, int]:
        """One ``POST /v1/search``; when it answered, and how many hits."""
        import httpx

        answer = httpx.post(
            f"{self.url}/v1/search",
            json={"query": FIRST_QUERY, "k": 5},
            headers=self.headers,
            timeout=120,
        )
        answer.raise_for_status()
        return self.elapsed(), len(answer.json()["hits"])

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()
