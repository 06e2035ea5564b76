"""The call-level failure memory of a home: the learner of :mod:`sidecar.memory`, kept in
the state database, with the lifecycle of every condition it learns.

**The evidence log is the truth.**  Every session the memory learns from is kept in
``memory_evidence`` as what the learner derives from it (features of its calls, never
raw outputs), with its source and when it arrived; so are hand-written conditions.  The
learner's state is a fold of that log: a snapshot row, rewritten in the transaction that
appends to the log, with a revision that tells another process to reload it.  Because
the fold does not depend on order, forgetting a source (:meth:`CallMemory.forget`) is a
delete and a fold of what remains, and gives exactly the memory that source's evidence
never reached.

Conditions are re-derived from the learner; the ``conditions`` table keeps what
derivation forgets: when each was first and last confirmed, the operator's lifts and
reinstatements, and the last form of a condition that left (its evidence no longer
holds), so that it can be read and reinstated.  A lift covers the condition's
*family*: the same tool and predicate with the signature written any other way
(:func:`same_family`), so that a changed character in a report does not make a new
rule.  Status follows :mod:`sidecar.lifecycle`, counting only the contradictions that
:meth:`~sidecar.memory.Thresholds.contradictions` lets count.
"""

from __future__ import annotations

import hashlib
import json
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
from sidecar.memory.predicate import token
from sidecar.memory.signature import same_family, signature_words
from sidecar.state import StateStore
from sidecar.storage import MissingTable

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
CREATE TABLE IF NOT EXISTS memory_evidence (
    evidence_key TEXT PRIMARY KEY, source TEXT NOT NULL, kind TEXT NOT NULL,
    received_at REAL NOT NULL, payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_evidence_source ON memory_evidence(source, received_at);
CREATE TABLE IF NOT EXISTS lifted_families (
    condition_id TEXT PRIMARY KEY, predicate_key TEXT NOT NULL, words TEXT NOT NULL,
    at REAL NOT NULL
);
"""
SCHEMA += learned.SCHEMA


def predicate_key(condition: FailureCondition) -> str:
    """The tool and predicate of a condition (values only for ``==``, as in its id)."""
    p = condition.predicate
    ident = [condition.tool, p.feature, p.op]
    if p.op == "==":
        ident.append(token(p.value))
    return hashlib.sha256("\x1f".join(ident).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ConditionState:
    """A learned (or hand-written) condition with its lifecycle."""

    condition: FailureCondition
    status: Status
    valid_from: float
    last_seen: float
    invalid_at: float | None
    pointer: str | None


@dataclass(frozen=True)
class ForgetCounts:
    """What forgetting a source removed."""

    source: str
    sessions: frozenset[str]
    conditions: int
    """Hand-written conditions removed."""
    tools: tuple[str, ...]
    """Tools whose conditions were derived again."""


class CallMemory:
    def __init__(self, state: StateStore, lifecycle: Lifecycle, thresholds: Thresholds) -> None:
        self._state = state
        self._lifecycle = lifecycle
        self._thresholds = thresholds
        self._lock = threading.RLock()
        self._memory = FailureMemory()
        self._revision = -1
        self._revision_token: object | None = None
        self._revision_read = 0
        """The stored revision as last read, and the database's change token then."""
        self._states: dict[str, ConditionState] = {}
        self._states_rev = -1

    @property
    def thresholds(self) -> Thresholds:
        return self._thresholds

    # ---- loading ----------------------------------------------------------------------
    def _revision_now(self) -> int:
        token = self._state.db.change_token()
        if token is not None and token == self._revision_token:
            return self._revision_read
        try:
            row = self._state.db.execute("SELECT revision FROM call_memory WHERE id=1").fetchone()
        except MissingTable:
            return 0  # a home written before this memory existed, opened read-only
        self._revision_token, self._revision_read = token, int(row[0]) if row else 0
        return self._revision_read

    def _fresh(self) -> FailureMemory:
        """The learner as the state has it now (reloaded when another writer moved it)."""
        with self._lock:
            rev = self._revision_now()
            if rev != self._revision:
                row = self._state.db.execute(
                    "SELECT snapshot FROM call_memory WHERE id=1"
                ).fetchone()
                self._memory = self._load(json.loads(row[0])) if row else FailureMemory()
                self._revision = rev
            return self._memory

    def _load(self, snapshot: Mapping[str, Any]) -> FailureMemory:
        try:
            return FailureMemory.from_dict(snapshot)
        except ValueError:
            # a snapshot of an earlier format: the log is the truth, fold it again (a
            # home from before the log keeps its hand-written conditions)
            memory = self._rebuild()
            for raw in snapshot.get("manual", ()):
                memory.add_condition(FailureCondition.from_dict(raw))
            return memory

    def _rebuild(self, db: Any = None) -> FailureMemory:
        memory = FailureMemory()
        conn = db if db is not None else self._state.db
        try:
            rows = conn.execute(
                "SELECT kind, payload FROM memory_evidence ORDER BY evidence_key"
            ).fetchall()
        except MissingTable:
            rows = []  # a home written before the log existed, opened read-only
        for kind, payload in rows:
            if kind == "session":
                memory.fold(json.loads(payload))
            else:
                memory.add_condition(FailureCondition.from_dict(json.loads(payload)))
        return memory

    # ---- learning ---------------------------------------------------------------------
    def learn(
        self,
        sessions: Sequence[Session],
        manual: Sequence[FailureCondition] = (),
        pointers: Mapping[tuple[str, str], str] | None = None,
        source: str = "local",
    ) -> None:
        """Teach the memory these sessions (and hand-written conditions, from ``source``),
        then record what its conditions now are, in one transaction.  ``pointers``: for
        a (tool, normalized signature), the cold record of its latest failing call."""
        if not sessions and not manual:
            return
        with self._lock, self._state.tx() as db:
            memory = self._fresh()
            now = time.time()
            # a session is learned once: a replayed report, or a batch sent again after
            # a failure further on, teaches nothing twice; sent again longer, its new
            # steps only (:func:`sidecar.learned.unlearned_from`), kept as a row of
            # their own
            fresh: list[dict[str, Any]] = []
            for s in dict((s.session_id, s) for s in sessions).values():
                start = learned.unlearned_from(db, s, now)
                if start is None:
                    continue
                derived = memory.derive(s, start)
                key = s.session_id if not start else f"{s.session_id}{PART}{start}"
                if db.execute(
                    "INSERT OR IGNORE INTO memory_evidence VALUES (?, ?, 'session', ?, ?)",
                    (key, s.source, now, _json(derived)),
                ).rowcount:
                    fresh.append(derived)
            written: list[FailureCondition] = []
            for condition in manual:
                condition = replace(condition, sources=condition.sources or (source,))
                key = f"condition:{condition.condition_id}:{condition.sources[0]}"
                if db.execute(
                    "INSERT OR IGNORE INTO memory_evidence VALUES (?, ?, 'condition', ?, ?)",
                    (key, condition.sources[0], now, _json(condition.to_dict())),
                ).rowcount:
                    written.append(condition)
            if not fresh and not written:
                return
            touched = {f["tool"] for d in fresh for f in d["failures"]}
            touched |= {t for d in fresh for t in d["successes"]}
            touched |= {c.tool for c in written}
            for derived in fresh:
                memory.fold(derived)
            for condition in written:
                memory.add_condition(condition)
            self._write(db, memory)
            self._sync(db, memory, touched, pointers or {}, now)

    def _write(self, db: Any, memory: FailureMemory) -> None:
        self._revision = max(self._revision, self._revision_in(db)) + 1
        db.execute(
            "INSERT INTO call_memory VALUES (1, ?, ?) ON CONFLICT(id) DO UPDATE "
            "SET snapshot=excluded.snapshot, revision=excluded.revision",
            (_json(memory.to_dict()), self._revision),
        )
        self._memory = memory

    @staticmethod
    def _revision_in(db: Any) -> int:
        row = db.execute("SELECT revision FROM call_memory WHERE id=1").fetchone()
        return int(row[0]) if row else 0

    def forget(self, source: str, since: float | None = None) -> ForgetCounts:
        """Remove everything ``source`` taught the memory (since ``since``, when given)
        and derive again what rested on it."""
        with self._lock, self._state.tx() as db:
            before = self._fresh()
            where = "source=?"
            args: list[Any] = [source]
            if since is not None:
                where += " AND received_at >= ?"
                args.append(since)
            rows = db.execute(
                f"SELECT kind, evidence_key FROM memory_evidence WHERE {where}", args
            ).fetchall()
            if not rows:
                return ForgetCounts(source, frozenset(), 0, ())
            sessions = frozenset(key.split(PART, 1)[0] for kind, key in rows if kind == "session")
            db.execute(f"DELETE FROM memory_evidence WHERE {where}", args)
            # as if never reported: the same sessions sent again teach again
            for key in sessions:
                db.execute("DELETE FROM learned_sessions WHERE session_key=?", (key,))
                db.execute("DELETE FROM learned_steps WHERE session_key=?", (key,))
            memory = self._rebuild(db)
            tools = set(before.tools()) | set(memory.tools())
            self._write(db, memory)
            self._sync(db, memory, tools, {}, time.time())
            return ForgetCounts(source, sessions, len(rows) - len(sessions), tuple(sorted(tools)))

    def _sync(
        self,
        db: Any,
        memory: FailureMemory,
        tools: Iterable[str],
        pointers: Mapping[tuple[str, str], str],
        now: float,
    ) -> None:
        lifted: dict[str, list[frozenset[str]]] = {}
        for key, words in db.execute("SELECT predicate_key, words FROM lifted_families"):
            lifted.setdefault(key, []).append(frozenset(json.loads(words)))
        for tool in sorted(tools):
            current = {c.condition_id: c for c in memory.conditions(tool)}
            known = {
                cid: (int(support), int(present))
                for cid, support, present in db.execute(
                    "SELECT condition_id, support, present FROM conditions WHERE tool=?", (tool,)
                )
            }
            for cid, c in current.items():
                record = _json(c.to_dict())
                pointer = pointers.get((c.tool, c.signature))
                against = self._thresholds.contradictions(c)
                if cid not in known:
                    words = signature_words(c.signature)
                    family = lifted.get(predicate_key(c), [])
                    is_lifted = int(any(same_family(words, w) for w in family))
                    db.execute(
                        "INSERT INTO conditions(condition_id, tool, signature, record, pointer, "
                        "valid_from, last_seen, support, contradictions, lifted) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (cid, tool, c.signature, record, pointer, now, now, c.support, against,
                         is_lifted),
                    )  # fmt: skip
                    continue
                confirmed = c.support > known[cid][0]
                db.execute(
                    "UPDATE conditions SET record=?, support=?, contradictions=?, present=1, "
                    "pointer=COALESCE(?, pointer), last_seen=CASE WHEN ? THEN ? ELSE last_seen "
                    "END, invalid_at=CASE WHEN present=0 THEN NULL ELSE invalid_at END "
                    "WHERE condition_id=?",
                    (record, c.support, against, pointer if confirmed else None,
                     confirmed, now, cid),
                )  # fmt: skip
                self._mark_retired(db, cid, now)
            gone = [cid for cid, (_s, present) in known.items() if present and cid not in current]
            # derivation dropped it (its value succeeded since, its confidence fell, or the
            # evidence it rested on was forgotten): it retires, its last form readable
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
            except MissingTable:
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

    def enforced_count(self) -> int:
        """Learned and hand-written conditions a check applies now (active or contested)."""
        return sum(st.status in ENFORCED for st in self.states().values())

    def set_status(self, condition_id: str, lifted: bool) -> bool:
        """Lift (the condition's whole family: see :func:`family_id`), or reinstate
        (counting only contradictions from now on); returns whether the condition
        exists."""
        with self._lock, self._state.tx() as db:
            row = db.execute(
                "SELECT record FROM conditions WHERE condition_id=?", (condition_id,)
            ).fetchone()
            if row is None:
                return False
            condition = FailureCondition.from_dict(json.loads(row[0]))
            key, words = predicate_key(condition), signature_words(condition.signature)
            members = [
                cid
                for cid, record in db.execute(
                    "SELECT condition_id, record FROM conditions WHERE tool=?", (condition.tool,)
                ).fetchall()
                if _in_family(FailureCondition.from_dict(json.loads(record)), key, words)
            ]
            marks = ",".join("?" * len(members))
            if lifted:
                db.execute(
                    "INSERT INTO lifted_families VALUES (?, ?, ?, ?) ON CONFLICT(condition_id) "
                    "DO NOTHING",
                    (condition_id, key, _json(sorted(words)), time.time()),
                )
                db.execute(
                    f"UPDATE conditions SET lifted=1 WHERE condition_id IN ({marks})", members
                )
            else:
                # the family is enforced again, whichever of its members was lifted
                for cid, k, w in db.execute(
                    "SELECT condition_id, predicate_key, words FROM lifted_families"
                ).fetchall():
                    if k == key and same_family(words, frozenset(json.loads(w))):
                        db.execute("DELETE FROM lifted_families WHERE condition_id=?", (cid,))
                db.execute(
                    "UPDATE conditions SET lifted=0, baseline=contradictions, invalid_at=NULL, "
                    f"last_seen=? WHERE condition_id IN ({marks})",
                    (time.time(), *members),
                )
                db.execute("UPDATE conditions SET present=1 WHERE condition_id=?", (condition_id,))
                self._reinstate_form(db, condition_id, condition)
            self._revision = max(self._revision, self._revision_in(db)) + 1
            db.execute("UPDATE call_memory SET revision=? WHERE id=1", (self._revision,))
            self._states_rev = -1
            return True

    def _reinstate_form(self, db: Any, condition_id: str, last: FailureCondition) -> None:
        """A condition derivation no longer produces comes back as the operator's own
        (hand-written) condition, in its last learned form, kept in the log."""
        memory = self._memory
        if condition_id in {c.condition_id for c in memory.conditions()}:
            return
        kept = replace(last, source="manual", sources=("operator",))
        db.execute(
            "INSERT INTO memory_evidence VALUES (?, 'operator', 'condition', ?, ?) "
            "ON CONFLICT(evidence_key) DO NOTHING",
            (f"reinstated:{condition_id}", time.time(), _json(kept.to_dict())),
        )
        memory.add_condition(kept)
        db.execute("UPDATE call_memory SET snapshot=? WHERE id=1", (_json(memory.to_dict()),))

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


def _in_family(condition: FailureCondition, key: str, words: frozenset[str]) -> bool:
    return predicate_key(condition) == key and same_family(
        signature_words(condition.signature), words
    )


PART = "\x1f"
"""Between a session's key and the first step of a part of it learned later."""


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
