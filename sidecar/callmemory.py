"""The call-level failure memory of a home: the learner of :mod:`sidecar.memory`, kept in
the state database, with the lifecycle of every condition it learns.

The learner's state (derived features of failing calls, statistics of succeeding ones;
never raw outputs) is one snapshot row, rewritten in the transaction of the intake batch
that taught it something, with a revision: a process that did not write it reloads it
when the revision moves.  Its conditions are re-derived from that state; the
``conditions`` table keeps what derivation forgets: when each was first and last
confirmed, the operator's lifts and reinstatements, and the last form of a condition
that left (it retired: its evidence no longer holds), so that it can be read and
reinstated.  Status follows :mod:`sidecar.lifecycle`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sidecar import learned
from sidecar.lifecycle import ENFORCED, Lifecycle, Status
from sidecar.memory import (
    FailureCondition,
    FailureMemory,
    Reason,
    Session,
    Step,
    Thresholds,
    Trace,
    Verdict,
    assess,
    may_apply,
)
from sidecar.state import StateStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS call_memory (
    id INTEGER PRIMARY KEY CHECK (id = 1), snapshot TEXT NOT NULL, revision INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS conditions (
    condition_id TEXT PRIMARY KEY, tool TEXT NOT NULL, signature TEXT NOT NULL,
    record TEXT NOT NULL, pointer TEXT, valid_from REAL NOT NULL, last_seen REAL NOT NULL,
    support INTEGER NOT NULL, contradictions INTEGER NOT NULL,
    lifted INTEGER NOT NULL DEFAULT 0, baseline INTEGER NOT NULL DEFAULT 0,
    present INTEGER NOT NULL DEFAULT 1, invalid_at REAL
);
CREATE INDEX IF NOT EXISTS conditions_tool ON conditions(tool);
CREATE TABLE IF NOT EXISTS learned_sessions (session_key TEXT PRIMARY KEY, at REAL NOT NULL);
"""
SCHEMA += learned.SCHEMA


@dataclass(frozen=True)
class ConditionState:
    """A learned (or hand-written) condition with its lifecycle."""

    condition: FailureCondition
    status: Status
    valid_from: float
    last_seen: float
    invalid_at: float | None
    pointer: str | None


