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

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cold_store import ColdStore
from indexes import ActiveIndex, ToolIndexError
from sidecar.archive.publish import Publisher
from sidecar.errors import SidecarError
from sidecar.intake.commit import Committer
from sidecar.intake.plan import Ask, Planner
from sidecar.intake.requests import request_rows
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

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Committed:
    """A batch committed: its answers, in the order of its reports, and whether it
    archived a chain (a home that evicts on report evicts then)."""

    results: list[IntakeResult]
    archived: bool


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
        steps: StepPolicy,
        publisher: Publisher,
        index: Callable[[], ActiveIndex] | None = None,
    ) -> None:
        """``publisher``: what takes the batches' cold records to the archive.  ``index``:
        the hot index a batch's finished requests are placed in as usage rows
        (:mod:`sidecar.intake.requests`); none, no usage is learned."""
        self._state = state
        self._index = index
        self._rules = rules
        self._planner = Planner(state, rules, reproduce_threshold, steps)
        self._committer = Committer(state, cold, records, rules, publisher)

    def batches(
        self,
        reports: Iterable[Report],
        chunk: int = INTAKE_CHUNK,
        source: str = LOCAL,
        operator: bool = True,
        uncataloged: frozenset[str] = frozenset(),
    ) -> Iterator[Committed]:
        """Each ``chunk`` of reports a batch (archived as one cold file), committed as
        the caller asks for the next.  ``source``: who reports (a token's name);
        hand-written conditions are taken only from an ``operator``.  ``uncataloged``:
        tools in no catalog that ``source`` may not teach of (a session's steps on them
        are context only; a chain naming them is rejected)."""
        batch: list[Report] = []
        for item in reports:
            batch.append(item)
            if len(batch) == max(1, chunk):
                yield self._batch(batch, source, operator, uncataloged)
                batch = []
        if batch:
            yield self._batch(batch, source, operator, uncataloged)

    def _batch(
        self, reports: Sequence[Report], source: str, operator: bool, uncataloged: frozenset[str]
    ) -> Committed:
        plan = self._planner.plan(reports, source, operator, uncataloged)
        if plan.asks and self._index is not None:
            plan.counters.requests = self._requests(plan.asks, source)
        results = self._committer.commit(plan)
        return Committed(results, bool(plan.archive))

    def _requests(self, asks: list[Ask], source: str) -> list[RequestRow]:
        # usage is what lookups learn on the side: a report is never refused for it
        assert self._index is not None
        try:
            return request_rows(self._index(), asks, source, time.time())
        except (ToolIndexError, SidecarError) as exc:
            log.warning("usage of %d request(s) not learned: %s", len(asks), exc)
            return []

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
            usage = self._state.uses.forget(tx, which)
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
