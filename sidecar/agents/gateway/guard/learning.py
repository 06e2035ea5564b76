"""What a forwarded call teaches, taken off the call's path: the step a small result
becomes (:mod:`sidecar.agents.evidence`: clipped, redacted, capped) and its
place in its session (:class:`~sidecar.agents.gateway.guard.sessions.SessionBook`) are worked
out after the result has been handed back, not before.

A bare relay returns the upstream's result as it came; the gateway did the evidence work
first (0.07 ms a call for a small result), and the client waited for it (BENCHMARKS.md,
section 10).  Now the call queues that work and returns; a task that waits for work
does it :data:`DEFER_S` later, on the event loop (the response is on its way out by
then).  A large result's evidence is still taken before its call returns, on the worker
thread for heavy work (:mod:`sidecar.agents.gateway.guard.calls`): queued, it would hold up
whichever call of another session came to settle it.

Nothing is learned later than it is needed, nor lost:

- the work is queued per principal (a bearer token and a client's name: every session
  key, and every session a call may be linked to, is one principal's), in call order,
  and :meth:`Learning.settle` does a principal's queued work at once (it is small, and
  never waits for anything) before anything reads that principal's sessions: the
  gateway settles before it links a call, checks it, searches, takes a declared
  outcome or closes a connection's session, so a call sees every step its session made
  before it, as it did when the work came first;
- the idle sweep and the shutdown settle everything first (:meth:`Learning.settle_all`),
  so no step is still queued when its session is concluded and reported.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from sidecar.agents.gateway.guard.backend import Step
from sidecar.agents.gateway.guard.workers import GatewayStats

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

log = logging.getLogger("sidecar.agents.gateway")
DEFER_S = 0.001
"""How long queued work waits before it is done in the background: the result's
response is on its way out by then (a call that comes sooner settles the queue itself)."""


@dataclass(frozen=True)
class _Pending:
    build: Callable[[], Step]
    done: Callable[[Step], None]


class Learning:
    """Queued evidence work, one queue per principal."""

    def __init__(self, stats: GatewayStats, delay_s: float = DEFER_S) -> None:
        self._stats = stats
        self.delay_s = delay_s
        self._queues: dict[str, deque[_Pending]] = {}
        self._wake: anyio.Event | None = None  # made on the event loop
        self._tg: TaskGroup | None = None

    @property
    def running(self) -> bool:
        return self._tg is not None

    def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        self._wake = anyio.Event()
        tg.start_soon(self._drain)

    def stop(self) -> None:
        """No more work in the background: what is queued from now on waits for a
        settle."""
        self._tg = None
        if self._wake is not None:
            self._wake.set()

    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def defer(
        self, principal: str, build: Callable[[], Step], done: Callable[[Step], None]
    ) -> None:
        """Queue ``done(build())`` for ``principal``."""
        self._queues.setdefault(principal, deque()).append(_Pending(build, done))
        # one long-lived task does the work: starting a task per call would cost the
        # call more than the evidence work itself
        if self._wake is not None:
            self._wake.set()

    def settle(self, principal: str) -> None:
        """Every piece of ``principal``'s queued work done, in order."""
        queue = self._queues.pop(principal, None)
        while queue:
            self._apply(queue.popleft())

    def settle_all(self) -> None:
        for principal in list(self._queues):
            self.settle(principal)

    async def _drain(self) -> None:
        while not self._stopped() and self._wake is not None:
            await self._wake.wait()
            self._wake = anyio.Event()
            if self._stopped():
                return  # the shutdown settles what is left
            await anyio.sleep(self.delay_s)
            self.settle_all()

    def _stopped(self) -> bool:
        return self._tg is None

    def _apply(self, item: _Pending) -> None:
        try:
            item.done(item.build())
        except Exception as exc:  # one result that cannot become evidence loses only itself
            self._stats.evidence_failures += 1
            log.error('{"event": "evidence_failed", "type": "%s"}', type(exc).__name__)
