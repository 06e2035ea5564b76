"""Who reported what: a report's session key, the keys of what its session completed and
of each failing call's chain, and the redaction every report goes through once before
anything is counted or stored."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sidecar.intake.parse import redact_step
from sidecar.memory import Step
from sidecar.model import ChainReport, ConstraintSpec, Failure, StepReport
from sidecar.rules.standing import LOCAL
from sidecar.storage.filters import SOURCE_PREFIX
from sidecar.storage.uses import topology_key
from sidecar.trust.neutralize import neutralize
from sidecar.trust.redact import redact, redact_text

R = TypeVar("R", ChainReport, StepReport)


def session_key(report: ChainReport | StepReport, source: str = LOCAL) -> str:
    """Who met the failure: the report id, else the session id, else the report's
    content (two identical anonymous reports are one replay), within the source that
    reported it (``src:alice/session:s1``; the local source's keys carry no prefix): no
    source can replay, pre-empt or forget another's sessions.  ``report`` is redacted
    (:func:`redacted_ids`)."""
    return _of_source(_bare_key(report), source)


def key_of_session(session_id: str, source: str = LOCAL) -> str:
    """The key :func:`session_key` gives a report of ``session_id`` (and no report id)
    from ``source``: what a check or lookup that names its session is filed under."""
    return _of_source(f"session:{session_id}", source)


def _of_source(key: str, source: str) -> str:
    return key if source == LOCAL else f"{SOURCE_PREFIX}{source}/{key}"


def _bare_key(report: ChainReport | StepReport) -> str:
    if report.report_id:
        return f"report:{report.report_id}"
    if report.session_id:
        return f"session:{report.session_id}"
    if isinstance(report, StepReport):
        content: Any = [[s.to_dict() for s in report.steps], report.outcome, report.task_input]
    else:
        failure = report.failure
        content = [
            list(report.topology),
            report.outcome,
            failure.signature if failure else None,
            failure.kind if failure else None,
            dict(failure.error) if failure else None,
            list(report.logs),
        ]
    stamp = report.reported_at.isoformat() if report.reported_at else None
    payload = json.dumps([content, stamp], sort_keys=True, default=str)
    return "content:" + hashlib.sha256(payload.encode()).hexdigest()[:32]


def redacted_ids(report: R) -> R:
    """The report with its ids redacted, as they are stored (and keyed)."""
    return replace(
        report,
        session_id=redact_text(report.session_id) if report.session_id else report.session_id,
        report_id=redact_text(report.report_id) if report.report_id else report.report_id,
    )


def redacted_report(report: ChainReport) -> ChainReport:
    """An abandoned chain report with its failure, rule, conditions' values, logs and
    ids redacted (and the texts later agents are shown neutralized)."""
    assert report.failure is not None and report.constraint is not None
    failure = Failure(
        neutralize(redact(report.failure.signature)),
        report.failure.kind,
        redact(dict(report.failure.error)),
    )
    when = tuple(
        replace(c, value=redact_text(c.value)) if isinstance(c.value, str) else c
        for c in report.constraint.when
    )
    constraint = ConstraintSpec(
        neutralize(redact(report.constraint.rule)),
        when,
        report.constraint.gapped,
        report.constraint.conditions,
    )
    redacted = replace(
        report, failure=failure, constraint=constraint, logs=tuple(redact(list(report.logs)))
    )
    return redacted_ids(redacted)


def usage_key(kind: str, session: str, topology: tuple[str, ...] | list[str] = ()) -> str:
    """Who succeeded at what: a replayed report names the same usage."""
    payload = json.dumps([kind, session, topology_key(topology)], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def call_chain_id(session: str, position: int, tool: str, error: str) -> str:
    """The chain of one failing call of one session: the same report replayed names the
    same chain, another session's identical failure another chain."""
    payload = json.dumps([session, position, tool, error], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class StepPolicy:
    max_step_bytes: int = 65_536
    """Largest stored output or arguments of one step, as JSON; larger ones are cut."""
    keep_outputs: bool = True
    """Keep steps' outputs in the cold record; off, only derived features are kept."""

    def stored(self, report: StepReport) -> tuple[Step, ...]:
        """A session's steps as they are learned from and stored: redacted (as a check
        redacts the steps it is given), then oversize parts cut."""
        cap = self.max_step_bytes
        out = []
        for s in report.steps:
            r = redact_step(s)
            out.append(Step(r.tool, capped(dict(r.arguments), cap), capped(r.output, cap), r.error))
        return tuple(out)


def capped(value: Any, cap: int) -> Any:
    """``value`` when its JSON is at most ``cap`` bytes, else a marker with its head."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text.encode()) <= cap:
        return value
    return {"_truncated": True, "bytes": len(text.encode()), "head": text[: min(cap, 1024)]}
