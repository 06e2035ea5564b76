"""The single-writer lock for moves between the hot and cold stores."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from sidecar.errors import SidecarError


class LockBusy(SidecarError):
    code = "busy"

    def __init__(self, message: str, holder: str = "") -> None:
        super().__init__(message)
        self.holder = holder


class WriterLock:
    """An exclusive, non-blocking ``flock`` on a file under the home.

    The kernel drops it when the holder dies (even by SIGKILL), so a crashed eviction
    never leaves a stale lock behind.
    """

    def __init__(self, path: Path, purpose: str = "eviction") -> None:
        self.path = path
        self.purpose = purpose
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            os.close(fd)
            raise LockBusy(
                f"another {self.purpose} is running ({holder or 'holder unknown'}); "
                f"wait for it to finish (lock: {self.path})",
                holder or "holder unknown",
            ) from None
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.pwrite(fd, f"pid {os.getpid()} since {since}".encode(), 0)
        self._fd = fd

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
    """Who holds the lock at ``path`` (its message), or ``None`` when it is free."""
    if not path.exists():
        return None
    probe = WriterLock(path, purpose)
    try:
        probe.acquire()
    except LockBusy as exc:
        return exc.holder
    probe.release()
    return None
