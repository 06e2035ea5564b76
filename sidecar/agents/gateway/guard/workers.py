"""Where the gateway's work on the backend runs, and how finished sessions reach it.

The backend may block on storage, so it is called from worker threads: reads (checks,
searches) and writes (reports, syncs) on threads of their own, so that a slow write
never holds up a session's check, and results too large to take on the event loop on a
third.  :class:`Reporter` hands finished sessions to the backend in the background, and
on the way out waits (bounded) for the reports still in flight.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from sidecar.agents.gateway.guard.backend import GatewayBackend
from sidecar.errors import InvalidInput

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from sidecar.agents.gateway.guard.sessions import LinkedSessionBook
    from sidecar.agents.sessions import SessionReport

log = logging.getLogger("sidecar.agents.gateway")
T = TypeVar("T")
DRAIN_S = 30.0
"""How long the shutdown waits for reports still in flight."""
NOTES = 10_000
"""Decisions waiting for the sweep at most (the oldest go first)."""
NOTES_PER_CALL = 1_000
"""Decisions handed to the backend at once (what the library takes in one call)."""


@dataclass
class GatewayStats:
    calls: int = 0
    forwarded: int = 0
    blocked: int = 0
    warned: int = 0
    refused_hidden: int = 0
    upstream_errors: int = 0
    timeouts: int = 0
    contest_samples: int = 0
    notes_dropped: int = 0
    """Decisions not handed to the backend's decision log (it failed, or fell behind)."""
    held: int = 0
    """Calls held for an operator's approval, or denied by one."""
    syncs: int = 0
    sync_failures: int = 0
    reports: int = 0
    report_failures: int = 0
    evidence_failures: int = 0
    evidence_reports: int = 0
    """Failing calls taken in by the memory as they came back (before their session
    ended)."""
    evidence_wait_s: float = 0.0
    """Their total wait from the failed call's return to the memory's commit."""
    evidence_wait_max_s: float = 0.0

    def waited(self, seconds: float) -> None:
        self.evidence_reports += 1
        self.evidence_wait_s += seconds
        self.evidence_wait_max_s = max(self.evidence_wait_max_s, seconds)


class Workers:
    """The three worker-thread lanes (one thread each)."""

    def __init__(self, inline_checks: bool = False) -> None:
        self._reads = anyio.CapacityLimiter(1)
        self._writes = anyio.CapacityLimiter(1)
        self._heavy = anyio.CapacityLimiter(1)
        self._inline_checks = inline_checks

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._reads)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._writes)

    async def heavy(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn, limiter=self._heavy)

    async def checked(self, fn: Callable[..., T], *args: Any) -> T:
        """A read on the call path: on the event loop for a backend whose checks never
        block (``inline_checks``), which saves a thread hop per call."""
        if self._inline_checks:
            return fn(*args)
        return await self.read(fn, *args)


class Reporter:
    """Finished sessions to :meth:`GatewayBackend.report_session`, in the background."""

    def __init__(
        self,
        backend: GatewayBackend,
        workers: Workers,
        book: LinkedSessionBook,
        stats: GatewayStats,
        settle: Callable[[], None] | None = None,
    ) -> None:
        self._backend = backend
        self._workers = workers
        self._book = book
        self._stats = stats
        self._settle = settle
        """Finishes the steps still queued (:mod:`.learning`) before sessions conclude."""
        self._tg: TaskGroup | None = None
        self._inflight = 0  # scheduled reports not yet handed to the backend
        self._notes: deque[tuple[str | None, str, dict[str, Any]]] = deque(maxlen=NOTES)
        """Decisions to hand to the backend's decision log: (session key, principal,
        call)."""

    def note(self, key: str | None, principal: str, call: dict[str, Any]) -> None:
        """Keep what was decided for a call of the session ``key`` (handed over by the
        sweep, filed under the id the session is reported by; ``None``: a lookup no
        session was known for yet, counted but filed under none)."""
        if len(self._notes) == self._notes.maxlen:
            self._stats.notes_dropped += 1
        self._notes.append((key, principal, call))

    async def flush_notes(self) -> None:
        """Hand the decisions kept so far to the backend, per principal, each filed
        under its session's report id (its link key when nothing was reported of it)."""
        note = getattr(self._backend, "note_calls", None)
        notes, self._notes = self._notes, deque(maxlen=NOTES)
        if note is None or not notes:
            return
        by_principal: dict[str, list[dict[str, Any]]] = {}
        for key, principal, call in notes:
            sid = (self._book.report_id(key) or key) if key else None
            by_principal.setdefault(principal, []).append({**call, "session_id": sid})
        for principal, calls in by_principal.items():
            for at in range(0, len(calls), NOTES_PER_CALL):
                await self._hand_over(note, calls[at : at + NOTES_PER_CALL], principal)

    async def _hand_over(
        self, note: Callable[..., Any], calls: list[dict[str, Any]], principal: str
    ) -> None:
        """One batch of notes to the backend; a batch it refuses as input goes one by
        one, so that one call it cannot take (arguments nested too deep) costs that one."""
        try:
            await self._workers.write(note, calls, principal)
            return
        except InvalidInput:
            if len(calls) == 1:
                self._stats.notes_dropped += 1
                return
        except Exception as exc:  # the log must not take the gateway down
            self._stats.notes_dropped += len(calls)
            log.warning('{"event": "notes_failed", "type": "%s"}', type(exc).__name__)
            return
        for call in calls:
            await self._hand_over(note, [call], principal)

    def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(self._sweep)

    async def stop(self) -> None:
        """Every open session concluded and reported; reports in flight waited for."""
        with anyio.CancelScope(shield=True):
            if self._settle is not None:
                self._settle()  # nothing learned is lost: every step in its session
            await self.flush_notes()  # while the sessions' report ids are known
            for report in self._book.close_all():
                await self.report(report)
            with anyio.move_on_after(DRAIN_S):
                while self._inflight:
                    await anyio.sleep(0.01)
        self._tg = None

    def schedule(self, *reports: SessionReport | None) -> None:
        for report in reports:
            if report is not None and self._tg is not None:
                self._inflight += 1
                self._tg.start_soon(self.report, report, True)

    async def report(self, report: SessionReport, scheduled: bool = False) -> None:
        try:
            send = functools.partial(self._backend.report_session, source=report.source)
            if not report.context_known:
                send = functools.partial(send, context_known=False)
            await self._workers.write(
                send, report.session_id, list(report.steps), report.outcome, report.task_input
            )
            self._stats.reports += 1
            if report.failed_at is not None:
                self._stats.waited(time.monotonic() - report.failed_at)
        except Exception as exc:  # a failing backend must not take the gateway down
            self._stats.report_failures += 1
            log.error('{"event": "report_failed", "type": "%s"}', type(exc).__name__)
        finally:
            if scheduled:
                self._inflight -= 1

    async def _sweep(self) -> None:
        limits = self._book.limits
        shortest = min(limits.idle_s, self._book.link_window_s, limits.settle_s)
        interval = min(max(shortest / 4, 0.05), 5.0)
        while True:
            await anyio.sleep(interval)
            if self._settle is not None:
                self._settle()
            await self.flush_notes()  # before a session expires with its report id
            for report in self._book.expire():
                await self.report(report)
