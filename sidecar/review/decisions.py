"""The decision log: what was decided for each call and lookup that named its session,
kept for a person to read afterwards (:mod:`sidecar.storage.decisions`).

A check answers first; its decision is written behind it.  :meth:`DecisionLog.record`
only appends to a bounded buffer in memory, and a thread writes the buffer in one
transaction of its own concern (``decisions``) about every second, so that a check never
waits for the state's write lock.  Past the buffer's size (the state unwritable for
long) the oldest decisions are dropped and counted, never the answers; so are one
source's decisions past :attr:`DecisionLog.per_minute` a minute, so that one agent
checking in a loop cannot push every other agent's decisions out of the bounded table.
Everything kept is redacted and bounded: the arguments as the memory learns them
(secrets masked), each reason's words cut at :data:`TEXT`."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sidecar.intake.sessions import key_of_session
from sidecar.model import CallCheck
from sidecar.storage.decisions import Decision
from sidecar.storage.state import State
from sidecar.trust.principals import LOCAL
from sidecar.trust.redact import redact, redact_text

log = logging.getLogger("sidecar.review.decisions")
TEXT = 500
"""Characters kept of a reason's explanation or evidence, and of a lookup's query."""
ARGUMENTS = 4096
"""Characters of a call's arguments (as JSON) kept; larger ones are not kept."""
REASONS = 20
OFFERED = 50
FLUSH_S = 1.0
PROBE = 3
"""Rows tried alone after a batch failed before the state is taken to be down."""
PRUNE_EVERY = 1_000
"""Rows written between two prunes: the table holds at most ``keep`` plus these."""
MAX_SOURCES = 10_000
"""Sources whose minute is counted at once (past it the counts start again)."""


def clean(text: object) -> str:
    """Text every backend holds: no NUL (PostgreSQL's text cannot), no lone surrogate
    (UTF-8 cannot)."""
    s = str(text).replace("\x00", "\ufffd")
    return s.encode("utf-8", "replace").decode("utf-8")


def _cut(text: object, n: int = TEXT) -> str:
    s = clean(text)
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def kept_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    shown = json.loads(clean(json.dumps(redact(dict(arguments)), default=str)))
    if len(json.dumps(shown)) > ARGUMENTS:
        return {"\u2026": f"arguments of more than {ARGUMENTS} characters, not kept"}
    return dict(shown)


def kept_reasons(reasons: Iterable[Mapping[str, Any]]) -> tuple[dict[str, str], ...]:
    return tuple(
        {
            "rule_id": _cut(r.get("rule_id", ""), 64),
            "level": _cut(r.get("level", ""), 16),
            "explanation": _cut(r.get("explanation", "")),
            "evidence": _cut(r.get("evidence", "")),
        }
        for r in list(reasons)[:REASONS]
    )


def call_decision(
    source: str,
    session_key: str | None,
    tool: str,
    arguments: Mapping[str, Any],
    verdict: CallCheck,
) -> Decision:
    """A check's verdict as the log keeps it."""
    reasons = kept_reasons(
        {"rule_id": r.constraint_id, "level": r.level, "explanation": r.explanation,
         "evidence": r.evidence}
        for r in verdict.reasons
    )  # fmt: skip
    return Decision(
        uuid.uuid4().hex, time.time(), "call", source, session_key, tool, verdict.decision,
        kept_arguments(arguments), reasons,
    )  # fmt: skip


def lookup_decision(
    source: str, session_key: str | None, query: str, offered: Sequence[str]
) -> Decision:
    """A lookup's offer as the log keeps it."""
    return Decision(
        uuid.uuid4().hex, time.time(), "lookup", source, session_key,
        _cut(redact_text(query), 200), "offered", offered=tuple(offered[:OFFERED]),
    )  # fmt: skip


