"""Chain reports: parsing the JSON shape and decision-boundary step 2 (topology mapped?).

A report line::

    {"topology": ["search_api", "html_parser", "llm_extractor"],
     "outcome": "abandoned" | "completed",
     "failure": {"signature": "...", "kind": "deterministic" | "transient" | null,
                 "error": {...}},
     "constraint": {"rule": "...", "when": [{"step": "html_parser",
                    "field": "payload_bytes", "op": ">", "value": 5000000}],
                    "gapped": false},
     "logs": [...], "session_id": "...", "report_id": "...",
     "reported_at": "2026-11-30T10:00:00Z"}

A sighting is a distinct session: ``report_id`` when given, else ``session_id``, else
the report's content (so an exact replay counts once).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sidecar.errors import InvalidInput, ReportRejected
from sidecar.limits import MAX_PLAN, MAX_STEPS, MAX_TEXT
from sidecar.memory import FailureCondition, Step
from sidecar.model import (
    OPS,
    ChainReport,
    Condition,
    ConstraintSpec,
    Failure,
    StepReport,
)
from sidecar.trust.neutralize import neutralize
from sidecar.trust.redact import MASK, is_sensitive_key, redact, redact_text
from sidecar.validate import check_json_value, check_tool_id

# The seed's three messages, verbatim.
TOO_SHORT = "An abandoned chain must contain at least two tools."
NO_SIGNATURE = "A terminal falsification signature is mandatory to prove abandonment."
NO_RULE = "A negative constraint rule is required to prevent prefix re-execution."

MAX_TOPOLOGY = MAX_PLAN
_REPORT_KEYS = frozenset(
    {
        "topology",
        "outcome",
        "failure",
        "constraint",
        "logs",
        "session_id",
        "report_id",
        "reported_at",
    }
)


def validate_abandoned(report: ChainReport) -> None:
    """The seed's ``archive_chain`` checks, in the seed's order and words."""
    if len(report.topology) < 2:
        raise ReportRejected(TOO_SHORT)
    if report.failure is None or not report.failure.signature.strip():
        raise ReportRejected(NO_SIGNATURE)
    if report.constraint is None or not report.constraint.rule.strip():
        raise ReportRejected(NO_RULE)


def parse_report(data: Any) -> ChainReport:
    """Build and validate a :class:`ChainReport` from decoded JSON."""
    if not isinstance(data, Mapping):
        raise ReportRejected(f"a report must be a JSON object, got {type(data).__name__}")
    unknown = set(data) - _REPORT_KEYS
    if unknown:
        raise ReportRejected(f"unknown report field(s): {', '.join(sorted(unknown))}")
    outcome = data.get("outcome")
    if outcome not in ("abandoned", "completed"):
        raise ReportRejected(f"outcome must be 'abandoned' or 'completed', got {outcome!r}")
    raw_topology = data.get("topology")
    if not isinstance(raw_topology, list):
        raise ReportRejected("topology must be a list of tool ids")
    if len(raw_topology) > MAX_TOPOLOGY:
        raise ReportRejected(f"topology has {len(raw_topology)} tools; at most {MAX_TOPOLOGY}")
    try:
        topology = tuple(check_tool_id(t, f"topology[{i}]") for i, t in enumerate(raw_topology))
    except InvalidInput as exc:
        raise ReportRejected(str(exc)) from None
    session = _optional_text(data.get("session_id"), "session_id")
    report_id = _optional_text(data.get("report_id"), "report_id")
    logs = data.get("logs", [])
    if not isinstance(logs, list):
        raise ReportRejected("logs must be a list")
    _json(logs, "logs")
    report = ChainReport(
        topology=topology,
        outcome=outcome,
        failure=_failure(data.get("failure")),
        constraint=_constraint(data.get("constraint"), topology),
        logs=tuple(logs),
        session_id=session,
        reported_at=_timestamp(data.get("reported_at")),
        report_id=report_id,
    )
    if outcome == "abandoned":
        validate_abandoned(report)
    elif not topology:
        raise ReportRejected("a completed chain needs at least one tool")
    return report


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReportRejected(f"{where} must be a string")
    if len(value) > MAX_TEXT:
        raise ReportRejected(f"{where} is longer than {MAX_TEXT} characters")
    _json(value, where)
    return value


def _optional_text(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ReportRejected(f"{where} must be a non-empty string")
    return _text(value, where)


def _json(value: Any, where: str) -> None:
    try:
        check_json_value(value, where)
    except InvalidInput as exc:
        raise ReportRejected(str(exc)) from None


def _failure(raw: Any) -> Failure | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ReportRejected("failure must be an object")
    kind = raw.get("kind")
    if kind not in (None, "deterministic", "transient"):
        raise ReportRejected(
            f"failure.kind must be 'deterministic', 'transient' or null, got {kind!r}"
        )
    error = raw.get("error") or {}
    if not isinstance(error, Mapping):
        raise ReportRejected("failure.error must be an object")
    _json(error, "failure.error")
    return Failure(_text(raw.get("signature"), "failure.signature"), kind, dict(error))


def _constraint(raw: Any, topology: tuple[str, ...]) -> ConstraintSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ReportRejected("constraint must be an object")
    gapped = raw.get("gapped", False)
    if not isinstance(gapped, bool):
        raise ReportRejected("constraint.gapped must be true or false")
    when_raw = raw.get("when") or []
    if not isinstance(when_raw, list):
        raise ReportRejected("constraint.when must be a list")
    when = tuple(parse_condition(c, i, topology) for i, c in enumerate(when_raw))
    unknown = set(raw) - {"rule", "when", "gapped", "conditions"}
    if unknown:
        raise ReportRejected(f"unknown constraint field(s): {', '.join(sorted(unknown))}")
    conditions = call_conditions(raw.get("conditions"))
    return ConstraintSpec(_text(raw.get("rule"), "constraint.rule"), when, gapped, conditions)


def call_conditions(raw: Any) -> tuple[FailureCondition, ...]:
    """Hand-written call-level conditions (``constraint.conditions``)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ReportRejected("constraint.conditions must be a list")
    out = []
    for i, item in enumerate(raw):
        where = f"constraint.conditions[{i}]"
        if not isinstance(item, Mapping):
            raise ReportRejected(f"{where} must be an object")
        _json(item, where)
        safe = {k: _condition_field(k, v) for k, v in item.items()}
        try:
            condition = FailureCondition.from_dict({**safe, "source": "manual"})
        except (ValueError, TypeError) as exc:
            raise ReportRejected(f"{where}: {exc}") from None
        check_tool_id(condition.tool, f"{where}.tool")
        out.append(condition)
    return tuple(out)


