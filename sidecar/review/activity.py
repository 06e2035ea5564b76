"""What came in and what was decided, for people, as operations of
:class:`~sidecar.core.Sidecar` (inherited by it): the decisions a gateway notes for the
calls it relays, one session's story, and the home's activity hour by hour."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sidecar import validate
from sidecar.errors import InvalidInput
from sidecar.intake.sessions import key_of_session
from sidecar.results import (
    Activity,
    HourActivity,
    LearnedSession,
    SessionActivity,
    SourceActivity,
)
from sidecar.review.decisions import (
    DecisionLog,
    clean,
    kept_arguments,
    kept_reasons,
    lookup_decision,
)
from sidecar.rules.standing import source_of
from sidecar.storage.decisions import HOUR_S, Decision
from sidecar.trust.principals import LOCAL, check_source

if TYPE_CHECKING:
    from sidecar.storage.state import State

NOTED = ("allow", "warn", "block", "held", "sampled")
"""What a gateway may note of a call it relayed."""
MAX_NOTES = 1000
MAX_SESSION_ID = 200
MAX_HOURS = 24 * 14
REFUSALS = 20


def session_id_of(value: object) -> str | None:
    """A session id as a check, a lookup or a gateway names it: printable text."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_SESSION_ID
        or not value.isprintable()
        or clean(value) != value
    ):
        raise InvalidInput(
            f"session_id: 1-{MAX_SESSION_ID} printable characters (no control characters)"
        )
    return value


class ActivityDesk:
    """The decision log's operations."""

    decisions: DecisionLog
    state: State

    def note_calls(self, calls: Sequence[Mapping[str, Any]], source: str = LOCAL) -> int:
        """Keep what a gateway decided for calls it relayed (``calls``: each a mapping of
        ``session_id``, ``tool``, ``arguments``, ``decision`` (one of :data:`NOTED`) and
        ``reasons``, each reason a mapping of ``rule_id``, ``level``, ``explanation``,
        ``evidence``), attributed to ``source``; returns how many were kept."""
        check_source(source)
        if not isinstance(calls, Sequence) or len(calls) > MAX_NOTES:
            raise InvalidInput(f"calls: a list of at most {MAX_NOTES}")
        kept = [_noted(c, source) for c in calls]
        for d in kept:
            self.decisions.record(d)
        return len(kept)

    def session_activity(self, session_key: str, limit: int = 500) -> SessionActivity:
        """One session (its key as :meth:`sessions_page` gives it): what was learned of
        it and every decision filed under it, oldest first."""
        if not isinstance(session_key, str) or not 0 < len(session_key) <= 1024:
            raise InvalidInput("session_key: a string of 1-1024 characters")
        self.decisions.flush()
        learned = self.state.sessions.learned(session_key)
        source = source_of(session_key)
        seen = None if learned is None else LearnedSession(session_key, source, *learned)
        rows = self.state.decisions.of_session(session_key, max(1, min(int(limit), 5000)))
        return SessionActivity(session_key, source, seen, tuple(rows))

    def activity(self, hours: int = 48, now: float | None = None) -> Activity:
        """The last ``hours`` hour by hour, each source's rate, the newest refusals and
        when the first call was blocked."""
        if not isinstance(hours, int) or not 1 <= hours <= MAX_HOURS:
            raise InvalidInput(f"hours: 1-{MAX_HOURS}")
        self.decisions.flush()
        now = time.time() if now is None else now
        first_hour = int(now // HOUR_S) - hours + 1
        since = float(first_hour * HOUR_S)
        span = range(first_hour, first_hour + hours)
        counts: dict[int, Counter[str]] = {h: Counter() for h in span}
        for hour, kind, decision, n in self.state.decisions.per_hour(first_hour):
            if hour in counts:
                counts[hour]["lookups" if kind == "lookup" else decision] += n
        for at in self.state.sessions.first_seen_since(since):
            counts.setdefault(int(at // HOUR_S), Counter())["sessions"] += 1
        for at in self.state.moves.evicted_since(since):
            counts.setdefault(int(at // HOUR_S), Counter())["evicted"] += 1
        rows = tuple(_hour(h, counts[h]) for h in sorted(counts) if h in span)
        first = self.state.decisions.first("block")
        before = None if first is None else self._sessions_before(first, now)
        refusals = self.state.decisions.recent(("block", "held"), REFUSALS)
        return Activity(
            rows, first, before, self._sources(now), tuple(refusals), self.decisions.dropped
        )

    def _sessions_before(self, first: Decision, now: float) -> int:
        """Sessions learned before the first block, counted once a minute at most (it
        reads every session; only a forget changes it)."""
        kept = getattr(self, "_before", None)
        if kept is not None and kept[0] == first.decision_id and now - kept[1] < 60:
            return int(kept[2])
        n = self.state.sessions.count_before(first.at)
        self._before = (first.decision_id, now, n)
        return n

    def _sources(self, now: float) -> tuple[SourceActivity, ...]:
        hour = Counter({(s, k): n for s, k, n in self.state.decisions.per_source(now - HOUR_S)})
        day = Counter({(s, k): n for s, k, n in self.state.decisions.per_source(now - 86_400)})
        names = sorted({s for s, _ in day})
        return tuple(
            SourceActivity(
                s, hour[(s, "call")], hour[(s, "lookup")], day[(s, "call")], day[(s, "lookup")]
            )
            for s in names
        )


def _hour(hour: int, c: Counter[str]) -> HourActivity:
    return HourActivity(
        float(hour * HOUR_S), c["sessions"], c["lookups"], c["allow"], c["warn"],
        c["block"] + c["sampled"], c["held"], c["evicted"],
    )  # fmt: skip


def _noted(call: object, source: str) -> Decision:
    if not isinstance(call, Mapping):
        raise InvalidInput("each call noted is an object")
    sid = session_id_of(call.get("session_id"))
    key = None if sid is None else key_of_session(sid, source)
    if call.get("kind", "call") == "lookup":
        return _noted_lookup(call, source, key)
    if call.get("kind", "call") != "call":
        raise InvalidInput("kind: 'call' or 'lookup'")
    tool = validate.check_tool_id(call.get("tool"), "tool")
    decision = call.get("decision")
    if decision not in NOTED:
        raise InvalidInput(f"decision: one of {', '.join(NOTED)}")
    arguments = validate.call_arguments(call.get("arguments"))
    reasons = call.get("reasons") or []
    if not isinstance(reasons, list) or not all(isinstance(r, Mapping) for r in reasons):
        raise InvalidInput("reasons: a list of objects")
    return Decision(
        uuid.uuid4().hex, time.time(), "call", source, key, tool, str(decision),
        kept_arguments(arguments), kept_reasons(reasons),
    )  # fmt: skip


def _noted_lookup(call: Mapping[str, Any], source: str, key: str | None) -> Decision:
    """A lookup a gateway answered: its ``query`` and the tool ids it ``offered``."""
    query = call.get("query")
    offered = call.get("offered") or []
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("query: the lookup's text")
    if not isinstance(offered, list):
        raise InvalidInput("offered: a list of tool ids")
    tools = [validate.check_tool_id(t, "offered") for t in offered]
    return lookup_decision(source, key, query, tools)
