"""A deadline around each call into deltalake: the call runs on a thread of its own, and
a call that has not returned when its deadline passes is abandoned (its thread left to
finish or hang on its own) and :class:`DeadlineExceeded` is raised in the caller.

deltalake gives no way to cancel a call, and a call can wait forever: a log load behind
a store that accepted the connection and never answered, or a tokio worker of the
object store client that panicked under it.  What the caller does next is the store's
own business: the table object the abandoned call was using is never touched again
(deltalake holds a lock on it for the length of the call), so the log is opened afresh
(:mod:`.log`), and an append whose commit was abandoned is one whose outcome is unknown
(:mod:`.append`): it may still land, as the one version it was written against plus
one, and is decided as any other attempt left in flight.

Abandoned threads are bounded: at most :data:`MAX_ABANDONED` of one store's calls may
be abandoned and still running at once; past that, no new call is started (each raises
:class:`DeadlineExceeded` at once) until one of them returns.  A store whose calls hang
for good therefore holds that many threads, and answers every later call with the
error instead of a new thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

DEFAULT_CALL_DEADLINE_S = 120.0
"""Seconds one call into deltalake may take before it is abandoned: above the object
store client's own retries of a slow request at its default timeout, well below
forever."""
MAX_ABANDONED = 16
"""Abandoned calls of one store that may still be running at once."""

_T = TypeVar("_T")


class DeadlineExceeded(TimeoutError):
    """A call into deltalake did not return within its deadline and was abandoned, or
    was not started because too many abandoned calls are still running.  A
    ``TimeoutError``, so an ``OSError``: the boundary maps it as the store's failure."""

    def __init__(self, what: str, seconds: float, refused_at: int | None = None) -> None:
        if refused_at is None:
            why = f"no answer within {seconds:g} s; the call was abandoned"
        else:
            why = f"not started: {refused_at} abandoned calls are still running"
        super().__init__(f"deltalake {what}: {why}")
        self.what = what
        self.seconds = seconds
        self.started = refused_at is None


@dataclass
class _Abandonable:
    done: bool = False
    abandoned: bool = False


class Deadline:
    """Runs calls into deltalake within ``seconds`` each; shared by the tables of one
    store, which share its bound on abandoned calls (``limit``)."""

    def __init__(self, seconds: float = DEFAULT_CALL_DEADLINE_S, limit: int = MAX_ABANDONED):
        if not seconds > 0:
            raise ValueError(f"a call deadline must be positive, not {seconds!r}")
        self.seconds = float(seconds)
        self.limit = limit
        self._lock = threading.Lock()
        self._abandoned = 0

    @property
    def abandoned(self) -> int:
        """Abandoned calls still running."""
        with self._lock:
            return self._abandoned

    def run(self, fn: Callable[[], _T], what: str) -> _T:
        """``fn()``'s result or exception, or :class:`DeadlineExceeded` once the deadline
        passes.  ``fn`` must not take a lock its caller may hold."""
        with self._lock:
            if self._abandoned >= self.limit:
                raise DeadlineExceeded(what, self.seconds, refused_at=self.limit)
        call = _Abandonable()
        finished = threading.Event()
        outcome: list[tuple[bool, object]] = []

        def work() -> None:
            try:
                outcome.append((True, fn()))
            except BaseException as exc:  # carried to the caller, whatever it is
                outcome.append((False, exc))
            finally:
                with self._lock:
                    call.done = True
                    if call.abandoned:
                        self._abandoned -= 1
                finished.set()

        threading.Thread(target=work, name=f"deltalake: {what}", daemon=True).start()
        finished.wait(self.seconds)
        with self._lock:
            if not call.done:
                call.abandoned = True
                self._abandoned += 1
                raise DeadlineExceeded(what, self.seconds)
        ok, value = outcome[0]
        if not ok:
            assert isinstance(value, BaseException)
            raise value
        return value  # type: ignore[return-value]