class DecisionLog:
    def __init__(
        self, state: State, keep: int = 100_000, buffered: int = 10_000, per_minute: int = 6_000
    ) -> None:
        self._state = state
        self.keep = keep
        self.per_minute = per_minute
        self._minutes: dict[str, tuple[int, int]] = {}
        self._unpruned = PRUNE_EVERY  # the first write prunes what an earlier run left
        self._buffer: deque[Decision] = deque(maxlen=buffered)
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.dropped = 0
        """Decisions dropped unwritten (the buffer full while the state refused writes)."""

    def record(self, decision: Decision) -> None:
        if not self._state.writable:
            return
        with self._lock:
            if self._closed:
                return
            if not self._admitted(decision.source, decision.at):
                self.dropped += 1
                return
            if len(self._buffer) == self._buffer.maxlen:
                self.dropped += 1
            self._buffer.append(decision)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sidecar-decisions", daemon=True
                )
                self._thread.start()

    def _admitted(self, source: str, at: float) -> bool:
        """At most :attr:`per_minute` decisions of one source a minute: one agent
        checking in a loop does not push everyone else's decisions out of the log."""
        minute = int(at // 60)
        if len(self._minutes) > MAX_SOURCES:
            self._minutes.clear()
        seen, count = self._minutes.get(source, (minute, 0))
        count = count + 1 if seen == minute else 1
        self._minutes[source] = (minute, count)
        return count <= self.per_minute

    def call(
        self,
        viewer: str | None,
        session_id: str | None,
        tool: str,
        arguments: Mapping[str, Any],
        verdict: CallCheck,
    ) -> None:
        """Keep a check's verdict when it named its session (of ``viewer``: an agent
        token's name, ``None`` the local source)."""
        if session_id is not None:
            source = viewer or LOCAL
            key = key_of_session(session_id, source)
            self.record(call_decision(source, key, tool, arguments, verdict))

    def lookup(
        self, viewer: str | None, session_id: str | None, query: str, offered: Sequence[str]
    ) -> None:
        """Keep the tools a lookup offered when it named its session (as :meth:`call`)."""
        if session_id is not None:
            source = viewer or LOCAL
            key = key_of_session(session_id, source)
            self.record(lookup_decision(source, key, query, offered))

    def flush(self) -> int:
        """Write what is buffered now; returns how many were written.  A batch the state
        refuses is tried a row at a time: rows it refuses one by one are dropped (and
        counted), so one row no backend can hold never holds up the rest; when it
        refuses the first rows alone too, the state is down, and the batch waits for
        the next flush (bounded by the buffer)."""
        with self._flushing:
            with self._lock:
                rows = list(self._buffer)
                self._buffer.clear()
            if not rows:
                return 0
            try:
                self._write(rows)
                return len(rows)
            except Exception as exc:  # a poisoned row, or the state down: see below
                log.warning("decisions not written as a batch: %s", type(exc).__name__)
            written, refused = 0, []
            for n, row in enumerate(rows):
                if n >= PROBE and not written:
                    refused.extend(rows[n:])
                    break
                try:
                    self._write([row])
                    written += 1
                except Exception:
                    refused.append(row)
            if written:
                self.dropped += len(refused)  # rows no write could take
            else:
                self._requeue(refused)
            return written

    def _write(self, rows: list[Decision]) -> None:
        with self._state.tx("decisions") as tx:
            self._state.decisions.insert(tx, rows)
            self._unpruned += len(rows)
            if self._unpruned >= PRUNE_EVERY:
                self._state.decisions.prune(tx, self.keep)
                self._unpruned = 0

    def _requeue(self, rows: list[Decision]) -> None:
        """Put ``rows`` back in front of what came meanwhile, as many as there is room
        for."""
        with self._lock:
            room = (self._buffer.maxlen or 0) - len(self._buffer)
            self.dropped += max(0, len(rows) - room)
            self._buffer.extendleft(reversed(rows[-room:] if room > 0 else []))

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(FLUSH_S)
            try:
                self.flush()
            except Exception as exc:  # the log must not stop; the next flush retries
                log.warning("decision log flush failed: %s", type(exc).__name__)

    def close(self) -> None:
        with self._lock:  # no record() appends after this: its check is under the lock
            self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
        self.flush()
