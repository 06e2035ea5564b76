"""The gateway's memory of MCP sessions: the steps each one has executed, bounded, and
the rule that turns a finished session into a report.

A session ends when its client closes it, when it idles past the timeout, when it is
the least recently active one and room is needed, or when the agent declares its
outcome.  It is reported when its agent declared an outcome, or when one of its steps
failed: ``abandoned`` if the last failing call was never followed by a success of the
same tool, else ``unknown`` (it recovered; whether the task succeeded is not known).
A session keeps its last ``max_steps`` steps; older ones are dropped and counted.  A
session :meth:`~SessionBook.flag`-ged (it ran a contest sample) is reported whatever its
steps, so that a sampled call's success reaches the memory.

Pure bookkeeping: no I/O, no event loop, the clock is injected.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sidecar.gateway.backend import Outcome, Step

EndReason = Literal["closed", "idle", "evicted", "declared", "shutdown"]


@dataclass(frozen=True)
class SessionLimits:
    max_sessions: int = 1_000
    max_steps: int = 256
    idle_timeout_s: float = 300.0
    report_clean: bool = False
    """Also report sessions with no failure (as ``unknown``): successes are evidence
    too, at the cost of one report per session."""

    def __post_init__(self) -> None:
        if self.max_sessions < 1 or self.max_steps < 1:
            raise ValueError("max_sessions and max_steps must be at least 1")
        if not self.idle_timeout_s > 0:
            raise ValueError("idle_timeout_s must be positive")


@dataclass(frozen=True)
class SessionReport:
    """A finished session, ready for ``report_session``."""

    session_id: str
    steps: tuple[Step, ...]
    outcome: Outcome
    task_input: str | None
    ended: EndReason
    dropped_steps: int = 0


@dataclass
class _Session:
    report_id: str
    steps: deque[Step]
    last_active: float
    dropped: int = 0
    calls: int = 0
    must_report: bool = False


def inferred_outcome(steps: Sequence[Step]) -> Outcome | None:
    """``abandoned`` when the last failure was never followed by a success of the same
    tool, ``unknown`` when it was, ``None`` when nothing failed."""
    steps = list(steps)
    last = next((i for i in range(len(steps) - 1, -1, -1) if steps[i].failed), None)
    if last is None:
        return None
    tool = steps[last].tool
    recovered = any(s.tool == tool and not s.failed for s in steps[last + 1 :])
    return "unknown" if recovered else "abandoned"


@dataclass
class SessionStats:
    opened: int = 0
    reported: int = 0
    unreported: int = 0
    evicted: int = 0
    dropped_steps: int = 0
    ended: dict[str, int] = field(default_factory=dict)


class SessionBook:
    """Sessions by key (an MCP session id, or a connection's own id), least recently
    active first."""

    def __init__(
        self, limits: SessionLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or SessionLimits()
        self._clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self.stats = SessionStats()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    def steps(self, key: str) -> list[Step]:
        """The session's steps so far (empty for a new session); marks it active."""
        session = self._sessions.get(key)
        if session is None:
            return []
        self._touch(key, session)
        return list(session.steps)

    def record(self, key: str, step: Step) -> list[SessionReport]:
        """Append ``step``; returns the reports of sessions evicted to make room."""
        session = self._sessions.get(key)
        evicted: list[SessionReport] = []
        if session is None:
            session = self._open(key)
            evicted = self._make_room()
        if len(session.steps) == session.steps.maxlen:
            session.dropped += 1
            self.stats.dropped_steps += 1
        session.steps.append(step)
        session.calls += 1
        self._touch(key, session)
        return evicted

    def flag(self, key: str) -> None:
        """Report session ``key`` when it ends, even with no failure (as ``unknown``)."""
        session = self._sessions.get(key)
        if session is not None:
            session.must_report = True

    def declare(self, key: str, outcome: Outcome, task_input: str | None) -> SessionReport | None:
        """The agent's own verdict: reported now, whatever its steps (``None`` when it has
        none); the session starts afresh."""
        session = self._sessions.pop(key, None)
        if session is None or not session.steps:
            return None
        return self._finish(session, "declared", outcome, task_input)

    def close(self, key: str, why: EndReason = "closed") -> SessionReport | None:
        session = self._sessions.pop(key, None)
        return None if session is None else self._conclude(session, why)

    def expire(self) -> list[SessionReport]:
        """Close every session idle past the timeout."""
        deadline = self._clock() - self.limits.idle_timeout_s
        idle = [k for k, s in self._sessions.items() if s.last_active <= deadline]
        return [r for k in idle if (r := self.close(k, "idle")) is not None]

    def close_all(self) -> list[SessionReport]:
        return [r for k in list(self._sessions) if (r := self.close(k, "shutdown")) is not None]

    # -- internals
    def _new(self) -> _Session:
        self.stats.opened += 1
        return _Session(uuid.uuid4().hex, deque(maxlen=self.limits.max_steps), self._clock())

    def _open(self, key: str) -> _Session:
        session = self._new()
        self._sessions[key] = session
        return session

    def _touch(self, key: str, session: _Session) -> None:
        session.last_active = self._clock()
        self._sessions.move_to_end(key)

    def _make_room(self) -> list[SessionReport]:
        out: list[SessionReport] = []
        while len(self._sessions) > self.limits.max_sessions:
            _key, oldest = self._sessions.popitem(last=False)
            self.stats.evicted += 1
            report = self._conclude(oldest, "evicted")
            if report is not None:
                out.append(report)
        return out

    def _conclude(self, session: _Session, why: EndReason) -> SessionReport | None:
        outcome = inferred_outcome(session.steps)
        if outcome is None and (self.limits.report_clean or session.must_report) and session.steps:
            outcome = "unknown"
        if outcome is None:
            self.stats.unreported += 1
            self._count(why)
            return None
        return self._finish(session, why, outcome, None)

    def _finish(
        self, session: _Session, why: EndReason, outcome: Outcome, task_input: str | None
    ) -> SessionReport:
        self.stats.reported += 1
        self._count(why)
        return SessionReport(
            session.report_id, tuple(session.steps), outcome, task_input, why, session.dropped
        )

    def _count(self, why: EndReason) -> None:
        self.stats.ended[why] = self.stats.ended.get(why, 0) + 1
