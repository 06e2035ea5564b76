"""The OTLP intake's open sessions: the steps of each, bounded in steps and in bytes,
and when they become reports.

A session is keyed by what names it (a conversation id, an MCP session id) or by its
trace.  A trace's own session ends with the trace (:meth:`SessionBook.close`).  A
named session lives on across traces: when one of its traces closes it is reported
with every step so far (:meth:`SessionBook.report`), under the same session id, and
stays open; a later trace extends it, and its next report carries the earlier steps
too.  The library counts a session once, however often it is sent, and learns only
the steps it had not seen.  A named session ends when it idles past ``idle_s``
(reported once more if it gained steps since), when it is the least recently active
and room is needed, or when it reaches ``max_steps``: then it is reported and starts
afresh under a new id.

Which sessions are reported follows the gateway's rule
(:func:`~sidecar.agents.outcome.inferred_outcome`): a session with a failing call,
``abandoned`` unless the tool later succeeded (``unknown``); with ``report_clean``, a
session with no failure too (``unknown``).

Every step carries its estimated size in bytes; :attr:`SessionBook.bytes` is what the
open sessions hold.  Pure bookkeeping: no I/O, no lock (the assembler holds its own),
the clock is injected.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sidecar.agents.outcome import inferred_outcome
from sidecar.memory import SessionOutcome as Outcome
from sidecar.memory import Step

Ended = Literal["trace", "idle", "evicted", "full", "shed", "shutdown"]


@dataclass(frozen=True)
class SessionLimits:
    max_sessions: int = 10_000
    max_steps: int = 256
    idle_s: float = 300.0
    report_clean: bool = False

    def __post_init__(self) -> None:
        if self.max_sessions < 1 or self.max_steps < 1:
            raise ValueError("max_sessions and max_steps must be at least 1")
        if not self.idle_s > 0:
            raise ValueError("idle_s must be positive")


@dataclass(frozen=True)
class Report:
    """A session's steps so far, ready for ``report_session``."""

    session_id: str
    steps: tuple[Step, ...]
    outcome: Outcome
    task_input: str | None
    ended: Ended | None
    """Why the session ended; ``None`` when it stays open (reported after a trace)."""
    size: int
    """Estimated bytes of its steps, held until it is delivered."""
    source: str = ""
    """Who sent its spans (the token's name; empty: not known)."""


@dataclass
class _Session:
    session_id: str
    last_active: float
    source: str = ""
    steps: list[Step] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    reported: int = 0
    """Steps in the last report (0: never reported)."""


@dataclass
class SessionStats:
    opened: int = 0
    reports: int = 0
    unreported: int = 0
    evicted: int = 0
    shed: int = 0
    restarted: int = 0


class SessionBook:
    """Open sessions by key, least recently active first."""

    def __init__(
        self, limits: SessionLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or SessionLimits()
        self._clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self.bytes = 0
        self.stats = SessionStats()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    def record(self, key: str, step: Step, size: int, source: str = "") -> list[Report]:
        """Append ``step`` (sent by ``source``); returns the reports this forced (the
        session reached ``max_steps``, or another was evicted to make room)."""
        out: list[Report] = []
        session = self._sessions.get(key)
        if session is None:
            session = self._open(key, source)
            out += self._make_room()
        elif len(session.steps) >= self.limits.max_steps:
            report = self._end(key, "full")
            out += [report] if report else []
            self.stats.restarted += 1
            session = self._open(key, source)
        session.steps.append(step)
        session.sizes.append(size)
        self.bytes += size
        session.last_active = self._clock()
        self._sessions.move_to_end(key)
        return out

    def report(self, key: str) -> Report | None:
        """The session's steps so far when it has any not yet reported (and is one to
        report); it stays open."""
        session = self._sessions.get(key)
        return None if session is None else self._report(session, None)

    def close(self, key: str, why: Ended = "trace") -> Report | None:
        return self._end(key, why)

    def expire(self) -> list[Report]:
        """End every session idle past ``idle_s``."""
        deadline = self._clock() - self.limits.idle_s
        idle: list[str] = []
        for key, session in self._sessions.items():
            if session.last_active > deadline:
                break  # least recently active first: the rest are younger
            idle.append(key)
        return [r for key in idle if (r := self._end(key, "idle")) is not None]

    def shed_settled(self, target_bytes: int) -> list[Report]:
        """End sessions with nothing left to report (nothing is lost), least recently
        active first, until the book holds at most ``target_bytes``."""
        for key in [k for k, s in self._sessions.items() if not self._owes(s)]:
            if self.bytes <= target_bytes:
                break
            self.stats.shed += 1
            self._end(key, "shed")
        return []

    def shed(self, target_bytes: int) -> list[Report]:
        """End the least recently active sessions, reporting them, until the book holds
        at most ``target_bytes``."""
        out: list[Report] = []
        while self.bytes > target_bytes and self._sessions:
            self.stats.shed += 1
            report = self._end(next(iter(self._sessions)), "shed")
            out += [report] if report else []
        return out

    def close_all(self) -> list[Report]:
        return [r for k in list(self._sessions) if (r := self._end(k, "shutdown")) is not None]

    # ---- internals
    def _open(self, key: str, source: str = "") -> _Session:
        self.stats.opened += 1
        session = self._sessions[key] = _Session(uuid.uuid4().hex, self._clock(), source)
        return session

    def _make_room(self) -> list[Report]:
        out: list[Report] = []
        while len(self._sessions) > self.limits.max_sessions:
            self.stats.evicted += 1
            report = self._end(next(iter(self._sessions)), "evicted")
            out += [report] if report else []
        return out

    def _end(self, key: str, why: Ended) -> Report | None:
        session = self._sessions.pop(key, None)
        if session is None:
            return None
        self.bytes -= sum(session.sizes)
        report = self._report(session, why)
        if report is None and session.reported == 0:
            self.stats.unreported += 1
        return report

    def _owes(self, session: _Session) -> bool:
        """Whether the session has steps a report should still carry."""
        return len(session.steps) > session.reported and self._outcome(session) is not None

    def _outcome(self, session: _Session) -> Outcome | None:
        outcome = inferred_outcome(session.steps)
        if outcome is None and self.limits.report_clean and session.steps:
            return "unknown"
        return outcome

    def _report(self, session: _Session, why: Ended | None) -> Report | None:
        if not self._owes(session):
            return None
        outcome = self._outcome(session)
        assert outcome is not None
        session.reported = len(session.steps)
        self.stats.reports += 1
        return Report(
            session.session_id,
            tuple(session.steps),
            outcome,
            None,
            why,
            sum(session.sizes),
            session.source,
        )
