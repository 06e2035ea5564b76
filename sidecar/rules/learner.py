"""The learner of :mod:`sidecar.memory`, kept in the state.

**The evidence log is the truth.**  Every session the memory learns from is kept as what
the learner derives from it (features of its calls, never raw outputs), with its source,
when it arrived and a sequence number; so are hand-written conditions.  The learner is a
fold of that log, and the fold does not depend on order.  So each process keeps its own
learner in memory and brings it up to date by folding the rows after the last one it
folded (one read, of what is new); a process starting up loads the last checkpoint and
folds what came after it.  Forgetting a source deletes its rows and starts a new
*generation*: every process then folds the log again, and gets exactly the memory that
source's evidence never reached.

The marks that say whether the learner is up to date (the log's last sequence number,
its generation, the conditions' revision) are read in one small read per request.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sidecar.memory import FailureCondition, FailureMemory, Session, Step
from sidecar.storage.base import Connection
from sidecar.storage.state import State

PART = "\x1f"
"""Between a session's key and the first step of a part of it learned later."""
OUTCOME = f"outcome{PART}"
"""Before a session's key: the key of its outcome's row (one per session; no session
key starts with it)."""
CHECKPOINT_EVERY = 1000
"""Log rows folded between two checkpoints of the learner."""


@dataclass(frozen=True)
class Learned:
    """What one learning transaction took in."""

    tools: frozenset[str]
    """Tools whose conditions may have changed."""
    stored: int = 0
    """Bytes the evidence log took in."""


@dataclass(frozen=True)
class Unlearned:
    sessions: frozenset[str]
    conditions: int
    """Hand-written conditions removed."""
    tools: frozenset[str]


class Learner:
    def __init__(self, state: State, trusted: frozenset[str] = frozenset()) -> None:
        self._state = state
        self._repo = state.conditions
        self._trusted = trusted
        self._lock = threading.RLock()
        self._memory = FailureMemory().judged_by(trusted)
        self._seq = 0
        """The last log row folded."""
        self._generation = -1
        """The log's generation the memory is a fold of (-1: nothing loaded yet)."""
        self._checkpointed = 0

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Around a transaction this learner writes in: if it does not commit, what the
        learner folded in it is forgotten (the next read folds the log again), so the
        process never holds evidence the state did not keep, nor skips the rows that
        later take the same sequence numbers."""
        try:
            yield
        except BaseException:
            with self._lock:
                self._generation = -1
            raise

    def marks(self) -> tuple[int, int, int]:
        """The log's last sequence number, its generation and the conditions' revision
        (read with every other revision: :meth:`~sidecar.storage.revisions.
        RevisionRepository.current`)."""
        now = self._state.revisions.current()
        return now.evidence, now.generation, now.conditions

    def memory(self) -> FailureMemory:
        """The learner as the state has it now."""
        with self._lock:
            seq, generation, _conditions = self.marks()
            if generation != self._generation:
                self._reload(generation)
            elif seq > self._seq:
                self._tail()
            return self._memory

    def _reload(self, generation: int, tx: Connection | None = None) -> None:
        memory, seq = FailureMemory(), 0
        found = self._repo.checkpoint()
        if found is not None and found[2] == generation:
            # a checkpoint of an earlier format is left aside: the log is folded again
            with contextlib.suppress(ValueError):
                memory, seq = FailureMemory.from_dict(json.loads(found[0])), found[1]
        self._memory = memory.judged_by(self._trusted)
        self._seq = self._checkpointed = seq
        self._generation = generation
        self._tail(tx)

    def _tail(self, tx: Connection | None = None) -> None:
        for seq, kind, payload in self._repo.log_after(self._seq, tx):
            if kind == "session":
                self._memory.fold(json.loads(payload))
            elif kind == "outcome":
                self._memory.learn_outcome(json.loads(payload))
            else:
                self._memory.add_condition(FailureCondition.from_dict(json.loads(payload)))
            self._seq = seq

    # ---- writing, inside the caller's transaction ----------------------------------------
    def learn(
        self,
        tx: Connection,
        sessions: Sequence[Session],
        manual: Sequence[FailureCondition],
        source: str,
        now: float,
    ) -> Learned | None:
        """Take in sessions (each once; sent again longer, its new steps only) and
        hand-written conditions; ``None`` when nothing was new.  A session's outcome is
        its own row, taken once per session from the first report that carries one
        (its steps may have been learned before, with the outcome unknown)."""
        memory = self.memory()
        rows: list[tuple[str, str, str, str]] = []
        touched: set[str] = set()
        for s in dict((s.session_id, s) for s in sessions).values():
            start = self._repo.learn_from(tx, s.session_id, _digests(s.steps), now)
            if start is not None:
                derived = memory.derive(s, start)
                key = s.session_id if not start else f"{s.session_id}{PART}{start}"
                rows.append((key, s.source, "session", _json(derived)))
                touched |= {f["tool"] for f in derived["failures"]} | set(derived["successes"])
            outcome = memory.derive_outcome(s)
            if outcome is not None:
                rows.append((f"{OUTCOME}{s.session_id}", s.source, "outcome", _json(outcome)))
        for condition in manual:
            condition = replace(condition, sources=condition.sources or (source,))
            key = f"condition:{condition.condition_id}:{condition.sources[0]}"
            rows.append((key, condition.sources[0], "condition", _json(condition.to_dict())))
            touched.add(condition.tool)
        fresh = self._repo.fresh(tx, [r[0] for r in rows])
        rows = [r for r in rows if r[0] in fresh]
        if not rows:
            return None
        self._append(tx, rows, now)
        return Learned(frozenset(touched), sum(len(k) + len(p) for k, _s, _k, p in rows))

    def _append(
        self, tx: Connection, rows: Sequence[tuple[str, str, str, str]], now: float
    ) -> None:
        self._repo.append(tx, rows, now)
        # the rows other processes committed before these are visible now: fold them,
        # then these
        _seq, generation, _conditions = self._repo.marks(tx)
        if generation != self._generation:
            self._reload(generation, tx)
        else:
            self._tail(tx)
        if self._seq - self._checkpointed >= CHECKPOINT_EVERY:
            self._checkpoint(tx)

    def _checkpoint(self, tx: Connection) -> None:
        snapshot = _json(self._memory.to_dict())
        self._repo.write_checkpoint(tx, snapshot, self._seq, self._generation)
        self._checkpointed = self._seq

    def forget(self, tx: Connection, source: str, since: float | None) -> Unlearned | None:
        """Remove everything ``source`` taught (since ``since``) and fold the rest again;
        ``None`` when it had taught nothing."""
        before = self.memory()
        removed = self._repo.remove_source(tx, source, since)
        if not removed:
            return None
        sessions = frozenset(key.split(PART, 1)[0] for kind, key in removed if kind == "session")
        self._repo.unlearn(tx, sessions)
        _seq, generation, _conditions = self._repo.marks(tx)
        self._reload(generation, tx)
        self._checkpoint(tx)
        tools = frozenset(before.tools()) | frozenset(self._memory.tools())
        conditions = sum(1 for kind, _key in removed if kind == "condition")
        return Unlearned(sessions, conditions, tools)

    def keep(self, tx: Connection, condition: FailureCondition, now: float) -> None:
        """An operator's own condition (a reinstated one that derivation no longer
        produces), kept in the log as hand-written."""
        kept = replace(condition, source="manual", sources=("operator",))
        key = f"reinstated:{condition.condition_id}"
        if self._repo.fresh(tx, [key]):
            self._append(tx, [(key, "operator", "condition", _json(kept.to_dict()))], now)


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
