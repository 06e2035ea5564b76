"""An S3 server for the tests, the benchmarks and ``python -m benchmarks.cluster``, in
its own process: moto's, on 127.0.0.1 and a port the OS chose.  It honours conditional
writes (``If-None-Match: *``), which Delta's commits rely on, atomically: moto checks
the condition and stores the object in two steps, on one thread per request, so two
writers racing for one Delta version could both be told they created it (the second
overwriting the first's commit: a batch acknowledged and lost); here a lock holds the
check and the store together, as S3 itself does (:func:`atomic_conditional_writes`).

Run as ``python -m benchmarks.s3server``: prints ``port <n>`` once listening, then reads
commands on stdin: ``stop`` (the port refuses connections; the objects are kept),
``start`` (listening again on the same port); end of input ends it.
:class:`S3Server` runs it as a child process and drives it.
"""

from __future__ import annotations

import functools
import logging
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ACCESS = {"aws_access_key_id": "test-key", "aws_secret_access_key": "test-secret"}
REGION = "us-east-1"


def atomic_conditional_writes() -> None:
    """Make moto's conditional writes atomic in this process.

    moto 5 answers ``PUT`` (and ``CompleteMultipartUpload``) with ``If-None-Match: *`` by
    looking the key up, then storing the object: two requests for one key on two of the
    server's threads can both pass the look-up, and both are answered 200.  A lock
    around every conditional write to a key makes the look-up and the store one step.
    Unconditional writes (data files) are not serialised."""
    from moto.s3.responses import S3Response

    lock = threading.Lock()

    def guarded(handler: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(handler)
        def write(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.headers.get("If-None-Match") is None and self.headers.get("If-Match") is None:
                return handler(self, *args, **kwargs)
            with lock:
                return handler(self, *args, **kwargs)

        return write

    if not getattr(S3Response, "_atomic_conditional_writes", False):
        S3Response._key_response_put = guarded(S3Response._key_response_put)
        S3Response._key_response_post = guarded(S3Response._key_response_post)
        S3Response._atomic_conditional_writes = True


def main() -> None:
    from moto.server import ThreadedMotoServer

    atomic_conditional_writes()
    # it ends with its stdin, i.e. with its parent: a Ctrl-C meant for the parent must
    # not stop it while the parent still needs it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _host, port = server.get_host_and_port()
    running = True
    print(f"port {port}", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "stop" and running:
            server.stop()
            running = False
        elif command == "start" and not running:
            # moto keeps its buckets in this process, so a new server serves them again
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            server.start()
            running = True
        print(f"ok {command}", flush=True)
    if running:
        server.stop()


class S3Server:
    """:func:`main` in a child process (it ends with its stdin, so a parent that dies
    takes it along)."""

    def __init__(self) -> None:
        self._client: Any = None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.s3server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("port "):
            self.close()
            raise RuntimeError(f"the S3 server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.pid = self._proc.pid

    def _command(self, command: str) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        assert self._proc.stdout.readline().strip() == f"ok {command}"

    def stop(self) -> None:
        """Connections are refused until :meth:`start`; the objects are kept."""
        self._command("stop")

    def start(self) -> None:
        self._command("start")

    def options(self, **overrides: Any) -> Any:
        """The :class:`~cold_store.S3Options` that reach this server."""
        from cold_store import S3Options

        values: dict[str, Any] = {
            "endpoint_url": self.endpoint,
            "region": REGION,
            "access_key_id": ACCESS["aws_access_key_id"],
            "secret_access_key": ACCESS["aws_secret_access_key"],
        }
        values.update(overrides)
        return S3Options(**values)

    def env(self) -> dict[str, str]:
        """The standard ``AWS_*`` variables that reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": ACCESS["aws_secret_access_key"],
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def client(self) -> Any:
        """One boto3 client for the server's life (closed with it: each client keeps a
        pool of sockets)."""
        if self._client is None:
            import boto3  # type: ignore[import-untyped]

            self._client = boto3.client(
                "s3", endpoint_url=self.endpoint, region_name=REGION, **ACCESS
            )
        return self._client

    def new_bucket(self, prefix: str = "cold") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


if __name__ == "__main__":
    main()
