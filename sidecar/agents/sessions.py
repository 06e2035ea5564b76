"""The one book of observed agent sessions: the steps each session made, bounded, and the
rules that turn them into reports.  The gateway (which sees the calls it forwards) and
the OTLP intake (which reads them from traces) both keep their sessions here; each adds
only what its transport needs (the gateway links calls into sessions:
:class:`~sidecar.agents.gateway.guard.sessions.LinkedSessionBook`).

One set of limits (:class:`SessionLimits`, from the ``SIDECAR_SESSION_*`` settings):

- ``max_sessions`` open at once, and ``max_bytes`` of steps held (estimated,
  :func:`step_size`): past either, the least recently active session ends
  (``evicted``) and is reported;
- ``max_steps`` per session: a session that reaches it is reported (``full``) and goes
  on under a new id, with no steps.  The library learns a session sent again longer
  from its new steps only, recognising it by its first steps; a session that dropped
  its oldest steps instead would never be learned from again;
- ``idle_s``: a session idle that long ends (``idle``) and is reported.

What is reported: a session with a failing call (``abandoned`` when the last failure
was never followed by a success of the same tool, else ``unknown``:
:func:`~sidecar.agents.outcome.inferred_outcome`); with ``report_clean``, or once
:meth:`~SessionBook.flag`-ged, a session with no failure too (``unknown``); a session
its agent declared an outcome for, always.  A report carries every step the session
holds; a session is reported again only when it gained steps since (the library learns
only those) or when it ended with an outcome its reports did not say (a call's failure
is reported at once as ``unknown``: its session may yet recover).

A session whose context is unknown (one call that nothing tied to the calls before it:
``grounded=False`` and a single step) teaches only what its call alone shows, and is
counted ``unlinked``.

Pure bookkeeping: no I/O, no lock, no event loop; the clock is injected.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sidecar.agents.outcome import inferred_outcome
from sidecar.memory import SessionOutcome, Step

if TYPE_CHECKING:
    from sidecar.settings import Settings

Why = Literal[
    "failed", "settled", "traced",
    "closed", "idle", "evicted", "declared", "shutdown", "full", "shed", "trace",
]  # fmt: skip
"""Why a session was reported.  It goes on (:data:`ONGOING`): one of its calls just
failed (``failed``), it has been quiet for ``settle_s`` (``settled``), one of the
traces naming it ended (``traced``).  Or it ended: its client closed it, it idled, it
was the least recently active when room was needed (``evicted``, or ``shed`` by a
transport's memory limit), its agent declared its outcome, the process is stopping,
it reached ``max_steps`` (``full``: it goes on under a new id), its own trace ended."""
ONGOING: frozenset[str] = frozenset({"failed", "settled", "traced"})
MIB = 1_048_576


@dataclass(frozen=True)
class SessionLimits:
    max_sessions: int = 10_000
    max_steps: int = 256
    idle_s: float = 300.0
    report_clean: bool = False
    """Also report sessions with no failure (as ``unknown``): successes are evidence
    too, at the cost of one report per session."""
    max_bytes: int = 256 * MIB
    """Estimated bytes of steps the open sessions may hold."""
    settle_s: float = 2.0
    """How long a session with steps not yet reported waits, quiet, before they are
    (:meth:`SessionBook.settle`): what a session saw is evidence within seconds, whatever
    its timeout."""

    def __post_init__(self) -> None:
        if self.max_sessions < 1 or self.max_steps < 1 or self.max_bytes < 1:
            raise ValueError("max_sessions, max_steps and max_bytes must be at least 1")
        if not self.idle_s > 0:
            raise ValueError("idle_s must be positive")
        if not self.settle_s > 0:
            raise ValueError("settle_s must be positive")


@dataclass(frozen=True)
class SessionReport:
    """A session's steps so far, ready for the library (:mod:`sidecar.agents.sink`)."""

    session_id: str
    steps: tuple[Step, ...]
    outcome: SessionOutcome
    task_input: str | None
    ended: Why
    source: str = ""
    """Who made its calls (a token's name; ``""``: the home's token, or not known)."""
    context_known: bool = True
    """``False``: one call that nothing tied to the calls before it (the memory learns
    only what the call alone shows)."""
    size: int = 0
    """Estimated bytes of its steps."""
    failed_at: float | None = None
    """When the failing call that made this report came back (the book's clock), for
    how long evidence waited."""

    @property
    def ongoing(self) -> bool:
        """Its session goes on (it shares its steps with this report)."""
        return self.ended in ONGOING


@dataclass
class ObservedSession:
    report_id: str
    last_active: float
    who: str = ""
    """Whose calls these are (the transport's own name for its caller)."""
    steps: list[Step] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    reported: int = 0
    """Steps in its last report (0: never reported)."""
    told: SessionOutcome | None = None
    """The outcome its last report said."""
    flagged: bool = False
    grounded: bool = True
    """Its context is known whatever its steps (else once a second call joined it)."""

    @property
    def known(self) -> bool:
        return self.grounded or len(self.steps) >= 2

    @property
    def fresh(self) -> bool:
        return len(self.steps) > self.reported


@dataclass
class SessionStats:
    opened: int = 0
    reports: int = 0
    """Reports made, each session's every one."""
    reported: int = 0
    """Sessions that ended having been reported."""
    unreported: int = 0
    evicted: int = 0
    shed: int = 0
    restarted: int = 0
    """Sessions that reached ``max_steps`` and went on under a new id."""
    unlinked: int = 0
    """Sessions whose context is unknown (one call, tied to none): only what the call
    alone shows is learned from them."""
    at_failure: int = 0
    """Reports made as a call failed, before its session ended."""
    settled: int = 0
    """Reports of sessions quiet for ``settle_s``, before they ended."""
    ended: dict[str, int] = field(default_factory=dict)


def step_size(step: Step) -> int:
    """Estimated bytes of a step's evidence (its texts as JSON, plus the objects)."""
    parts = (step.tool, step.arguments, step.output, step.error)
    return 200 + len(json.dumps(parts, ensure_ascii=False, default=str))


class SessionBook:
    """Open sessions by key, least recently active first."""

    def __init__(
        self, limits: SessionLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or SessionLimits()
        self._clock = clock
        self._sessions: OrderedDict[str, ObservedSession] = OrderedDict()
        self._ended_ids: OrderedDict[str, str] = OrderedDict()
        """The report ids of the sessions that left the book last (as many as it holds
        open at most): what was noted of a call is filed under its session's id after
        the session ended too."""
        self.bytes = 0
        self.stats = SessionStats()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    def steps(self, key: str) -> list[Step]:
        """The session's steps so far (empty for a new session); marks it active."""
        return self.stamped_steps(key)[1]

    def report_id(self, key: str) -> str | None:
        """The id the session ``key`` is reported by, open or among the last ended
        (``None``: neither); it is not marked active."""
        session = self._sessions.get(key)
        return self._ended_ids.get(key) if session is None else session.report_id

    def stamped_steps(self, key: str) -> tuple[tuple[str, int], list[Step]]:
        """:meth:`steps`, with the stamp that tells one state of them from another: the
        session's id and how many steps it holds."""
        session = self._sessions.get(key)
        if session is None:
            return ("", 0), []
        self._touch(key, session)
        return (session.report_id, len(session.steps)), list(session.steps)

    def record(
        self, key: str, step: Step, who: str = "", size: int | None = None, grounded: bool = True
    ) -> list[SessionReport]:
        """Append ``step`` to session ``key`` (opened for ``who`` when new: ``grounded``,
        its context is known whatever its steps); returns the reports this forced (the
        session was full, or others ended to make room)."""
        out: list[SessionReport] = []
        session = self._sessions.get(key)
        if session is None:
            session = self._open(key, who, grounded)
        elif len(session.steps) >= self.limits.max_steps:
            out += self._rollover(key, session)
        session.steps.append(step)
        session.sizes.append(step_size(step) if size is None else size)
        self.bytes += session.sizes[-1]
        self._touch(key, session)
        return out + self._make_room(key)

    def flag(self, key: str) -> None:
        """Report session ``key`` even with no failure (as ``unknown``)."""
        session = self._sessions.get(key)
        if session is not None:
            session.flagged = True

    def known(self, key: str) -> bool:
        """Whether session ``key`` has steps and a known context (it would be reported)."""
        session = self._sessions.get(key)
        return session is not None and bool(session.steps) and session.known

    def report(self, key: str, why: Why = "traced") -> SessionReport | None:
        """What session ``key`` did since it was last reported, as evidence now (when it
        is one to report); it goes on."""
        session = self._sessions.get(key)
        if session is None or not session.fresh:
            return None
        outcome = self._outcome(session)
        return None if outcome is None else self._report(session, why, outcome, None)

    def declare(
        self, key: str, outcome: SessionOutcome, task_input: str | None
    ) -> SessionReport | None:
        """The agent's own verdict: reported now, whatever its steps (``None`` when it has
        none, or its context is unknown: one call says nothing of a task's outcome); the
        session starts afresh."""
        session = self._pop(key)
        if session is None or not session.steps:
            return None
        if not session.known:
            self._unlinked("declared")
            return None
        self._ended(session, "declared")
        return self._report(session, "declared", outcome, task_input)

    def close(self, key: str, why: Why = "closed") -> SessionReport | None:
        session = self._pop(key)
        return None if session is None else self._conclude(session, why)

    def expire(self) -> list[SessionReport]:
        """End every session idle past its timeout (:meth:`idle_after`)."""
        now = self._clock()
        alike = type(self).idle_after is SessionBook.idle_after
        idle: list[str] = []
        for key, session in self._sessions.items():
            if session.last_active <= now - self.idle_after(key):
                idle.append(key)
            elif alike:
                break  # least recently active first: the rest are younger
        return [r for k in idle if (r := self.close(k, "idle")) is not None]

    def idle_after(self, key: str) -> float:
        """How long session ``key`` may idle before it ends."""
        return self.limits.idle_s

    def settle(self) -> list[SessionReport]:
        """What each session quiet for ``settle_s`` did since it was last reported, when
        its successes are evidence too (``report_clean``, or flagged): a session that
        never ends cleanly still teaches within seconds."""
        quiet = self._clock() - self.limits.settle_s
        return [
            self._report(s, "settled", "unknown", None)
            for s in self._sessions.values()
            if s.last_active <= quiet and s.fresh and (s.flagged or self.limits.report_clean)
        ]

    def shed_settled(self, target_bytes: int) -> None:
        """End sessions with nothing left to report (nothing is lost), least recently
        active first, until the book holds at most ``target_bytes``."""
        for key in [k for k, s in self._sessions.items() if not self._owes(s)]:
            if self.bytes <= target_bytes:
                break
            self.stats.shed += 1
            self.close(key, "shed")

    def shed(self, target_bytes: int) -> list[SessionReport]:
        """End the least recently active sessions, reporting them, until the book holds
        at most ``target_bytes``."""
        out: list[SessionReport] = []
        while self.bytes > target_bytes and self._sessions:
            self.stats.shed += 1
            report = self.close(next(iter(self._sessions)), "shed")
            out += [report] if report else []
        return out

    def close_all(self) -> list[SessionReport]:
        return [r for k in list(self._sessions) if (r := self.close(k, "shutdown")) is not None]

    # ---- for a transport's own book
    def source(self, session: ObservedSession) -> str:
        """The ``source`` of its reports (the token's name its calls came with)."""
        return session.who

    def ended(self, key: str) -> None:
        """Session ``key`` left the book (a transport drops what it kept beside it)."""

    # ---- internals
    def _open(self, key: str, who: str, grounded: bool) -> ObservedSession:
        self.stats.opened += 1
        session = ObservedSession(uuid.uuid4().hex, self._clock(), who, grounded=grounded)
        self._sessions[key] = session
        return session

    def _pop(self, key: str) -> ObservedSession | None:
        session = self._sessions.pop(key, None)
        if session is not None:
            self.bytes -= sum(session.sizes)
            self._ended_ids[key] = session.report_id
            self._ended_ids.move_to_end(key)
            if len(self._ended_ids) > self.limits.max_sessions:
                self._ended_ids.popitem(last=False)
            self.ended(key)
        return session

    def _touch(self, key: str, session: ObservedSession) -> None:
        session.last_active = self._clock()
        self._sessions.move_to_end(key)

    def _rollover(self, key: str, session: ObservedSession) -> list[SessionReport]:
        """A full session is reported (``unknown``: it goes on, and may yet recover) and
        goes on under a new id, with no steps."""
        self.stats.restarted += 1
        report = None
        if session.known and self._owes(session):
            report = self._report(session, "full", "unknown", None)
        self.bytes -= sum(session.sizes)
        session.report_id, session.reported = uuid.uuid4().hex, 0
        session.steps, session.sizes = [], []
        return [report] if report is not None else []

    def _make_room(self, keep: str) -> list[SessionReport]:
        out: list[SessionReport] = []
        while len(self._sessions) > self.limits.max_sessions or (
            self.bytes > self.limits.max_bytes and len(self._sessions) > 1
        ):
            oldest = next(iter(self._sessions))
            if oldest == keep:
                break
            self.stats.evicted += 1
            report = self.close(oldest, "evicted")
            out += [report] if report else []
        return out

    def _outcome(self, session: ObservedSession) -> SessionOutcome | None:
        outcome = inferred_outcome(session.steps)
        if outcome is None and session.steps and (self.limits.report_clean or session.flagged):
            return "unknown"
        return outcome

    def _owes(self, session: ObservedSession) -> bool:
        """Whether the session has steps a report should still carry, or an outcome its
        reports did not say (it was reported as it went on, then ended abandoned)."""
        outcome = self._outcome(session)
        if outcome is None:
            return False
        return session.fresh or (outcome != "unknown" and outcome != session.told)

    def _conclude(self, session: ObservedSession, why: Why) -> SessionReport | None:
        if session.steps and not session.known:
            # one call nothing tied to others: its failure was evidence when it came
            # back (of what the call alone shows); a success is, when asked for
            self._unlinked(why)
            asked = session.flagged or self.limits.report_clean
            if asked and session.fresh and not any(s.failed for s in session.steps):
                return self._report(session, why, "unknown", None)
            return None
        owed = self._owes(session)
        self._ended(session, why, owed)
        outcome = self._outcome(session)
        return self._report(session, why, outcome, None) if owed and outcome else None

    def _ended(self, session: ObservedSession, why: Why, owed: bool = True) -> None:
        if owed or session.reported:
            self.stats.reported += 1
        else:
            self.stats.unreported += 1
        self.stats.ended[why] = self.stats.ended.get(why, 0) + 1

    def _unlinked(self, why: Why) -> None:
        self.stats.unreported += 1
        self.stats.unlinked += 1
        self.stats.ended[why] = self.stats.ended.get(why, 0) + 1

    def _report(
        self,
        session: ObservedSession,
        why: Why,
        outcome: SessionOutcome,
        task_input: str | None,
    ) -> SessionReport:
        session.reported, session.told = len(session.steps), outcome
        self.stats.reports += 1
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
            self.source(session),
            session.known,
            sum(session.sizes),
            self._clock() if why == "failed" else None,
        )


def session_limits(settings: Settings, report_clean: bool = True) -> SessionLimits:
    """The limits the ``SIDECAR_SESSION_*`` settings set (``report_clean``: a transport's
    own choice; both of the sidecar's report every observed session, since successes are
    what a failure is tested against)."""
    return SessionLimits(
        max_sessions=settings.session_max,
        max_steps=settings.session_max_steps,
        idle_s=settings.session_idle_s,
        report_clean=report_clean,
        max_bytes=settings.session_max_bytes,
    )
