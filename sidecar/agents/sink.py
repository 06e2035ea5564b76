"""The one road from observed sessions into the library: a
:class:`~sidecar.agents.sessions.SessionReport` becomes the library's step report
(:func:`step_report`), and :class:`LibrarySink` hands reports to a
:class:`~sidecar.core.Sidecar` in batches, one
:meth:`~sidecar.core.Sidecar.report_many` per source and batch (one intake transaction
and at most one cold file, where one report per session would cost one of each).

Each transport names the source its sessions are attributed to
(:mod:`sidecar.trust.sources`): the gateway's are ``gateway:<name>``, the OTLP intake's
``otlp:<name>``, each trusted only when that source or its token is.  A session the
library rejects is counted as refused and the rest of its batch is taken; a source over
its rate limit has its sessions refused, the others' are taken."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from sidecar.agents.sessions import SessionReport
from sidecar.errors import RateLimited
from sidecar.memory import SessionOutcome, Step
from sidecar.model import IntakeResult

log = logging.getLogger("sidecar.agents")


class Reports(Protocol):
    """What the sink uses of :class:`~sidecar.core.Sidecar` (and of
    :class:`~sidecar.shells.client.RemoteSidecar`)."""

    def report_many(self, reports: Iterable[Any], *, source: str) -> list[IntakeResult]: ...


def step_report(
    session_id: str,
    steps: Sequence[Step],
    outcome: SessionOutcome,
    task_input: str | None,
    context_known: bool = True,
) -> dict[str, Any]:
    """An observed session as the library's step report."""
    report: dict[str, Any] = {
        "steps": [
            {"tool": s.tool, "arguments": s.arguments, "output": s.output, "error": s.error}
            for s in steps
        ],
        "outcome": outcome,
        "session_id": session_id,
        "task_input": task_input,
    }
    if not context_known:
        report["context"] = "unknown"
    return report


class LibrarySink:
    """Reports to the library, attributed by ``source_of(report.source)``."""

    def __init__(self, sc: Reports, source_of: Callable[[str], str]) -> None:
        self.sc = sc
        self.source_of = source_of

    def report_sessions(self, reports: Sequence[SessionReport]) -> int:
        """Report ``reports``; returns how many the library took."""
        by_source: dict[str, list[SessionReport]] = {}
        for report in reports:
            by_source.setdefault(self.source_of(report.source), []).append(report)
        taken = 0
        for source, mine in sorted(by_source.items()):
            try:
                results = self.sc.report_many(
                    [
                        step_report(r.session_id, r.steps, r.outcome, r.task_input,
                                    r.context_known)
                        for r in mine
                    ],
                    source=source,
                )  # fmt: skip
            except RateLimited as exc:
                log.warning('{"event": "report_refused", "source": "%s", "code": "%s"}',
                            source, exc.code)  # fmt: skip
                continue
            taken += sum(r.status != "rejected" for r in results)
        return taken
