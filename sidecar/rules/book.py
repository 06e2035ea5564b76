"""Every rule the sidecar enforces, of both kinds, behind one object: their status, the
operators' lifts and reinstatements, the compiled matcher, and the checks.

Lookup, intake, eviction and the façade ask here; nothing else computes a rule's status
or decides a verdict.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from sidecar.errors import InvalidInput, NotFound
from sidecar.limits import CheckMode
from sidecar.memory import Step, Thresholds, Trace
from sidecar.model import CallCheck, CheckResult
from sidecar.results import (
    ConstraintChange,
    ConstraintEvent,
    ConstraintView,
    LearnedSession,
    RuleSessions,
    SessionPage,
)
from sidecar.rules import wording
from sidecar.rules.conditions import ConditionBook, ConditionState, subject
from sidecar.rules.ids import rule_id
from sidecar.rules.lifecycle import ENFORCED, Lifecycle
from sidecar.rules.matcher import ConstraintMatcher, MissingField
from sidecar.rules.sequences import SequenceBook
from sidecar.rules.standing import Standing, source_of
from sidecar.rules.verdict import condition_reasons, sequence_reasons, verdict
from sidecar.rules.views import condition_view, sequence_view, verdict_view
from sidecar.rules.wording import OPERATOR, Reading, Viewer
from sidecar.storage.base import Connection
from sidecar.storage.judgements import Judgement
from sidecar.storage.state import State


class Rules:
    def __init__(
        self,
        state: State,
        lifecycle: Lifecycle,
        thresholds: Thresholds,
        missing_field: MissingField = "block",
        warning_sample: int = 3,
    ) -> None:
        self._state = state
        self.lifecycle = lifecycle
        self.standing = Standing(thresholds.trusted)
        self.sequences = SequenceBook(state, lifecycle, self.standing)
        self.conditions = ConditionBook(state, lifecycle, thresholds)
        self._missing_field = missing_field
        self._warning_sample = warning_sample
        self._lock = threading.Lock()
        self._matcher: ConstraintMatcher | None = None
        self._matcher_rev = -1

    # ---- the compiled fatal sequences ------------------------------------------------------
    def matcher(self, rev: int | None = None) -> ConstraintMatcher:
        """The fatal sequences in force, compiled, at constraints revision ``rev`` (read
        now if not given)."""
        rev = self._state.revisions.revisions()[0] if rev is None else rev
        with self._lock:
            if self._matcher is None or rev != self._matcher_rev:
                self._matcher = ConstraintMatcher(
                    self.sequences.in_force(),
                    missing_field=self._missing_field,
                    warning_sample=self._warning_sample,
                )
                self._matcher_rev = rev
            return self._matcher

    def named(self, tools: Iterable[str]) -> set[str]:
        """Of ``tools``, those a fatal sequence in force or the call memory names."""
        compiled, memory = self.matcher().tools, self.conditions.memory()
        return {t for t in tools if t in compiled or memory.knows(t)}

    # ---- checks ------------------------------------------------------------------------------
    def reading(self, viewer: Viewer = OPERATOR) -> Reading:
        """What ``viewer`` may read of the rules (:mod:`sidecar.rules.wording`)."""
        return Reading(viewer, self.standing.is_trusted)

    def check(
        self,
        plan: tuple[str, ...],
        mode: CheckMode,
        context: dict[str, Any],
        viewer: Viewer = OPERATOR,
    ) -> CheckResult:
        reading = None if viewer.operator else self.reading(viewer)
        return self.matcher().check(plan, context, mode, reading)

    def check_call(
        self,
        steps: Sequence[Step],
        tool: str,
        arguments: Mapping[str, Any],
        task_input: str | None,
        context: dict[str, Any],
        viewer: Viewer = OPERATOR,
        read_only: bool = False,
    ) -> CallCheck:
        """Before ``tool(arguments)`` after ``steps``: the call conditions that hold and
        the fatal sequences it would complete, one verdict, worded for ``viewer``
        (``read_only``: the tool only reads, and is warned only on established rules)."""
        reading = self.reading(viewer)
        found = self.conditions.reasons(steps, tool, arguments, task_input, read_only)
        chance = self.conditions.max_chance
        reasons = (
            condition_reasons(
                found, self.conditions.states(), reading, chance, self.conditions.to_block
            )
            if found
            else []
        )
        blocked, conditional = self.matcher().next_steps(tuple(s.tool for s in steps), context)
        reasons += sequence_reasons(
            blocked.get(tool, []), conditional.get(tool, []), reading, context
        )
        risk = self.conditions.memory().risk(steps)
        return replace(verdict(reasons), risk=risk)

    def hints(
        self,
        trace: Trace | None,
        tool: str,
        task_input: str | None,
        reading: Reading | None = None,
    ) -> list[str]:
        """A lookup's warnings for a tool the session may call next."""
        if trace is None:
            return []
        reading = reading or self.reading()
        chance = self.conditions.max_chance
        out = []
        for r in self.conditions.may_apply(trace, tool, task_input):
            c = r.condition
            if c is None or not reading.shows_warning(c, chance):
                continue
            out.append(wording.hint(c, r.observed, reading.reads_condition(c)))
        return out

    # ---- status, for people --------------------------------------------------------------------
    def views(
        self, include_lifted: bool = False, viewer: Viewer = OPERATOR
    ) -> list[ConstraintView]:
        """Fatal sequences and call conditions, each with its status, support,
        contradictions and when it was first and last confirmed; retired and lifted ones
        only with ``include_lifted``.  An agent (``viewer``) sees the rules of its own
        sources whole and every other one as a verdict (:func:`verdict_view`)."""
        now = time.time()
        reading = self.reading(viewer)
        sessions = self._state.sightings.chain_sessions()
        people = self._state.judgements.all()
        out: list[ConstraintView] = []
        for c in self.sequences.chains():
            status = self.sequences.status(c, now)
            if status in ENFORCED or include_lifted:
                n = len(sessions.get(c.chain_id, ())) or 1
                view = sequence_view(c, status, n, people.get(c.chain_id))
                if not reading.owns(c.sources):
                    readable = reading.reads_sequence(c)
                    failure = c.signature if readable else ""
                    view = verdict_view(view, wording.sequence_text(c, readable), failure)
                out.append(view)
        for st in sorted(self.conditions.states().values(), key=lambda x: x.valid_from):
            if st.status in ENFORCED or include_lifted:
                out.append(self._condition_view(st, reading))
        if not viewer.operator:  # which operator judged a rule is for operators
            out = [replace(v, judged_by=None) if v.judged_by else v for v in out]
        return out

    def _condition_view(self, st: ConditionState, reading: Reading) -> ConstraintView:
        # read as a check reads it: a confirmed condition is every agent's to read
        cond = replace(st.condition, vouched=True) if st.confirmed else st.condition
        independent = (
            cond.source == "manual"
            or cond.source_count >= self.standing.min_sources
            or self.standing.independent(cond.sources)
        )
        view = condition_view(st, independent)
        if reading.owns_condition(cond):
            return view
        readable = reading.reads_condition(cond)
        text = f"{cond.tool} failed before when {wording.relation(cond, readable)}"
        return verdict_view(view, text, cond.signature if readable else "")

    def view(self, constraint_id: str, viewer: Viewer = OPERATOR) -> ConstraintView:
        """One rule, whatever its status (as :meth:`views` shows it to ``viewer``)."""
        rid = rule_id(constraint_id)
        found = [v for v in self.views(True, viewer) if v.chain_id == rid.value]
        if not found:
            raise NotFound(f"no constraint {rid.value!r}")
        st = self.conditions.states().get(rid.value) if found[0].kind == "call" else None
        if st is None or st.status not in ENFORCED or st.confirmed:
            return found[0]
        # one rule's page only: the lists would compute it for every rule
        return replace(found[0], to_block=self.conditions.to_block(st.condition))

    def sessions_of(self, constraint_id: str, limit: int) -> RuleSessions:
        """The sessions behind a rule and against it (:class:`RuleSessions`)."""
        rid = rule_id(constraint_id)
        if rid.kind == "sequence":
            behind = self._state.sightings.sessions_behind(rid.value)
            against = self._state.uses.contradictions().get(rid.value, [])
            keys = tuple(dict.fromkeys(k for k, _ in against))
            return RuleSessions(tuple(sorted(behind))[:limit], keys[:limit])
        st = self.conditions.states().get(rid.value)
        if st is None:
            raise NotFound(f"no constraint {rid.value!r}")
        return RuleSessions(tuple(st.condition.sessions)[:limit], (), sample=True)

    def history(self, constraint_id: str, limit: int = 100) -> list[ConstraintEvent]:
        """A rule's recorded changes, newest first (its learning and retirement are in
        its view: ``valid_from``, ``invalid_at``)."""
        rid = rule_id(constraint_id)
        rows = self._state.sequences.history(rid.value, limit)
        return [ConstraintEvent(action, reason, at) for action, reason, at in rows]

    def sessions_page(self, cursor: str | None, limit: int) -> SessionPage:
        """One page of the sessions learned from, in key order (``cursor``: the
        ``next_cursor`` of the page before)."""
        after = None
        if cursor:
            try:
                padded = cursor + "=" * (-len(cursor) % 4)
                after = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
            except (binascii.Error, ValueError) as exc:
                raise InvalidInput("cursor: not a cursor this sidecar gave") from exc
        rows = self._state.sessions.page(after, limit + 1)
        sessions = tuple(
            LearnedSession(key, source_of(key), at, steps, chains)
            for key, at, steps, chains in rows[:limit]
        )
        following = None
        if len(rows) > limit and sessions:
            following = base64.urlsafe_b64encode(sessions[-1].session_key.encode()).decode()
        return SessionPage(sessions, following, self._state.sessions.count())

    def ignored_contradictions(self) -> int:
        """Contradictions set aside, over every rule in force."""
        sequences = sum(c.ignored for c in self.matcher().constraints)
        states = self.conditions.states().values()
        return sequences + sum(st.condition.ignored for st in states if st.status in ENFORCED)

    def enforced_count(self) -> int:
        """Call conditions a check applies now (active or contested)."""
        return self.conditions.enforced_count()

    # ---- operators -----------------------------------------------------------------------------
    def lift_sequences(self, chains: Sequence[str], reason: str) -> list[str]:
        """Lift the fatal sequences of ``chains`` (a restored tool's); returns the ones
        that were enforced."""
        return [c for c in chains if self.sequences.set_status(c, True, reason)]

    def set_status(self, constraint_id: str, lifted: bool, reason: str) -> ConstraintChange:
        """Lift (stop enforcing, the record stays for audit) or reinstate a rule of
        either kind, with its family; only contradictions met from now on count
        against a reinstated one.  Either clears an operator's judgement of it."""
        rid = rule_id(constraint_id)
        status = "lifted" if lifted else "active"

        def cleared(tx: Connection) -> None:
            self._state.judgements.clear(tx, [rid.value])

        if rid.kind == "sequence":
            found = self.sequences.set_status(rid.value, lifted, reason, then=cleared)
        else:
            found = self.conditions.set_status(rid.value, lifted, then=cleared)
            if found:
                self.sequences.log(rid.value, status, reason)
        if not found:
            raise NotFound(f"no constraint {rid.value!r}")
        return ConstraintChange(rid.value, status)

    def judge(self, constraint_id: str, verdict: str, reason: str, by: str) -> ConstraintChange:
        """An operator's judgement of a rule of either kind, recorded in its history
        with who gave it and why:

        - ``confirmed``: it is enforced again as on reinstating (with its family;
          contradictions met before are set aside), and it acts as a hand-written rule:
          it blocks when it holds, whatever the standing of the sources that taught it,
          and every agent may read it.  A call condition is confirmed as it reads now:
          once new evidence changes what it says (its predicate's values), the
          confirmation no longer holds and the rule waits for a person again;
        - ``retired``: this rule alone (not its family) is no longer enforced;
          reinstating it undoes that."""
        rid = rule_id(constraint_id)
        now = time.time()
        what = ""
        if rid.kind != "sequence":
            st = self.conditions.states().get(rid.value)
            if st is None:
                raise NotFound(f"no constraint {rid.value!r}")
            what = subject(st.condition)  # values learned later are not confirmed
        judgement = Judgement(rid.value, verdict, by, reason, now, what)

        def record(tx: Connection) -> None:
            self._state.judgements.set(tx, judgement)
            self._state.sequences.log(tx, rid.value, verdict, reason, now)

        if verdict == "confirmed":
            if rid.kind == "sequence":
                found = self.sequences.set_status(
                    rid.value, False, reason, then=record, logged=False
                )
            else:
                found = self.conditions.set_status(rid.value, False, then=record)
        elif rid.kind == "sequence":
            found = self.sequences.judge(rid.value, record)
        else:
            found = self.conditions.judge(rid.value, record)
        if not found:
            raise NotFound(f"no constraint {rid.value!r}")
        return ConstraintChange(rid.value, "active" if verdict == "confirmed" else "retired")
