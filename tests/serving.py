"""The HTTP app over a library, served by uvicorn in a thread, for tests that need a
real server (its lifespan run, its shutdown run to the end)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

from sidecar import Sidecar


@contextlib.contextmanager
def serving(sc: Sidecar, token: str) -> Iterator[str]:
    """The HTTP app over ``sc`` on a loopback port the OS chose: its URL, and the server
    stopped on leaving."""
    import uvicorn

    from sidecar.shells.api import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = create_app(sc, token)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
        assert not thread.is_alive(), "the server did not stop"
