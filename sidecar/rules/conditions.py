"""Learned (and hand-written) call conditions as rules: what derivation produces now,
with what it forgets kept beside: when each condition was first and last confirmed, the
operators' lifts and reinstatements, and the last form of a condition that left (its
evidence no longer holds), so that it can be read and reinstated.

Learning and forgetting run the learner (:mod:`sidecar.rules.learner`) and record what
its conditions now are, in one transaction.  A lift covers the condition's family
(:mod:`sidecar.rules.lifting`).  Status follows :mod:`sidecar.rules.lifecycle`,
counting only the contradictions :meth:`~sidecar.memory.Thresholds.contradictions` lets
count.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

from sidecar.memory import (
    FailureCondition,
    FailureMemory,
    Reason,
    Session,
    Step,
    Thresholds,
    Trace,
    may_apply,
    reasons_for,
)
from sidecar.memory.predicate import token
from sidecar.rules import lifting
from sidecar.rules.learner import Learner, Unlearned
from sidecar.rules.lifecycle import ENFORCED, Lifecycle, Status
from sidecar.storage.base import Connection
from sidecar.storage.conditions import Derived, Known
from sidecar.storage.judgements import Judgement
from sidecar.storage.state import State

AUDIT = logging.getLogger("sidecar.archive.audit")


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
    judged: Judgement | None = None
    """An operator's standing judgement of it (confirmed or retired), if any."""

    @property
    def confirmed(self) -> bool:
        return self.judged is not None and self.judged.judgement == "confirmed"


def subject(condition: FailureCondition) -> str:
    """What a person judges of a condition: its tool, predicate (values included) and
    failure, as a digest (:attr:`~sidecar.storage.judgements.Judgement.subject`)."""
    what = [condition.tool, condition.predicate.to_dict(), condition.signature]
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


