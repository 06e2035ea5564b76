"""A TCP listener on a loopback port the OS chose, for tests that stand between a
client and what it calls (a proxy, a doorman that counts who knocks)."""

from __future__ import annotations

import socket
import threading


class Listener:
    """Accepts on its own thread and hands each connection to :meth:`handle` there;
    :meth:`close` stops it."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            self.handle(conn)

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._sock.close()
