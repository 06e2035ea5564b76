"""Starting the services a benchmark measures, and waiting until they answer: a
``sidecar serve`` or ``sidecar gateway`` process, a ``chroma run`` server, and the
process helpers under PostgreSQL (:mod:`benchmarks.pgserver`) and the moto S3 server
(:mod:`benchmarks.s3server`).

A process is started with its output in a log file (nobody reads a pipe while a
benchmark runs) and waited for by polling what it answers; a process that exits or
does not answer in time raises, with the end of its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")
POLL_S = 0.1


def sidecar_argv() -> list[str]:
    """The command that runs the CLI of the Python running now."""
    script = Path(sys.executable).with_name("sidecar")
    if script.exists():
        return [str(script)]
    return [
        sys.executable,
        "-c",
        "import sys; from sidecar.shells.cli import main; sys.exit(main())",
    ]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any ``SIDECAR_*`` variable (a benchmark must not
    inherit, say, evict-on-report), then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    return env | extra


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGTERM (a clean shutdown), SIGKILL when it takes longer than ``timeout``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_until(
    answer: Callable[[], T | None],
    proc: subprocess.Popen[Any],
    timeout: float,
    what: str,
    log: Path | None = None,
    poll: float = POLL_S,
) -> T:
    """Poll ``answer`` until it returns something other than ``None`` (an HTTP error
    counts as no answer yet); raise when ``proc`` exits or ``timeout`` seconds pass."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            found = answer()
            if found is not None:
                return found
        if proc.poll() is not None or time.monotonic() > deadline:
            state = "exited" if proc.poll() is not None else "did not answer"
            tail = f":\n{log_tail(log, 2000)}" if log is not None else ""
            raise RuntimeError(f"{what} {state}{tail}")
        time.sleep(poll)


# ---- sidecar serve --------------------------------------------------------------------
def read_server_url(home: Path, pid: int) -> str | None:
    """The URL in ``home``'s ``server.json`` when the process ``pid`` wrote it (a file
    left by an earlier server is not this one's)."""
    try:
        info = json.loads((home / "server.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("pid") != pid:
        return None
    url = info.get("url")
    return url if isinstance(url, str) else None


def start_serve(
    env: Mapping[str, str],
    stderr: IO[bytes] | int,
    port: int = 0,
    argv: Sequence[str] | None = None,
) -> subprocess.Popen[bytes]:
    """``sidecar serve --port PORT`` (0: any free port, announced in the home's
    ``server.json``), not waiting for it; ``argv``: what runs the CLI instead."""
    return subprocess.Popen(
        [*(argv or sidecar_argv()), "serve", "--port", str(port)],
        env=dict(env),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )


def wait_announced(
    home: Path, proc: subprocess.Popen[Any], timeout: float, what: str = "sidecar serve"
) -> str:
    """The URL the server ``proc`` on ``home`` announces, once it has."""
    return wait_until(lambda: read_server_url(home, proc.pid), proc, timeout, what, poll=0.05)


def operator_headers(home: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {(home / 'token').read_text().strip()}"}


def wait_ready(
    url: str,
    headers: Mapping[str, str],
    proc: subprocess.Popen[Any],
    timeout: float,
    log: Path | None = None,
) -> None:
    """Until ``GET /readyz`` answers 200."""
    import httpx

    def ready() -> bool | None:
        return httpx.get(f"{url}/readyz", headers=headers, timeout=5).status_code == 200 or None

    wait_until(ready, proc, timeout, f"sidecar serve on {url}", log)


# ---- the gateway and other MCP servers ------------------------------------------------
def wait_mcp(proc: subprocess.Popen[Any], port: int, what: str, timeout: float = 60) -> str:
    """The URL of the MCP endpoint ``proc`` serves on ``port``, once it answers at all."""
    import httpx

    url = f"http://127.0.0.1:{port}/mcp"

    def answers() -> str:
        httpx.get(url, timeout=1)
        return url

    return wait_until(answers, proc, timeout, what)


# ---- chroma run -----------------------------------------------------------------------
def start_chroma(
    data: Path, port: int, log: Path | None = None, timeout: float = 60
) -> tuple[subprocess.Popen[bytes], str]:
    """A ``chroma run`` server on ``data`` and ``port`` (its output in ``log``, else
    dropped), and its URL once its heartbeat answers.  Its own session: a Ctrl-C meant
    for the benchmark reaches the benchmark only, which then stops it in order."""
    import httpx

    exe = shutil.which("chroma", path=str(Path(sys.executable).parent)) or "chroma"
    out = log.open("ab") if log is not None else None
    try:
        proc = subprocess.Popen(
            [exe, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out or subprocess.DEVNULL,
            stderr=subprocess.STDOUT if out else subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        if out is not None:
            out.close()  # the child holds its own copy
    url = f"http://127.0.0.1:{port}"

    def beats() -> bool | None:
        return httpx.get(f"{url}/api/v2/heartbeat", timeout=2).is_success or None

    try:
        wait_until(beats, proc, timeout, "chroma run", log)
    except BaseException:
        stop_process(proc)
        raise
    return proc, url
