"""Where the work of a large OTLP request runs.

Parsing a body is one call into C that holds the interpreter's lock from start to end:
for a body of 100,000 spans, most of a second during which no other thread of the
process runs, the event loop included.  Worker threads
cannot keep another exporter's small request from waiting behind it; another process
can.

- :class:`ThreadLane`: in this process, in worker threads (for tests, and where no
  process can be started).
- :class:`ProcessLane`: in a pool of worker processes started with ``spawn`` on first
  use (or :meth:`ProcessLane.warm`); each request is inflated, decoded and redacted
  there (:func:`~sidecar.agents.otlp.prepare.prepare_request`) and only the small
  :class:`~sidecar.agents.otlp.prepare.PreparedRequest` comes back.

Either takes at most ``workers`` requests at once and lets ``waiting`` more wait for a
turn; past that :class:`LaneFull` is raised (the router answers 503, which an exporter
retries), so that waiting requests never pile up in memory.
"""

from __future__ import annotations

from typing import Any, Protocol

from sidecar.agents.otlp.limits import AssemblerLimits
from sidecar.agents.otlp.prepare import PreparedRequest, prepare_request


class LaneFull(Exception):
    """Every worker is busy and the queue is full."""


class Lane(Protocol):
    async def prepare(
        self, body: bytes, content_type: str, encoding: str | None, limits: AssemblerLimits
    ) -> PreparedRequest: ...

    def warm(self) -> None: ...

    def close(self) -> None: ...


class _Bounded:
    def __init__(self, workers: int, waiting: int) -> None:
        if workers < 1 or waiting < 0:
            raise ValueError("workers must be >= 1 and waiting >= 0")
        self.workers, self.waiting = workers, waiting
        self._admitted = 0
        self._limiter: Any = None

    async def _run(self, fn: Any, *args: Any) -> PreparedRequest:
        import anyio

        if self._admitted >= self.workers + self.waiting:
            raise LaneFull(f"{self._admitted} large requests are in progress or waiting")
        if self._limiter is None:  # made in the event loop, on first use
            self._limiter = anyio.CapacityLimiter(self.workers)
        self._admitted += 1
        try:
            async with self._limiter:
                result: PreparedRequest = await fn(*args)
                return result
        finally:
            self._admitted -= 1


class ThreadLane(_Bounded):
    def __init__(self, workers: int = 2, waiting: int = 4) -> None:
        super().__init__(workers, waiting)

    async def prepare(
        self, body: bytes, content_type: str, encoding: str | None, limits: AssemblerLimits
    ) -> PreparedRequest:
        import anyio

        async def in_thread(*args: Any) -> PreparedRequest:
            return await anyio.to_thread.run_sync(prepare_request, *args)

        return await self._run(in_thread, body, content_type, encoding, limits)

    def warm(self) -> None:
        pass

    def close(self) -> None:
        pass


class ProcessLane(_Bounded):
    def __init__(self, workers: int = 1, waiting: int = 4) -> None:
        super().__init__(workers, waiting)
        self._pool: Any = None

    def _executor(self) -> Any:
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn: the server has threads, and a forked child would inherit their locks
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context)
        return self._pool

    async def prepare(
        self, body: bytes, content_type: str, encoding: str | None, limits: AssemblerLimits
    ) -> PreparedRequest:
        import asyncio

        async def in_process(*args: Any) -> PreparedRequest:
            loop = asyncio.get_running_loop()
            result: PreparedRequest = await loop.run_in_executor(
                self._executor(), prepare_request, *args
            )
            return result

        return await self._run(in_process, body, content_type, encoding, limits)

    def warm(self) -> None:
        """Start the workers now (they import the intake once), not on the first large
        request."""
        self._executor().submit(_ready).result(timeout=120)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _ready() -> bool:
    return True