_CONDITION_TEXT = frozenset({"signature", "explanation", "predicate", "sessions"})


def _condition_field(key: str, value: Any) -> Any:
    """A hand-written condition's field as stored and shown to agents: free text
    redacted, its explanation neutralized (:mod:`sidecar.trust.neutralize`), and the value of a
    predicate over a sensitive argument masked (the memory only ever sees it masked)."""
    if key not in _CONDITION_TEXT:
        return value
    value = redact(value)
    if key == "explanation" and isinstance(value, str):
        return neutralize(value)
    if key == "predicate" and isinstance(value, Mapping):
        names = re.split(r"[.|@>]", str(value.get("feature", "")).partition(":")[2])
        raw = value.get("value")
        if any(is_sensitive_key(n) for n in names if n):
            if isinstance(raw, str):
                return {**value, "value": MASK}
            if isinstance(raw, list):
                return {**value, "value": [MASK if isinstance(v, str) else v for v in raw]}
    return value


# ---- sessions reported as steps ----------------------------------------------------------
_STEP_REPORT_KEYS = frozenset(
    {
        "steps",
        "outcome",
        "task_input",
        "session_id",
        "report_id",
        "reported_at",
        "constraint",
        "context",
    }
)
_STEP_KEYS = frozenset({"tool", "arguments", "output", "error"})


def parse_any(data: Any) -> ChainReport | StepReport:
    """A chain report (``topology``) or a session reported as its ``steps``."""
    if isinstance(data, Mapping) and "steps" in data:
        return parse_step_report(data)
    return parse_report(data)


def parse_step_report(data: Mapping[str, Any]) -> StepReport:
    unknown = set(data) - _STEP_REPORT_KEYS
    if unknown:
        raise ReportRejected(f"unknown report field(s): {', '.join(sorted(unknown))}")
    outcome = data.get("outcome", "unknown")
    if outcome not in ("completed", "abandoned", "unknown"):
        raise ReportRejected(
            f"outcome must be 'completed', 'abandoned' or 'unknown', got {outcome!r}"
        )
    raw = data.get("steps")
    if not isinstance(raw, list) or not raw:
        raise ReportRejected("steps must be a non-empty list of {tool, arguments, output, error}")
    if len(raw) > MAX_STEPS:
        raise ReportRejected(f"steps has {len(raw)} steps; at most {MAX_STEPS}")
    task_input = data.get("task_input")
    if task_input is not None:
        task_input = _text(task_input, "task_input")
    constraint = data.get("constraint")
    conditions: tuple[FailureCondition, ...] = ()
    if constraint is not None:
        if not isinstance(constraint, Mapping) or set(constraint) - {"conditions"}:
            raise ReportRejected("a step report's constraint holds only 'conditions'")
        conditions = call_conditions(constraint.get("conditions"))
    context = data.get("context", "known")
    if context not in ("known", "unknown"):
        raise ReportRejected(f"context must be 'known' or 'unknown', got {context!r}")
    return StepReport(
        steps=tuple(_step(s, i) for i, s in enumerate(raw)),
        outcome=outcome,
        task_input=task_input,
        session_id=_optional_text(data.get("session_id"), "session_id"),
        report_id=_optional_text(data.get("report_id"), "report_id"),
        reported_at=_timestamp(data.get("reported_at")),
        conditions=conditions,
        context_known=context == "known",
    )


