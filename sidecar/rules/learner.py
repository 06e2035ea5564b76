"""The learner of :mod:`sidecar.memory`, kept in the state.

**The evidence log is the truth.**  Every session the memory learns from is kept as what
the learner derives from it (features of its calls, never raw outputs), with its source
and when it arrived; so are hand-written conditions.  The learner itself is a fold of
that log: a snapshot, rewritten in the transaction that appends to the log, with a
revision that tells another process to reload it.  Because the fold does not depend on
order, forgetting a source is a delete and a fold of what remains, and gives exactly the
memory that source's evidence never reached.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sidecar.memory import FailureCondition, FailureMemory, Session, Step
from sidecar.storage.base import Connection
from sidecar.storage.state import State

PART = "\x1f"
"""Between a session's key and the first step of a part of it learned later."""


@dataclass(frozen=True)
class Learned:
    """What one learning transaction took in."""

    tools: frozenset[str]
    """Tools whose conditions may have changed."""


@dataclass(frozen=True)
class Unlearned:
    sessions: frozenset[str]
    conditions: int
    """Hand-written conditions removed."""
    tools: frozenset[str]


class Learner:
    def __init__(self, state: State, trusted: frozenset[str] = frozenset()) -> None:
        self._state = state
        self._trusted = trusted
        self._lock = threading.RLock()
        self._memory = FailureMemory()
        self._revision = -1
        self._token: object | None = None
        self._read = 0
        """The stored revision as last read, and the database's change token then."""

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def revision(self) -> int:
        return self._revision

    def _stored_revision(self) -> int:
        token = self._state.change_token()
        if token is not None and token == self._token:
            return self._read
        self._token, self._read = token, self._state.conditions.revision()
        return self._read

    def memory(self) -> FailureMemory:
        """The learner as the state has it now (reloaded when another writer moved it)."""
        with self._lock:
            rev = self._stored_revision()
            if rev != self._revision:
                raw = self._state.conditions.snapshot()
                memory = self._load(json.loads(raw)) if raw else FailureMemory()
                self._memory = memory.judged_by(self._trusted)
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

    def _rebuild(self, tx: Connection | None = None) -> FailureMemory:
        memory = FailureMemory().judged_by(self._trusted)
        for kind, payload in self._state.conditions.evidence(tx):
            if kind == "session":
                memory.fold(json.loads(payload))
            else:
                memory.add_condition(FailureCondition.from_dict(json.loads(payload)))
        return memory

    # ---- learning, inside the caller's transaction ----------------------------------------
    def learn(
        self,
        tx: Connection,
        sessions: Sequence[Session],
        manual: Sequence[FailureCondition],
        source: str,
        now: float,
    ) -> Learned | None:
        """Take in sessions (each once; sent again longer, its new steps only) and
        hand-written conditions; ``None`` when nothing was new."""
        repo = self._state.conditions
        memory = self.memory()
        fresh: list[dict[str, Any]] = []
        for s in dict((s.session_id, s) for s in sessions).values():
            start = repo.learn_from(tx, s.session_id, _digests(s.steps), now)
            if start is None:
                continue
            derived = memory.derive(s, start)
            key = s.session_id if not start else f"{s.session_id}{PART}{start}"
            if repo.append(tx, key, s.source, "session", _json(derived), now):
                fresh.append(derived)
        written: list[FailureCondition] = []
        for condition in manual:
            condition = replace(condition, sources=condition.sources or (source,))
            key = f"condition:{condition.condition_id}:{condition.sources[0]}"
            payload = _json(condition.to_dict())
            if repo.append(tx, key, condition.sources[0], "condition", payload, now):
                written.append(condition)
        if not fresh and not written:
            return None
        touched = {f["tool"] for d in fresh for f in d["failures"]}
        touched |= {t for d in fresh for t in d["successes"]}
        touched |= {c.tool for c in written}
        for derived in fresh:
            memory.fold(derived)
        for condition in written:
            memory.add_condition(condition)
        self._write(tx, memory)
        return Learned(frozenset(touched))

    def forget(self, tx: Connection, source: str, since: float | None) -> Unlearned | None:
        """Remove everything ``source`` taught (since ``since``) and fold the rest again;
        ``None`` when it had taught nothing."""
        before = self.memory()
        removed = self._state.conditions.remove_source(tx, source, since)
        if not removed:
            return None
        sessions = frozenset(key.split(PART, 1)[0] for kind, key in removed if kind == "session")
        self._state.conditions.unlearn(tx, sessions)
        memory = self._rebuild(tx)
        tools = frozenset(before.tools()) | frozenset(memory.tools())
        self._write(tx, memory)
        return Unlearned(sessions, len(removed) - len(sessions), tools)

    def keep(self, tx: Connection, condition: FailureCondition, now: float) -> None:
        """An operator's own condition (a reinstated one that derivation no longer
        produces), kept in the log as hand-written."""
        kept = replace(condition, source="manual", sources=("operator",))
        key = f"reinstated:{condition.condition_id}"
        self._state.conditions.append(tx, key, "operator", "condition", _json(kept.to_dict()), now)
        self._memory.add_condition(kept)
        self._state.conditions.set_snapshot(tx, _json(self._memory.to_dict()))

    def moved(self, tx: Connection) -> None:
        """Move the revision without a new snapshot (a lift or reinstatement changed what
        the conditions' states say)."""
        self._revision = max(self._revision, self._state.conditions.revision(tx)) + 1
        self._state.conditions.set_revision(tx, self._revision)

    def _write(self, tx: Connection, memory: FailureMemory) -> None:
        self._revision = max(self._revision, self._state.conditions.revision(tx)) + 1
        self._state.conditions.write(tx, _json(memory.to_dict()), self._revision)
        self._memory = memory


def _digests(steps: Sequence[Step]) -> list[str]:
    """The digest of each prefix of ``steps`` (the empty one first)."""
    running = hashlib.sha256()
    out = [running.hexdigest()]
    for step in steps:
        running.update(json.dumps(step.to_dict(), sort_keys=True, default=str).encode())
        out.append(running.hexdigest())
    return out


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