class CallMemory:
    def __init__(self, state: StateStore, lifecycle: Lifecycle, thresholds: Thresholds) -> None:
        self._state = state
        self._lifecycle = lifecycle
        self._thresholds = thresholds
        self._lock = threading.RLock()
        self._memory = FailureMemory()
        self._revision = -1
        self._states: dict[str, ConditionState] = {}
        self._states_rev = -1

    # ---- loading ----------------------------------------------------------------------
    def _revision_now(self) -> int:
        try:
            row = self._state.db.execute("SELECT revision FROM call_memory WHERE id=1").fetchone()
        except sqlite3.OperationalError:
            return 0  # a home written before this memory existed, opened read-only
        return int(row[0]) if row else 0

    def _fresh(self) -> FailureMemory:
        """The learner as the state has it now (reloaded when another writer moved it)."""
        with self._lock:
            rev = self._revision_now()
            if rev != self._revision:
                row = self._state.db.execute(
                    "SELECT snapshot FROM call_memory WHERE id=1"
                ).fetchone()
                self._memory = (
                    FailureMemory.from_dict(json.loads(row[0])) if row else FailureMemory()
                )
                self._revision = rev
            return self._memory

    # ---- learning ---------------------------------------------------------------------
    def learn(
        self,
        sessions: Sequence[Session],
        manual: Sequence[FailureCondition] = (),
        pointers: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        """Teach the memory these sessions (and hand-written conditions), then record
        what its conditions now are, in one transaction.  ``pointers``: for a (tool,
        normalized signature), the cold record of its latest failing call."""
        if not sessions and not manual:
            return
        with self._lock, self._state.tx() as db:
            memory = self._fresh()
            now = time.time()
            # a session is learned once: a replayed report, or a batch sent again after
            # a failure further on, teaches nothing twice; sent again longer, its new
            # steps only (:func:`sidecar.learned.unlearned_from`)
            fresh = [
                (s, start)
                for s in dict((s.session_id, s) for s in sessions).values()
                if (start := learned.unlearned_from(db, s, now)) is not None
            ]
            if not fresh and not manual:
                return
            touched = {s.tool for session, start in fresh for s in session.steps[start:]}
            touched |= {c.tool for c in manual}
            for session, start in fresh:
                memory.add_session(session, start)
            for condition in manual:
                memory.add_condition(condition)
            self._revision += 1
            db.execute(
                "INSERT INTO call_memory VALUES (1, ?, ?) ON CONFLICT(id) DO UPDATE "
                "SET snapshot=excluded.snapshot, revision=excluded.revision",
                (json.dumps(memory.to_dict(), separators=(",", ":")), self._revision),
            )
            self._sync(db, memory, touched, pointers or {}, now)

    def _sync(
        self,
        db: Any,
        memory: FailureMemory,
        tools: Iterable[str],
        pointers: Mapping[tuple[str, str], str],
        now: float,
    ) -> None:
        for tool in sorted(tools):
            current = {c.condition_id: c for c in memory.conditions(tool)}
            known = {
                cid: (int(support), int(present))
                for cid, support, present in db.execute(
                    "SELECT condition_id, support, present FROM conditions WHERE tool=?", (tool,)
                )
            }
            for cid, c in current.items():
                record = json.dumps(c.to_dict(), separators=(",", ":"))
                pointer = pointers.get((c.tool, c.signature))
                if cid not in known:
                    db.execute(
                        "INSERT INTO conditions(condition_id, tool, signature, record, pointer, "
                        "valid_from, last_seen, support, contradictions) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (cid, tool, c.signature, record, pointer, now, now, c.support,
                         c.contradictions),
                    )  # fmt: skip
                    continue
                confirmed = c.support > known[cid][0]
                db.execute(
                    "UPDATE conditions SET record=?, support=?, contradictions=?, present=1, "
                    "pointer=COALESCE(?, pointer), last_seen=CASE WHEN ? THEN ? ELSE last_seen "
                    "END, invalid_at=CASE WHEN present=0 THEN NULL ELSE invalid_at END "
                    "WHERE condition_id=?",
                    (record, c.support, c.contradictions, pointer if confirmed else None,
                     confirmed, now, cid),
                )  # fmt: skip
                self._mark_retired(db, cid, now)
            gone = [cid for cid, (_s, present) in known.items() if present and cid not in current]
            # derivation dropped it (its value succeeded since, or its confidence fell):
            # it retires, and its last form stays readable
            db.executemany(
                "UPDATE conditions SET present=0, invalid_at=? WHERE condition_id=?",
                [(now, cid) for cid in gone],
            )
        self._states_rev = -1

    def _mark_retired(self, db: Any, cid: str, now: float) -> None:
        db.execute(
            "UPDATE conditions SET invalid_at=? WHERE condition_id=? AND invalid_at IS NULL "
            "AND contradictions - baseline >= ?",
            (now, cid, self._lifecycle.retire_after),
        )

    # ---- the conditions and their lifecycle -------------------------------------------
    def states(self) -> dict[str, ConditionState]:
        """Every condition ever learned or written, by id, with its status."""
        with self._lock:
            self._fresh()
            if self._states_rev == self._revision and self._states:
                return self._states
            now = time.time()
            out: dict[str, ConditionState] = {}
            try:
                rows = self._state.db.execute(
                    "SELECT condition_id, record, pointer, valid_from, last_seen, contradictions, "
                    "lifted, baseline, present, invalid_at FROM conditions"
                ).fetchall()
            except sqlite3.OperationalError:
                rows = []  # a home written before this memory existed, opened read-only
            for cid, record, pointer, since, seen, contra, lifted, base, present, inv in rows:
                status = self._lifecycle.status(bool(lifted), int(contra), int(base), seen, now)
                if not present and status != "lifted":
                    status = "retired"
                condition = FailureCondition.from_dict(json.loads(record))
                out[cid] = ConditionState(condition, status, since, seen, inv, pointer)
            self._states, self._states_rev = out, self._revision
            return out

    def enforced(self, tool: str) -> list[FailureCondition]:
        """The conditions a check of ``tool`` applies: active ones as they are, contested
        ones as warnings only."""
        memory = self._fresh()
        states = self.states()
        out: list[FailureCondition] = []
        for c in memory.conditions(tool):
            st = states.get(c.condition_id)
            status = st.status if st is not None else "active"
            if status not in ENFORCED:
                continue
            out.append(c if status == "active" else replace(c, warn_only=True))
        return out

    def set_status(self, condition_id: str, lifted: bool) -> bool:
        """Lift, or reinstate (counting only contradictions from now on); returns whether
        the condition exists."""
        with self._lock, self._state.tx() as db:
            if lifted:
                found = db.execute(
                    "UPDATE conditions SET lifted=1 WHERE condition_id=?", (condition_id,)
                ).rowcount
            else:
                found = db.execute(
                    "UPDATE conditions SET lifted=0, baseline=contradictions, invalid_at=NULL, "
                    "present=1, last_seen=? WHERE condition_id=?",
                    (time.time(), condition_id),
                ).rowcount
                if found:
                    self._reinstate_form(db, condition_id)
            self._revision += 1
            db.execute("UPDATE call_memory SET revision=? WHERE id=1", (self._revision,))
            self._states_rev = -1
            return bool(found)

    def _reinstate_form(self, db: Any, condition_id: str) -> None:
        """A condition derivation no longer produces comes back as the operator's own
        (hand-written) condition, in its last learned form."""
        memory = self._memory
        current = {c.condition_id for c in memory.conditions()}
        if condition_id in current:
            return
        row = db.execute(
            "SELECT record FROM conditions WHERE condition_id=?", (condition_id,)
        ).fetchone()
        last = FailureCondition.from_dict(json.loads(row[0]))
        memory.add_condition(replace(last, source="manual"))
        db.execute(
            "UPDATE call_memory SET snapshot=? WHERE id=1",
            (json.dumps(memory.to_dict(), separators=(",", ":")),),
        )

    # ---- checks -----------------------------------------------------------------------
    def assess(
        self, steps: Sequence[Step] | Trace, tool: str, arguments: Mapping[str, Any],
        task_input: str | None,
    ) -> Verdict:  # fmt: skip
        return assess(self.enforced(tool), steps, tool, arguments, task_input, self._thresholds)

    def may_apply(
        self, steps: Sequence[Step] | Trace, tool: str, task_input: str | None
    ) -> list[Reason]:
        """Block-level conditions that the session already holds what they need for (a
        lookup's warnings: any-level hints would flag too many successful calls)."""
        reasons = may_apply(self.enforced(tool), steps, tool, task_input, self._thresholds)
        return [r for r in reasons if r.level == "block"]

    def tools(self) -> set[str]:
        return set(self._fresh().tools())
