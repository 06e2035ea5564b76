"""Report intake: every report through the decision boundary, in batches, as a pipeline:
parse and plan (:mod:`sidecar.intake.plan`), then commit (:mod:`sidecar.intake.commit`).

A batch is all-or-nothing for what it changes.  Everything a batch counts is keyed by
session (:func:`~sidecar.intake.sessions.session_key`), so sending a batch again, whole
or after a failure part-way, counts nothing twice: the same dead end met by N sessions
counts N, an exact replay counts once, and a completed run replayed neither counts again
nor contradicts a rule again.

A session reported as its ``steps`` (:class:`~sidecar.model.StepReport`) teaches the
call memory (once per session); each of its failing calls that is deterministic (or
reproduced by enough sessions) is archived as a chain of kind ``call`` (its prefix and
the failing call: evidence for eviction and audit, not a fatal sequence to match); its
successful calls are usage evidence; a successful call that completes a fatal sequence
contradicts that rule; and a finished session's request (``task_input``) teaches lookups
which tools served it (:mod:`sidecar.lookup.usage`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cold_store import ColdStore
from sidecar.intake.commit import Committer
from sidecar.intake.plan import Ask, Planner
from sidecar.intake.publish import Publisher
from sidecar.intake.sessions import StepPolicy
from sidecar.limits import INTAKE_CHUNK
from sidecar.model import ChainReport, IntakeResult, StepReport
from sidecar.rules import Rules
from sidecar.rules.standing import LOCAL, session_filter_prefix
from sidecar.storage.filters import SessionFilter
from sidecar.storage.requests import RequestRow
from sidecar.storage.state import State
from sidecar.tools.records import ToolRecords

Report = ChainReport | StepReport | Mapping[str, Any]
Learn = Callable[[list[Ask], str], list[RequestRow]]
"""Usage rows of a batch's finished requests, attributed to the batch's source."""


@dataclass(frozen=True)
class SourceForgotten:
    sessions: frozenset[str]
    constraints: int
    """Archived chains lifted: no remaining session supports them."""


class Intake:
    def __init__(
        self,
        state: State,
        cold: ColdStore,
        records: ToolRecords,
        rules: Rules,
        reproduce_threshold: int,
        steps: StepPolicy | None = None,
        after_archive: Callable[[], str] | None = None,
        crash_at: str | None = None,
        group_publish: bool = False,
        learn: Learn | None = None,
    ) -> None:
        """``group_publish``: cold records reach the archive in group commits, from a
        thread of their own (a shared Delta table); else after each batch.  ``learn``
        turns the batch's finished requests into usage rows (:mod:`sidecar.lookup.usage`)."""
        self._state = state
        self._learn = learn
        self._rules = rules
        self.publisher = Publisher(state, cold, group_publish)
        self._planner = Planner(state, rules, reproduce_threshold, steps or StepPolicy())
        self._committer = Committer(
            state, cold, records, rules, self.publisher, after_archive, crash_at
        )

    def report_many(
        self,
        reports: Iterable[Report],
        chunk: int = INTAKE_CHUNK,
        source: str = LOCAL,
        operator: bool = True,
        progress: Callable[[int], None] | None = None,
        uncataloged: frozenset[str] = frozenset(),
    ) -> list[IntakeResult]:
        """Each ``chunk`` of reports a batch (archived as one cold file).  ``source``:
        who reports (a token's name); hand-written conditions are taken only from an
        ``operator``.  ``progress`` hears the reports done so far after each batch.
        ``uncataloged``: tools in no catalog that ``source`` may not teach of (a
        session's steps on them are context only; a chain naming them is rejected)."""
        results: list[IntakeResult] = []
        batch: list[Report] = []
        for item in reports:
            batch.append(item)
            if len(batch) == max(1, chunk):
                results += self._batch(batch, source, operator, uncataloged)
                batch = []
                if progress is not None:
                    progress(len(results))
        if batch:
            results += self._batch(batch, source, operator, uncataloged)
            if progress is not None:
                progress(len(results))
        return results

    def _batch(
        self, reports: Sequence[Report], source: str, operator: bool, uncataloged: frozenset[str]
    ) -> list[IntakeResult]:
        plan = self._planner.plan(reports, source, operator, uncataloged)
        if plan.asks and self._learn is not None:
            plan.counters.requests = self._learn(plan.asks, source)
        return self._committer.commit(plan)

    def close(self) -> None:
        self.publisher.close()

    def reconcile(self) -> list[str]:
        """Finish what a crash interrupted (see :meth:`Committer.reconcile`)."""
        return self._committer.reconcile()

    def forget(self, source: str, since: float | None) -> SourceForgotten:
        """Stop counting ``source``'s sessions (sightings, dead ends, completed runs and
        the contradictions they brought); an archived chain that no other session
        supports is lifted (it stays in the archive, for audit)."""
        which = SessionFilter(session_filter_prefix(source), since)
        with self._state.tx() as tx:
            sightings = self._state.sightings.forget(tx, which)
            usage = self._state.usage.forget(tx, which)
            self._state.requests.forget(tx, which)
            self._state.budgets.forget(tx, source, since)
            self._rules.sequences.uncontradict(tx, usage.contradicted)
            unsupported = sorted(
                c for c in sightings.chains if not self._state.sightings.supported(tx, c)
            )
        lifted = sum(
            self._rules.sequences.set_status(
                cid, True, f"forgotten: every session behind it came from {source}", False
            )
            for cid in unsupported
        )
        return SourceForgotten(frozenset(sightings.sessions | usage.sessions), lifted)
