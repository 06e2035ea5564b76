"""File locks under a home: who owns it, and who is moving tools between its stores."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from sidecar.errors import Busy

LockBusy = Busy
"""The name this error had before it joined :mod:`sidecar.errors`."""


class WriterLock:
    """A non-blocking ``flock`` on a file under the home, exclusive unless ``shared``.

    The kernel drops it when the holder dies (even by SIGKILL), so a crashed process
    never leaves a stale lock behind.  Each acquire opens its own descriptor, so two
    holders in one process exclude each other as two processes would.
    """

    def __init__(self, path: Path, purpose: str = "eviction", shared: bool = False) -> None:
        self.path = path
        self.purpose = purpose
        self.shared = shared
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            os.close(fd)
            raise Busy(
                f"another {self.purpose} is running ({holder or 'holder unknown'}); "
                f"wait for it to finish (lock: {self.path})",
                holder or "holder unknown",
            ) from None
        if not self.shared:
            os.ftruncate(fd, 0)
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            os.pwrite(fd, f"pid {os.getpid()} since {since}".encode(), 0)
        self._fd = fd

    def holder(self) -> str | None:
        """Who holds this lock now (this object included), or ``None`` when it is free."""
        return holder(self.path, self.purpose)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def holder(path: Path, purpose: str) -> str | None:
    """Who holds the lock at ``path`` exclusively or shared (its message, or "shared"),
    or ``None`` when it is free.  Probing never creates the file."""
    if not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with contextlib.suppress(OSError):
                text = os.pread(fd, 200, 0).decode(errors="replace").strip()
                return text or "shared"
            return "holder unknown"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
