"""The OTLP intake's sink over the library: sessions reported to a
:class:`~sidecar.core.Sidecar` in batches (one :meth:`~sidecar.core.Sidecar.report_many`
per sender and batch: one intake transaction and at most one cold file, where one report
per session would cost one of each).  Each session is attributed to the token that sent
its spans, as the source ``otlp:<name>`` (:mod:`sidecar.trust.sources`): trusted only when
that source or the token is, one witness with the token's own reports, under the
token's report rate, and forgotten with the token or alone.  A session the library
rejects is counted as refused, the rest of its batch is taken; a sender over its rate
limit has its sessions refused, the others' are taken."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sidecar.agents.otlp.sessions import Report
from sidecar.core import Sidecar
from sidecar.errors import RateLimited
from sidecar.memory import SessionOutcome as Outcome
from sidecar.memory import Step
from sidecar.trust.sources import otlp_source

log = logging.getLogger("sidecar.agents.otlp")


class LibrarySink:
    def __init__(self, sc: Sidecar) -> None:
        self.sc = sc

    def report_session(
        self, session_id: str, steps: list[Step], outcome: Outcome, task_input: str | None
    ) -> None:
        self.report_sessions([Report(session_id, tuple(steps), outcome, task_input, None, 0)])

    def report_sessions(self, reports: Sequence[Report]) -> int:
        """Report ``reports``; returns how many the library took."""
        by_source: dict[str, list[Report]] = {}
        for report in reports:
            by_source.setdefault(otlp_source(report.source), []).append(report)
        taken = 0
        for source, mine in sorted(by_source.items()):
            try:
                results = self.sc.report_many([_report(r) for r in mine], source=source)
            except RateLimited as exc:
                log.warning('{"event": "report_refused", "source": "%s", "code": "%s"}',
                            source, exc.code)  # fmt: skip
                continue
            taken += sum(r.status != "rejected" for r in results)
        return taken


def _report(report: Report) -> dict[str, Any]:
    return {
        "steps": [
            {"tool": s.tool, "arguments": s.arguments, "output": s.output, "error": s.error}
            for s in report.steps
        ],
        "outcome": report.outcome,
        "session_id": report.session_id,
        "task_input": report.task_input,
    }
