"""A server that may not migrate (``SIDECAR_MIGRATE=never``), before it opens its stores.

Its state may not be at this code's schema yet: ``sidecar migrate`` has not run, or is
running.  Opening the stores then would fail (or, with the default, migrate them: what
a replica is told not to do), so the server binds its socket first and answers there
what a probe asks while it waits: ``/livez`` 200 (the process is alive: restarting it
would not help), ``/readyz`` 503, and every other request 503 ``schema_pending``.  What
the state lacks is shown only to a caller with a token, as the real ``/readyz`` shows its
checks.  Once :func:`~sidecar.app.home.schema_pending` finds nothing missing, this responder
stops and the real app takes over the same socket: a connection made meanwhile waits in
the socket's backlog, it is not refused.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from sidecar.app.home import schema_pending
from sidecar.errors import SchemaPending, SchemaTooNew, StateUnavailable
from sidecar.settings import Settings
from sidecar.trust.principals import Principals
from sidecar.trust.redact import redact_text

log = logging.getLogger("sidecar.service")
POLL_S = 1.0
"""How often the state is asked again while the server waits."""
WAITING = (
    "this sidecar waits for its state's schema (`sidecar migrate` brings it to this "
    "version); it serves once the schema is there"
)


class _Responder(ThreadingHTTPServer):
    """Answers on a copy of the server's listening socket while the server waits."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, principals: Principals) -> None:
        super().__init__(sock.getsockname()[:2], _Probe, bind_and_activate=False)
        self.socket.close()
        self.socket = sock.dup()
        self.principals = principals
        self.reason = "not checked yet"
        """What the state lacks, as the last look found it."""


class _Probe(BaseHTTPRequestHandler):
    server: _Responder

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/livez":
            self._answer(200, {"status": "ok"})
        elif path == "/readyz":
            body: dict[str, Any] = {"ready": False}
            if self._authenticated():
                body["checks"] = {"schema": self.server.reason}
            self._answer(503, body)
        else:
            self._answer(503, {"error": {"code": SchemaPending.code, "message": WAITING}})

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _authenticated(self) -> bool:
        scheme, _, value = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return self.server.principals.authenticate(value.strip().encode()) is not None

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        # a request body is never read here: the connection cannot be reused after it
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a probe every few seconds is not news; the wait itself is logged


def wait_for_schema(
    sock: socket.socket,
    settings: Settings,
    principals: Principals,
    progress: Callable[[str], None] | None = None,
    poll_s: float = POLL_S,
) -> None:
    """Answer on ``sock`` as the module says until the state ``settings`` name is at this
    code's schema.  A state that cannot be read (PostgreSQL not up yet) is waited for
    too; one written by a newer sidecar raises :class:`~sidecar.errors.SchemaTooNew`,
    since no wait brings it back."""
    responder = _Responder(sock, principals)
    thread = threading.Thread(target=responder.serve_forever, args=(0.2,), daemon=True)
    thread.start()
    shown = ""
    try:
        while True:
            reason = _missing(settings)
            if not reason:
                return
            responder.reason = reason
            if reason != shown:
                shown = reason
                log.info(json.dumps({"event": "schema_pending", "reason": reason}))
                if progress is not None:
                    progress(f"not ready: {reason}; waiting for `sidecar migrate`")
            time.sleep(poll_s)
    finally:
        responder.shutdown()
        responder.server_close()
        thread.join()


def _missing(settings: Settings) -> str:
    """What the state lacks, in one line (empty: nothing)."""
    try:
        return "; ".join(schema_pending(settings))
    except SchemaTooNew:
        raise
    except StateUnavailable as exc:
        return f"the state cannot be read: {redact_text(str(exc))}"
