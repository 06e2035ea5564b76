"""The OTLP intake's sink over the library: sessions reported to a
:class:`~sidecar.core.Sidecar` in batches (one :meth:`~sidecar.core.Sidecar.report_many`
per batch: one intake transaction and at most one cold file, where one report per
session would cost one of each).  A session the library rejects is counted as refused,
the rest of its batch is taken."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sidecar.core import Sidecar
from sidecar.gateway.backend import Outcome, Step
from sidecar.otlp.sessions import Report
from sidecar.principals import OTLP


class LibrarySink:
    def __init__(self, sc: Sidecar) -> None:
        self.sc = sc

    def report_session(
        self, session_id: str, steps: list[Step], outcome: Outcome, task_input: str | None
    ) -> None:
        self.report_sessions([Report(session_id, tuple(steps), outcome, task_input, None, 0)])

    def report_sessions(self, reports: Sequence[Report]) -> int:
        """Report ``reports``; returns how many the library took."""
        results = self.sc.report_many([_report(r) for r in reports], source=OTLP)
        return sum(r.status != "rejected" for r in results)


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
