"""An S3 server for the tests, the benchmarks and ``python -m benchmarks.cluster``, in
its own process: moto's, on 127.0.0.1 and a port the OS chose.  It honours conditional
writes (``If-None-Match: *``), which Delta's commits rely on, atomically: moto checks
the condition and stores the object in two steps, on one thread per request, so two
writers racing for one Delta version could both be told they created it (the second
overwriting the first's commit: a batch acknowledged and lost); here a lock holds the
check and the store together, as S3 itself does (:func:`atomic_conditional_writes`).

With ``--faults SPEC`` it answers through a proxy that injects faults into requests
(:class:`FaultSpec`: delays, 503s before the request reaches the store, replies lost
after the write landed, which the client sees as a timeout or a reset and retries), so
that every step of a Delta commit (reading the log, uploading the data file, creating
the log entry, reading back) meets them.

Run as ``python -m benchmarks.s3server [--faults SPEC]``: prints ``port <n>`` once
listening, then reads commands on stdin: ``stop`` (the port refuses connections; the
objects are kept), ``start`` (listening again on the same port), ``faults on`` /
``faults off``, ``stats`` (prints the faults injected so far as one JSON line),
``requests`` (the requests relayed so far, by step); end of input ends it.
:class:`S3Server` runs it as a child process and drives it.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import importlib.util
import json
import logging
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ACCESS = {"aws_access_key_id": "test-key", "aws_secret_access_key": "test-secret"}
REGION = "us-east-1"
PACKAGE = "moto[server]>=5.1"
"""The ``test`` extra's pin: ``make run`` does not install it."""


def missing() -> str | None:
    """Why this Python cannot run the server, with the command that installs what it
    lacks; ``None`` when it can."""
    # moto's server runs on flask: the bare package cannot serve
    if all(importlib.util.find_spec(m) is not None for m in ("moto", "flask")):
        return None
    return (
        f"moto, the S3 server, is not installed: `{sys.executable} -m pip install "
        f"'{PACKAGE}'` (the test extra has it)"
    )


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


@dataclass(frozen=True)
class FaultSpec:
    """Which faults the proxy injects, each with its probability per request, decided
    by a generator seeded with ``seed``.  Written ``delay=0.2,fail=0.05,...``."""

    seed: int = 0
    delay: float = 0.0
    """Held for up to ``max_delay_s`` before it is forwarded."""
    max_delay_s: float = 0.2
    fail: float = 0.0
    """Answered 503 without reaching the store (the client retries)."""
    lose_reply: float = 0.0
    """Forwarded (the write lands), then the connection is closed without a reply,
    after ``lost_reply_s``: the client sees a reset or its timeout and retries."""
    lost_reply_s: float = 0.0
    only: str = ""
    """Steps (:func:`step_of`) the faults are limited to, ``|``-separated; all when empty."""

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        names = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for part in filter(None, text.split(",")):
            name, _, value = part.partition("=")
            if name not in names:
                raise ValueError(f"unknown fault {name!r}; known: {', '.join(names)}")
            values[name] = (
                int(value) if name == "seed" else value if name == "only" else float(value)
            )
        return cls(**values)

    def text(self) -> str:
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


