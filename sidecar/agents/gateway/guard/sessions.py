"""The gateway's sessions: the one book of observed sessions
(:class:`~sidecar.agents.sessions.SessionBook`), with what linking calls into sessions
needs.

A session is what :mod:`sidecar.agents.gateway.guard.linking` ties calls into: an MCP session, a
trace or a declared id, or calls linked by the values their outputs showed (*inferred*).
A session ends when its client closes it (a client that kept it: more than one call on
one connection), when it idles past the timeout (an inferred one past the link window),
when it is the least recently active one and room is needed, or when the agent declares
its outcome.  A failing call is reported at once (``failed``: an identical call of
another agent seconds later is judged with it), and a session quiet for ``settle_s`` is
(``settled``), whatever its window or timeout.  A session
:meth:`~sidecar.agents.sessions.SessionBook.flag`-ged (it ran a contest sample) is
reported whatever its steps, so that a sampled call's success reaches the memory.

A session whose context is unknown is never reported as a whole, whatever happened in
it: an inferred session of one call that nothing else joined, or a trace's of one call
(its call may have followed calls the gateway could not tie to it, so a success in it
could contradict a rule whose features it never showed, and a failure in it would teach
that something was missing).  It is counted (``unlinked``).

Pure bookkeeping: no I/O, no event loop, the clock is injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from sidecar.agents.gateway.guard.linking import call_key, output_values, token_name
from sidecar.agents.sessions import ObservedSession, SessionBook, SessionLimits, SessionReport
from sidecar.memory import Step

MAX_VALUES = 1_024
"""Grounded values an inferred session keeps for linking (the most recent)."""
LINK_WINDOW_S = 120.0


@dataclass
class _Joinable:
    """What an inferred session keeps while a call may still join it by value."""

    principal: str
    traced: bool = False
    """A trace opened it: while its context is not known it waits for the trace's next
    call as long as any session waits (the idle timeout), not the link window."""
    values: dict[str, None] = field(default_factory=dict)
    made: set[str] = field(default_factory=set)
    """The calls it made (tool and arguments): a call it already made, made again, is
    another task's as likely as its own."""


class LinkedSessionBook(SessionBook):
    """Sessions by key, least recently active first; inferred ones joinable by value
    within ``link_window_s`` (:mod:`sidecar.agents.gateway.guard.linking`)."""

    def __init__(
        self,
        limits: SessionLimits | None = None,
        link_window_s: float = LINK_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not link_window_s > 0:
            raise ValueError("link_window_s must be positive")
        super().__init__(limits, clock)
        self.link_window_s = link_window_s
        self._joinable: dict[str, _Joinable] = {}
        self.on_ended: Callable[[str], None] | None = None
        """Told of each session that leaves the book (what is kept beside it goes)."""

    def observe(
        self,
        key: str,
        step: Step,
        principal: str = "",
        inferred: bool = False,
        traced: bool = False,
    ) -> list[SessionReport]:
        """Append ``step``; returns the reports it made: its own when it failed, and
        those of sessions that ended to make room.  A session this opens is
        ``inferred`` (its context is not known until a second call joins it) or not, for
        ``principal``; ``traced``: a trace opened it."""
        new = key not in self
        if not new and not inferred and key in self._joinable:
            self.hold(key)  # its client declared it (the handle it was given)
        out = self.record(key, step, principal, grounded=not inferred)
        if new and inferred:
            self._joinable[key] = _Joinable(principal, traced)
        join = self._joinable.get(key)
        if join is not None:
            if len(join.made) < MAX_VALUES:
                join.made.add(call_key(step.tool, step.arguments))
            if step.output is not None:
                for value in output_values(step.output):
                    join.values.pop(value, None)
                    join.values[value] = None
                while len(join.values) > MAX_VALUES:
                    del join.values[next(iter(join.values))]
        if step.failed:
            # evidence now, not when the session ends
            session = self._sessions[key]
            out.append(self._report(session, "failed", "unknown", None))
        return out

    def hold(self, key: str) -> None:
        """Its client keeps it (a second call on one connection): its context is known,
        and no other connection joins it by value."""
        session = self._sessions.get(key)
        if session is not None:
            session.grounded = True
            self._joinable.pop(key, None)

    def link(self, principal: str, values: Iterable[str], call: str = "") -> str | None:
        """The inferred session of ``principal``, within the link window, whose outputs
        showed one of ``values``; ``None`` when none did, or when the gateway cannot be
        sure: two sessions showed them (agents of one token on the same objects), or the
        one that did already made this very ``call`` (:func:`call_key`)."""
        wanted = set(values)
        if not wanted:
            return None
        found = [k for k, j in self._joinables(principal) if not wanted.isdisjoint(j.values)]
        if len(found) != 1 or call in self._joinable[found[0]].made:
            return None
        return found[0]

    def latest(self, principal: str) -> str | None:
        """The most recently active inferred session of ``principal`` within the window."""
        return next((key for key, _ in self._joinables(principal)), None)

    def expire(self) -> list[SessionReport]:
        """Close every session idle past its timeout (an inferred one past the link
        window); report what the sessions quiet for ``settle_s`` saw since their last
        report."""
        return super().expire() + self.settle()

    def idle_after(self, key: str) -> float:
        join = self._joinable.get(key)
        if join is not None and not join.traced:
            return self.link_window_s
        return self.limits.idle_s

    def source(self, session: ObservedSession) -> str:
        return token_name(session.who)

    def ended(self, key: str) -> None:
        self._joinable.pop(key, None)
        if self.on_ended is not None:
            self.on_ended(key)

    def _joinables(self, principal: str) -> Iterator[tuple[str, _Joinable]]:
        horizon = self._clock() - self.link_window_s
        for key in reversed(self._sessions):
            if self._sessions[key].last_active < horizon:
                return  # least recently active first: the rest are older still
            join = self._joinable.get(key)
            if join is not None and join.principal == principal:
                yield key, join