def steps_of(raw: Any) -> tuple[Step, ...]:
    """A session's steps so far, given as :class:`Step` values or their JSON objects."""
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        raise InvalidInput("steps must be a list of {tool, arguments, output, error}")
    if len(raw) > MAX_STEPS:
        raise InvalidInput(f"steps has {len(raw)} steps; at most {MAX_STEPS}")
    return tuple(s if isinstance(s, Step) else _step(s, i) for i, s in enumerate(raw))


def redacted_steps(steps: Sequence[Step]) -> tuple[Step, ...]:
    """``steps`` as the memory learned from reported ones: arguments, outputs and errors
    redacted.  A check compares a call with what was learned (a masked ``api_key`` has
    the shape of the mask), and quotes back only redacted evidence."""
    return tuple(_REDACTED.get(s) for s in steps)


class _StepCache:
    """Redacted steps by content: a session's steps come back with each of its checks."""

    def __init__(self, size: int = 2048) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._steps: OrderedDict[str, Step] = OrderedDict()

    def get(self, step: Step) -> Step:
        try:
            key = json.dumps([step.tool, step.arguments, step.output, step.error], default=str)
        except (TypeError, ValueError, RecursionError):
            return redact_step(step)
        with self._lock:
            found = self._steps.get(key)
            if found is not None:
                self._steps.move_to_end(key)
                return found
        found = redact_step(step)
        with self._lock:
            self._steps[key] = found
            while len(self._steps) > self._size:
                self._steps.popitem(last=False)
        return found


def redact_step(step: Step) -> Step:
    """A step with every secret of its arguments, output and error masked."""
    error = redact_text(step.error) if step.error is not None else None
    return Step(step.tool, redact(dict(step.arguments)), redact(step.output), error)


_REDACTED = _StepCache()


def task_text(value: Any) -> str | None:
    if value is None:
        return None
    return _text(value, "task_input")


def _step(raw: Any, i: int) -> Step:
    where = f"steps[{i}]"
    if not isinstance(raw, Mapping):
        raise ReportRejected(f"{where} must be an object")
    unknown = set(raw) - _STEP_KEYS
    if unknown:
        raise ReportRejected(f"unknown field(s) in {where}: {', '.join(sorted(unknown))}")
    try:
        tool = check_tool_id(raw.get("tool"), f"{where}.tool")
    except InvalidInput as exc:
        raise ReportRejected(str(exc)) from None
    arguments = raw.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise ReportRejected(f"{where}.arguments must be an object")
    _json(arguments, f"{where}.arguments")
    output = raw.get("output")
    _json(output, f"{where}.output")
    error = raw.get("error")
    if error is not None and not isinstance(error, str):
        raise ReportRejected(f"{where}.error must be a string or null")
    if error is not None:
        error = _text(error, f"{where}.error") or "error"
    return Step(tool, dict(arguments), output, error)


def parse_condition(raw: Any, i: int, topology: tuple[str, ...]) -> Condition:
    where = f"constraint.when[{i}]"
    if not isinstance(raw, Mapping):
        raise ReportRejected(f"{where} must be an object")
    field = raw.get("field")
    if not isinstance(field, str) or not field.strip() or "." in field:
        raise ReportRejected(f"{where}.field must be a non-empty name without dots")
    op = raw.get("op")
    if op not in OPS:
        raise ReportRejected(f"{where}.op must be one of {' '.join(OPS)}, got {op!r}")
    value = raw.get("value")
    if value is not None and not isinstance(value, str | int | float | bool):
        raise ReportRejected(f"{where}.value must be a string, number, boolean or null")
    if isinstance(value, float) and not math.isfinite(value):
        raise ReportRejected(f"{where}.value must be a finite number, got {value!r}")
    if isinstance(value, str):
        _json(value, f"{where}.value")
    if op in (">", ">=", "<", "<=") and not _is_number(value):
        raise ReportRejected(f"{where}: {op} needs a numeric value, got {value!r}")
    step = raw.get("step")
    if step is not None and step not in topology:
        raise ReportRejected(f"{where}.step {step!r} is not a tool of the topology")
    return Condition(field=field, op=op, value=value, step=step)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _timestamp(raw: Any) -> datetime | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ReportRejected("reported_at must be an ISO 8601 string")
    try:
        stamp = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ReportRejected(f"reported_at {raw!r} is not ISO 8601") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