def step_of(method: str, path: str) -> str:
    """The step of a Delta commit a request belongs to, for the fault counts."""
    if "/_delta_log/" in path or path.endswith("/_delta_log"):
        return "log write" if method == "PUT" else "log read"
    if "list-type=" in path or "prefix=" in path:
        return "list"
    return {"PUT": "data write", "GET": "data read", "HEAD": "head"}.get(method, method.lower())


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of the store at ``target_port``."""

    def __init__(self, target_port: int, spec: FaultSpec) -> None:
        self.spec = spec
        self.enabled = True
        self.counts: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        """Every request relayed, by step."""
        self._random = random.Random(spec.seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # no line per request
                pass

            def _relay(self) -> None:
                proxy.relay(self, target_port)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay

        class Server(ThreadingHTTPServer):
            # socketserver's default backlog of 5 leaves many writers' connections
            # unanswered in SYN-SENT while the proxy is busy
            request_queue_size = 128

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that reset or gave up on a reply: no traceback per case

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _draw(self, step: str) -> tuple[float, bool, bool]:
        spec = self.spec
        with self._lock:
            if not self.enabled or (spec.only and step not in spec.only.split("|")):
                return 0.0, False, False
            roll = self._random.random
            delay = roll() * spec.max_delay_s if roll() < spec.delay else 0.0
            return delay, roll() < spec.fail, roll() < spec.lose_reply

    def relay(self, handler: BaseHTTPRequestHandler, target_port: int) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        step = step_of(handler.command, handler.path)
        with self._lock:
            self.requests[step] += 1
        delay, fail, lose = self._draw(step)
        if delay:
            self._count(f"{step}: delayed")
            time.sleep(delay)
        if fail:
            self._count(f"{step}: 503 before the store")
            handler.send_response(503)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=60)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() != "connection"}
            conn.request(handler.command, handler.path, body=body or None, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
        finally:
            conn.close()
        if lose:
            self._count(f"{step}: reply lost after the store answered {reply.status}")
            time.sleep(self.spec.lost_reply_s)
            handler.close_connection = True
            return
        handler.send_response(reply.status)
        for name, value in reply.getheaders():
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                handler.send_header(name, value)
        # a HEAD's length is the object's, not the (empty) body's
        length = reply.getheader("Content-Length") if handler.command == "HEAD" else None
        handler.send_header("Content-Length", length or str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            with contextlib.suppress(OSError):  # a client that gave up on a slow reply
                handler.wfile.write(data)

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def main(argv: list[str] | None = None) -> None:
    import argparse

    from moto.server import ThreadedMotoServer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.s3server")
    parser.add_argument("--faults", help="serve through a fault-injecting proxy (FaultSpec)")
    args = parser.parse_args(argv)
    atomic_conditional_writes()
    # it ends with its stdin, i.e. with its parent: a Ctrl-C meant for the parent must
    # not stop it while the parent still needs it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _host, port = server.get_host_and_port()
    proxy = FaultProxy(port, FaultSpec.parse(args.faults)) if args.faults else None
    running = True
    print(f"port {proxy.port if proxy else port} direct {port}", flush=True)
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
        elif command in ("faults on", "faults off") and proxy is not None:
            proxy.enabled = command == "faults on"
        elif command == "stats":
            print(json.dumps(dict(proxy.counts) if proxy else {}), flush=True)
        elif command == "requests":
            print(json.dumps(dict(proxy.requests) if proxy else {}), flush=True)
        print(f"ok {command}", flush=True)
    if proxy is not None:
        proxy.close()
    if running:
        server.stop()


class S3Server:
    """:func:`main` in a child process (it ends with its stdin, so a parent that dies
    takes it along)."""

    def __init__(self, faults: FaultSpec | None = None) -> None:
        """``faults``: clients reach the store through the fault-injecting proxy
        (:meth:`client` always reaches it directly)."""
        lacking = missing()
        if lacking is not None:
            raise RuntimeError(lacking)
        self._client: Any = None
        self.faults = faults
        extra = ["--faults", faults.text()] if faults is not None else []
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.s3server", *extra],
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
        words = line.split()
        self.port = int(words[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.direct_endpoint = f"http://127.0.0.1:{words[3]}"
        """The store itself, never through the proxy."""
        self.pid = self._proc.pid

    def _command(self, command: str) -> list[str]:
        """Send ``command``; the lines printed before its ``ok``."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        lines: list[str] = []
        while (line := self._proc.stdout.readline().strip()) != f"ok {command}":
            if not line:
                raise RuntimeError(f"the S3 server ended before answering {command!r}")
            lines.append(line)
        return lines

    def set_faults(self, on: bool) -> None:
        """Turn the proxy's faults on or off (a server without faults ignores it)."""
        self._command("faults on" if on else "faults off")

    def request_counts(self) -> dict[str, int]:
        """The requests the proxy relayed so far, by step (a server with faults only)."""
        counts: dict[str, int] = json.loads(self._command("requests")[0])
        return counts

    def fault_counts(self) -> dict[str, int]:
        """The faults injected so far, by step and kind."""
        counts: dict[str, int] = json.loads(self._command("stats")[0])
        return counts

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
                "s3", endpoint_url=self.direct_endpoint, region_name=REGION, **ACCESS
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