class ConditionBook:
    def __init__(self, state: State, lifecycle: Lifecycle, thresholds: Thresholds) -> None:
        self._state = state
        self._lifecycle = lifecycle
        self._thresholds = thresholds
        self._learner = Learner(state, thresholds.trusted)
        self._lock = threading.RLock()
        self._states: dict[str, ConditionState] = {}
        self._states_rev = -1
        self._vouched: dict[str, tuple[FailureCondition, FailureCondition]] = {}
        self._parsed: dict[str, tuple[str, FailureCondition]] = {}
        """Each stored condition's record as last parsed: a rebuild of the states after a
        write parses only the records that write changed."""
        self.max_chance = thresholds.max_chance_block
        """How likely chance may explain a condition that is shown to an agent who does
        not read it (:meth:`~sidecar.rules.wording.Reading.shows_warning`)."""
        self.alerts = 0
        """Contradictions this process set aside (for ``/metrics``)."""

    @property
    def thresholds(self) -> Thresholds:
        return self._thresholds

    def memory(self) -> FailureMemory:
        return self._learner.memory()

    # ---- learning and forgetting ---------------------------------------------------------
    @contextlib.contextmanager
    def writing(self, tx: Callable[[], AbstractContextManager[Connection]]) -> Iterator[Connection]:
        """The unit of work a write to the memory happens in: ``tx()`` (the state's
        transaction) inside the learner's guard (what it folded is forgotten unless the
        transaction commits), then this book's lock, then the learner's: the order a
        reader takes the last two in (:meth:`states`), so a check reading the memory
        waits for a writer's folding, never for its turn at the state, and the writer
        may read the conditions it just taught."""
        with self._learner.writing(), tx() as conn, self._lock, self._learner.lock:
            yield conn

    def learn(
        self,
        tx: Connection,
        sessions: Sequence[Session],
        manual: Sequence[FailureCondition] = (),
        pointers: Mapping[tuple[str, str], str] | None = None,
        source: str = "local",
    ) -> int:
        """Teach the memory these sessions (and hand-written conditions, from ``source``)
        and record what its conditions now are, inside a unit of :meth:`writing`;
        returns the bytes the evidence log took in.  ``pointers``: for a (tool,
        normalized signature), the cold record of its latest failing call."""
        if not sessions and not manual:
            return 0
        now = time.time()
        learned = self._learner.learn(tx, sessions, manual, source, now)
        if learned is None:
            return 0
        self._sync(tx, learned.tools, pointers or {}, now)
        return learned.stored

    def forget(self, source: str, since: float | None = None) -> Unlearned:
        """Remove everything ``source`` taught the memory (since ``since``, when given)
        and derive again what rested on it."""
        with self.writing(self._state.tx) as tx:
            unlearned = self._learner.forget(tx, source, since)
            if unlearned is None:
                return Unlearned(frozenset(), 0, frozenset())
            self._sync(tx, unlearned.tools, {}, time.time())
            return unlearned

    def _sync(
        self,
        tx: Connection,
        tools: Iterable[str],
        pointers: Mapping[tuple[str, str], str],
        now: float,
    ) -> None:
        repo = self._state.conditions
        memory = self._learner.memory()
        lifts = [(cid, key, w) for cid, key, w in repo.lifted_families(tx)]
        for tool in sorted(tools):
            current = {c.condition_id: c for c in memory.conditions(tool)}
            known = repo.known(tx, tool)
            changed: list[Derived] = []
            for cid, c in current.items():
                before = known.get(cid)
                self._alert(c, before)
                record = json.dumps(c.to_dict(), separators=(",", ":"))
                pointer = pointers.get((c.tool, c.signature))
                against = self._thresholds.contradictions(c)
                if before is None:
                    lifted = lifting.covered(predicate_key(c), lifting.words(c.signature), lifts)
                    repo.insert(
                        tx, cid, tool, c.signature, record, pointer, now, c.support, against,
                        lifted,
                    )  # fmt: skip
                    continue
                confirmed = c.support > before.support
                # a condition derived again as it was is left as it is: most of a tool's
                # conditions do not change with one more session
                if before.present and not confirmed and (record, against) == (
                    before.record, before.contradictions,
                ):  # fmt: skip
                    continue
                changed.append(Derived(cid, record, c.support, against, pointer, confirmed))
            repo.update(tx, changed, self._lifecycle.retire_after, now)
            # derivation dropped it (its value succeeded since, its confidence fell, or the
            # evidence it rested on was forgotten): it retires, its last form readable
            gone = [cid for cid, k in known.items() if k.present and cid not in current]
            repo.mark_gone(tx, gone, now)
        repo.bump_conditions(tx)
        self._states_rev = -1

    def _alert(self, c: FailureCondition, before: Known | None) -> None:
        """Untrusted successes set aside against a condition a trusted source stands
        behind: said in the audit log when there are more of them than before."""
        if not c.ignored:
            return
        was = int(json.loads(before.record).get("ignored", 0)) if before else 0
        if c.ignored > was:
            self.alerts += c.ignored - was
            AUDIT.warning(
                "contradiction ignored: %d success(es) from %s (untrusted) matched condition "
                "%s of %s, which %s stand(s) behind",
                c.ignored - was, ", ".join(c.contradiction_sources) or "untrusted sources",
                c.condition_id, c.tool, ", ".join(c.sources),
            )  # fmt: skip

    # ---- the conditions and their lifecycle ----------------------------------------------
    def states(self) -> dict[str, ConditionState]:
        """Every condition ever learned or written, by id, with its status."""
        with self._lock:
            self._learner.memory()
            revision = self._learner.marks()[2]
            if self._states_rev == revision and self._states:
                return self._states
            now = time.time()
            out: dict[str, ConditionState] = {}
            parsed: dict[str, tuple[str, FailureCondition]] = {}
            people = self._state.judgements.all()
            for row in self._state.conditions.rows():
                status = self._lifecycle.status(
                    row.lifted, row.contradictions, row.baseline, row.last_seen, now
                )
                if not row.present and status != "lifted":
                    status = "retired"
                kept = self._parsed.get(row.condition_id)
                if kept is None or kept[0] != row.record:
                    kept = (row.record, FailureCondition.from_dict(json.loads(row.record)))
                parsed[row.condition_id] = kept
                invalid_at, person = row.invalid_at, people.get(row.condition_id)
                if person is not None and person.subject not in ("", subject(kept[1])):
                    person = None  # what was judged is not what the rule says now
                if person is not None and person.judgement == "retired" and status != "lifted":
                    status, invalid_at = "retired", person.at  # by an operator's hand
                out[row.condition_id] = ConditionState(
                    kept[1], status, row.valid_from, row.last_seen, invalid_at, row.pointer,
                    person,
                )  # fmt: skip
            self._parsed = parsed
            self._states, self._states_rev = out, revision
            self._vouched = {}
            return out

    def enforced(self, tool: str) -> list[FailureCondition]:
        """The conditions a check of ``tool`` applies: active ones as they are, contested
        ones as warnings only."""
        memory = self._learner.memory()
        states = self.states()
        out: list[FailureCondition] = []
        for c in memory.conditions(tool):
            st = states.get(c.condition_id)
            status = st.status if st is not None else "active"
            if status not in ENFORCED:
                continue
            if status == "contested":
                out.append(replace(c, warn_only=True))
            elif st is not None and st.confirmed:
                out.append(self._vouched_copy(c))
            else:
                out.append(c)
        return out

    def _vouched_copy(self, c: FailureCondition) -> FailureCondition:
        """``c`` as an operator confirmed it, one object per states' revision (the
        thresholds keep a condition's level per object)."""
        with self._lock:
            found = self._vouched.get(c.condition_id)
            if found is None or found[0] is not c:
                found = (c, replace(c, vouched=True))
                self._vouched[c.condition_id] = found
            return found[1]

    def enforced_count(self) -> int:
        """Learned and hand-written conditions a check applies now (active or contested)."""
        return sum(st.status in ENFORCED for st in self.states().values())

    def tools(self) -> set[str]:
        return set(self._learner.memory().tools())

    def set_status(
        self,
        condition_id: str,
        lifted: bool,
        then: Callable[[Connection], None] | None = None,
    ) -> bool:
        """Lift the condition's whole family, or reinstate it (counting only
        contradictions from now on); returns whether the condition exists.  ``then``
        runs in the same transaction (recording who did it and why)."""
        repo = self._state.conditions
        now = time.time()
        with self.writing(self._state.tx) as tx:
            raw = repo.record(tx, condition_id)
            if raw is None:
                return False
            if then is not None:
                then(tx)
            condition = FailureCondition.from_dict(json.loads(raw))
            key, of = predicate_key(condition), lifting.words(condition.signature)
            peers = [
                (cid, predicate_key(c), lifting.words(c.signature))
                for cid, record in repo.records_of(tx, condition.tool)
                for c in (FailureCondition.from_dict(json.loads(record)),)
            ]
            members = lifting.members(key, of, peers)
            if lifted:
                self._state.judgements.clear(tx, members)  # its family's go with it
                repo.lift_family(tx, condition_id, key, of, now)
                repo.set_lifted(tx, members)
            else:
                # the family is enforced again, whichever of its members was lifted
                for cid in lifting.members(key, of, repo.lifted_families(tx)):
                    repo.unlift_family(tx, cid)
                repo.reinstate(tx, members, condition_id, now)
                if condition_id not in {
                    c.condition_id for c in self._learner.memory().conditions()
                }:
                    self._learner.keep(tx, condition, now)
            repo.bump_conditions(tx)
            self._states_rev = -1
            return True

    def judge(self, condition_id: str, then: Callable[[Connection], None]) -> bool:
        """Record an operator's judgement (``then``, in the transaction) of a condition
        that exists; returns whether it does."""
        with self.writing(self._state.tx) as tx:
            if self._state.conditions.record(tx, condition_id) is None:
                return False
            then(tx)
            self._state.conditions.bump_conditions(tx)
            self._states_rev = -1
            return True

    # ---- checks --------------------------------------------------------------------------
    def reasons(
        self,
        steps: Sequence[Step] | Trace,
        tool: str,
        arguments: Mapping[str, object],
        task_input: str | None,
        read_only: bool = False,
    ) -> list[Reason]:
        """The conditions of ``tool`` that hold for this call, each at its level
        (``read_only``: the tool only reads)."""
        accepted = self._learner.memory().accepted(tool)
        return reasons_for(
            self.enforced(tool), steps, tool, arguments, task_input, self._thresholds,
            read_only, accepted,
        )  # fmt: skip

    def to_block(self, condition: FailureCondition) -> int | None:
        """How many more independent situations ``condition`` needs to block
        (:meth:`~sidecar.memory.Thresholds.to_block`)."""
        return self._thresholds.to_block(condition)

    def may_apply(
        self, steps: Sequence[Step] | Trace, tool: str, task_input: str | None
    ) -> list[Reason]:
        """Block-level conditions that the session already holds what they need for (a
        lookup's warnings: any-level hints would flag too many successful calls)."""
        found = may_apply(self.enforced(tool), steps, tool, task_input, self._thresholds)
        return [r for r in found if r.level == "block"]
