"""The gateway's memory of agent sessions: the steps each one has executed, bounded, and
the rule that turns a finished session into a report.

A session is what :mod:`sidecar.agents.gateway.linking` ties calls into: an MCP session, a
trace or a declared id, or calls linked by the values their outputs showed (*inferred*).
A session ends when its client closes it (a client that kept it: more than one call on
one connection), when it idles past the timeout (an inferred one past the link window),
when it is the least recently active one and room is needed, or when the agent declares
its outcome.  It is reported when its agent declared an outcome, or when one of its steps
failed: ``abandoned`` if the last failing call was never followed by a success of the
same tool, else ``unknown`` (it recovered; whether the task succeeded is not known).
A session keeps its last ``max_steps`` steps; older ones are dropped and counted.  A
session :meth:`~SessionBook.flag`-ged (it ran a contest sample) is reported whatever its
steps, so that a sampled call's success reaches the memory.

A session whose context is unknown is never reported, whatever happened in it: an
inferred session of one call that nothing else joined, or a trace's of one call (its
call may have followed calls the gateway could not tie to it, so a success in it could
contradict a rule whose features it never showed, and a failure in it would teach that
something was missing).  It is counted (``unlinked``).

Pure bookkeeping: no I/O, no event loop, the clock is injected.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from sidecar.agents.gateway.backend import Outcome, Step
from sidecar.agents.gateway.linking import call_key, output_values, token_name
from sidecar.agents.outcome import inferred_outcome

EndReason = Literal["closed", "idle", "evicted", "declared", "shutdown", "failed", "settled"]
"""Why a session was reported: it ended (closed, idle, evicted to make room, declared,
at shutdown); or it goes on, and what it saw is evidence now: one of its calls just
failed (``failed``), or it has been quiet for ``settle_s`` (``settled``).  Its end adds
what came after, and its outcome."""
MAX_VALUES = 1_024
"""Grounded values an inferred session keeps for linking (the most recent)."""


@dataclass(frozen=True)
class SessionLimits:
    max_sessions: int = 1_000
    max_steps: int = 256
    idle_timeout_s: float = 300.0
    report_clean: bool = False
    """Also report sessions with no failure (as ``unknown``): successes are evidence
    too, at the cost of one report per session."""
    link_window_s: float = 120.0
    """How long after its last activity an inferred session may still be joined by a
    call (:mod:`sidecar.agents.gateway.linking`); it is concluded then."""
    settle_s: float = 2.0
    """How long a session with calls not yet reported waits, quiet, before they are
    (a failing call is reported at once): what a session saw is evidence within seconds,
    whatever its window or timeout."""

    def __post_init__(self) -> None:
        if self.max_sessions < 1 or self.max_steps < 1:
            raise ValueError("max_sessions and max_steps must be at least 1")
        if not self.idle_timeout_s > 0:
            raise ValueError("idle_timeout_s must be positive")
        if not self.link_window_s > 0:
            raise ValueError("link_window_s must be positive")
        if not self.settle_s > 0:
            raise ValueError("settle_s must be positive")


@dataclass(frozen=True)
class SessionReport:
    """A finished session, ready for ``report_session``."""

    session_id: str
    steps: tuple[Step, ...]
    outcome: Outcome
    task_input: str | None
    ended: EndReason
    dropped_steps: int = 0
    source: str = ""
    """The named token its calls came with (``""``: the home's token, or none)."""
    context_known: bool = True
    """``False``: one call that nothing tied to the calls before it (the memory learns
    only what the call alone shows)."""
    failed_at: float | None = None
    """When the failing call that made this report came back (``time.monotonic``), for
    how long evidence waited."""


@dataclass
class _Session:
    report_id: str
    steps: deque[Step]
    last_active: float
    dropped: int = 0
    calls: int = 0
    must_report: bool = False
    principal: str = ""
    grounded: bool = True
    """Its context is known: a kept MCP session, a declared id (or, once a second call
    joined it, an inferred session)."""
    inferred: bool = False
    """It may be joined by a call that uses a value its outputs showed."""
    traced: bool = False
    """A trace opened it: while its context is not known it waits for the trace's next
    call as long as any session waits (the idle timeout), not the link window."""
    values: dict[str, None] = field(default_factory=dict)
    reported: int = 0
    """Its calls reported so far (``calls`` at its last report)."""
    made: set[str] = field(default_factory=set)
    """The calls it made (tool and arguments), while it may be joined by value: a call it
    already made, made again, is another task's as likely as its own."""

    @property
    def known(self) -> bool:
        return self.grounded or self.calls >= 2


@dataclass
class SessionStats:
    opened: int = 0
    reported: int = 0
    unreported: int = 0
    evicted: int = 0
    dropped_steps: int = 0
    unlinked: int = 0
    """Sessions whose context is unknown (one call, tied to none): only what the call
    alone shows is learned from them."""
    at_failure: int = 0
    """Reports sent as a call failed, before its session ended."""
    settled: int = 0
    """Reports of sessions quiet for ``settle_s``, before they ended."""
    ended: dict[str, int] = field(default_factory=dict)


class SessionBook:
    """Sessions by key, least recently active first."""

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

    def stamped_steps(self, key: str) -> tuple[tuple[str, int], list[Step]]:
        """:meth:`steps`, with the stamp that tells one state of them from another: the
        session's own id and how many steps it has recorded in all (its steps are the
        last of those, up to ``max_steps``)."""
        session = self._sessions.get(key)
        if session is None:
            return ("", 0), []
        self._touch(key, session)
        return (session.report_id, session.calls), list(session.steps)

    def record(
        self,
        key: str,
        step: Step,
        principal: str = "",
        inferred: bool = False,
        traced: bool = False,
    ) -> list[SessionReport]:
        """Append ``step``; returns the reports of sessions evicted to make room.  A
        session this opens is ``inferred`` (its context is not known until a second call
        joins it) or not, for ``principal``; ``traced``: a trace opened it."""
        session = self._sessions.get(key)
        evicted: list[SessionReport] = []
        if session is None:
            session = self._open(key)
            session.principal, session.inferred = principal, inferred
            session.traced = traced
            session.grounded = not inferred
            evicted = self._make_room()
        elif session.inferred and not inferred:
            self.hold(key)  # its client declared it (the handle it was given)
        if len(session.steps) == session.steps.maxlen:
            session.dropped += 1
            self.stats.dropped_steps += 1
        session.steps.append(step)
        session.calls += 1
        if session.inferred:
            if len(session.made) < MAX_VALUES:
                session.made.add(call_key(step.tool, step.arguments))
            if step.output is not None:
                for value in output_values(step.output):
                    session.values.pop(value, None)
                    session.values[value] = None
                while len(session.values) > MAX_VALUES:
                    del session.values[next(iter(session.values))]
        self._touch(key, session)
        if step.failed:
            # evidence now, not when the session ends: an identical call of another
            # agent seconds later is judged with it
            evicted.append(self._report(session, "failed", "unknown", None))
        return evicted

    def hold(self, key: str) -> None:
        """Its client keeps it (a second call on one connection): its context is known,
        and no other connection joins it by value."""
        session = self._sessions.get(key)
        if session is not None:
            session.grounded, session.inferred = True, False
            session.values.clear()

    def link(self, principal: str, values: Iterable[str], call: str = "") -> str | None:
        """The inferred session of ``principal``, within the link window, whose outputs
        showed one of ``values``; ``None`` when none did, or when the gateway cannot be
        sure: two sessions showed them (agents of one token on the same objects), or the
        one that did already made this very ``call`` (:func:`call_key`)."""
        wanted = set(values)
        if not wanted:
            return None
        found = [k for k, s in self._joinable(principal) if not wanted.isdisjoint(s.values)]
        if len(found) != 1 or call in self._sessions[found[0]].made:
            return None
        return found[0]

    def latest(self, principal: str) -> str | None:
        """The most recently active inferred session of ``principal`` within the window."""
        return next((key for key, _ in self._joinable(principal)), None)

    def _joinable(self, principal: str) -> Iterator[tuple[str, _Session]]:
        horizon = self._clock() - self.limits.link_window_s
        for key in reversed(self._sessions):
            session = self._sessions[key]
            if session.last_active < horizon:
                return  # least recently active first: the rest are older still
            if session.inferred and session.principal == principal:
                yield key, session

    def flag(self, key: str) -> None:
        """Report session ``key`` when it ends, even with no failure (as ``unknown``)."""
        session = self._sessions.get(key)
        if session is not None:
            session.must_report = True

    def known(self, key: str) -> bool:
        """Whether session ``key`` has steps and a known context (it would be reported)."""
        session = self._sessions.get(key)
        return session is not None and bool(session.steps) and session.known

    def declare(self, key: str, outcome: Outcome, task_input: str | None) -> SessionReport | None:
        """The agent's own verdict: reported now, whatever its steps (``None`` when it has
        none, or its context is unknown: one call says nothing of a task's outcome); the
        session starts afresh."""
        session = self._sessions.pop(key, None)
        if session is None or not session.steps:
            return None
        if not session.known:
            self._unlinked("declared")
            return None
        return self._finish(session, "declared", outcome, task_input)

    def close(self, key: str, why: EndReason = "closed") -> SessionReport | None:
        session = self._sessions.pop(key, None)
        return None if session is None else self._conclude(session, why)

    def expire(self) -> list[SessionReport]:
        """Close every session idle past the timeout (an inferred one past the link
        window); report what the sessions quiet for ``settle_s`` saw since their last
        report (:meth:`settle`)."""
        now = self._clock()
        limits = self.limits
        idle = [
            k
            for k, s in self._sessions.items()
            if s.last_active
            <= now
            - (limits.link_window_s if s.inferred and not s.traced else limits.idle_timeout_s)
        ]
        ended = [r for k in idle if (r := self.close(k, "idle")) is not None]
        return ended + self.settle(now)

    def settle(self, now: float) -> list[SessionReport]:
        """What each session quiet since ``now - settle_s`` did since it was last
        reported, as evidence now (its successes too, when successes are reported): a
        session a stateless client's calls make ends only at its window."""
        quiet = now - self.limits.settle_s
        out = []
        for session in self._sessions.values():
            if session.last_active > quiet or session.calls <= session.reported:
                continue
            if session.must_report or self.limits.report_clean:
                out.append(self._report(session, "settled", "unknown", None))
        return out

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
        fresh = session.calls > session.reported
        if session.steps and not session.known:
            # one call nothing tied to others: its failure was evidence when it came
            # back (of what the call alone shows); a success is, when asked for
            self._unlinked(why)
            asked = session.must_report or self.limits.report_clean
            if asked and fresh and not any(s.failed for s in session.steps):
                return self._report(session, why, "unknown", None)
            return None
        outcome = inferred_outcome(session.steps)
        if outcome is None and (self.limits.report_clean or session.must_report) and fresh:
            outcome = "unknown"  # (one reported whole already, with no outcome, adds nothing)
        if outcome is None or not session.steps:
            self.stats.unreported += 1
            self._count(why)
            return None
        return self._finish(session, why, outcome, None)

    def _unlinked(self, why: EndReason) -> None:
        self.stats.unreported += 1
        self.stats.unlinked += 1
        self._count(why)

    def _finish(
        self, session: _Session, why: EndReason, outcome: Outcome, task_input: str | None
    ) -> SessionReport:
        self.stats.reported += 1
        self._count(why)
        return self._report(session, why, outcome, task_input)

    def _report(
        self, session: _Session, why: EndReason, outcome: Outcome, task_input: str | None
    ) -> SessionReport:
        session.reported = session.calls
        if why == "failed":
            self.stats.at_failure += 1
        elif why == "settled":
            self.stats.settled += 1
        return SessionReport(
            session.report_id,
            tuple(session.steps),
            outcome,
            task_input,
            why,
            session.dropped,
            token_name(session.principal),
            session.known,
            self._clock() if why == "failed" else None,
        )

    def _count(self, why: EndReason) -> None:
        self.stats.ended[why] = self.stats.ended.get(why, 0) + 1
