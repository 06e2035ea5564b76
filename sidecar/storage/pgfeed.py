"""The change feed of a PostgreSQL state: ``LISTEN`` on its channel in a thread of its
own, so that a revision cache knows when another process has written."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any


class ChangeFeed:
    """``LISTEN`` on the state's channel, on a connection of its own, in a daemon
    thread: every write transaction of any process ``NOTIFY``s it at commit, and each
    notification moves :attr:`generation`.  While the feed is not listening (not yet,
    or its connection broke) :attr:`listening` is false and nothing may be cached.

    ``connect`` opens an autocommit connection; ``closed`` says when to stop; ``errors``
    is the driver's base error."""

    def __init__(
        self,
        connect: Callable[[], Any],
        channel: str,
        closed: Callable[[], bool],
        errors: type[Exception],
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._closed = closed
        self._errors = errors
        self.generation = 0
        self.listening = False
        self._thread = threading.Thread(target=self._run, name="sidecar-changes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._closed():
            try:
                conn = self._connect()
            except self._errors:
                time.sleep(1.0)
                continue
            try:
                conn.execute(f"LISTEN {self._channel}")
                self.generation += 1  # whatever was missed while not listening
                self.listening = True
                while not self._closed():
                    for _ in conn.notifies(timeout=1.0):
                        self.generation += 1
            except self._errors:
                pass
            finally:
                self.listening = False
                self.generation += 1
                with contextlib.suppress(self._errors):
                    conn.close()
            time.sleep(0.2)
