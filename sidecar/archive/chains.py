"""Archived chains: identity, the cold record layout, and the seed's archive digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sidecar.model import ChainReport, CredentialRef

CHAIN_RECORD_VERSION = 2
"""The layout of an archived chain's cold record (an evicted tool's is
:data:`~sidecar.eviction.engine.EVICTION_RECORD_VERSION`)."""


# built once: json.dumps with options builds a new encoder per call, and intake encodes
# a few values per chain
_COMPACT_SORTED = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_COMPACT_SORTED_STR = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def chain_id(report: ChainReport) -> str:
    """Deterministic id of an abandoned chain's constraint: a replayed report maps to
    the same chain and is never archived twice."""
    assert report.failure is not None and report.constraint is not None
    payload = _COMPACT_SORTED.encode(
        [
            list(report.topology),
            report.failure.signature,
            report.constraint.rule,
            [c.to_dict() for c in report.constraint.when],
            report.constraint.gapped,
        ]
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def digest_entry(topology: Sequence[str], signature: str) -> str:
    return f"{'>'.join(topology)}::{signature}"


def archive_digest(entries: Iterable[str]) -> str:
    """The seed's ``build_archive`` digest: sha256 over the sorted entries, as compact
    sorted-key JSON ``{"chains": [...]}``."""
    payload = {"chains": tuple(sorted(entries))}
    data = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def _dump(value: Any) -> str:
    return _COMPACT_SORTED_STR.encode(value)


def cold_row(
    *,
    cid: str,
    report: ChainReport,
    kind: str,
    classification: str,
    tool_types: Sequence[str],
    snapshots: Mapping[str, Any],
    credentials: Mapping[str, Sequence[CredentialRef]],
    occurrences: int,
    now: datetime,
    calls: CallEvidence | None = None,
) -> dict[str, Any]:
    """The row stored in the cold ``chains`` table; ``report`` is already redacted.
    ``calls``: the evidence of a failing call reported with its session's steps."""
    assert report.failure is not None and report.constraint is not None
    return {
        "chain_id": cid,
        "archive_date": now.astimezone(UTC).date().isoformat(),
        "archived_at": now,
        "reported_at": report.reported_at,
        "session_id": report.session_id,
        "topology": list(report.topology),
        "tool_types": list(tool_types),
        "terminal_signature": report.failure.signature,
        "failure_kind": kind,
        "classification": classification,
        "error_json": _dump(dict(report.failure.error)),
        "rule": report.constraint.rule,
        "condition_json": _dump(
            {
                "when": [c.to_dict() for c in report.constraint.when],
                "gapped": report.constraint.gapped,
            }
        ),
        "gapped": report.constraint.gapped,
        "tool_snapshots_json": _dump(dict(snapshots)),
        "credentials_json": _dump(
            {tool: [c.to_dict() for c in creds] for tool, creds in credentials.items()}
        ),
        "logs_json": _dump(list(report.logs)),
        "occurrences": occurrences,
        "record_version": CHAIN_RECORD_VERSION,
        "source": "steps" if calls else "chain",
        "normalized_signature": calls.normalized_signature if calls else None,
        "steps_json": _dump(calls.steps) if calls else None,
        "task_input": calls.task_input if calls else None,
        "conditions_json": _dump(list(calls.conditions)) if calls else None,
    }


@dataclass(frozen=True)
class CallEvidence:
    """What the cold record of a failing call keeps beside its chain: the steps up to and
    including the failing one (redacted, capped), the task input, the normalized
    signature, and the conditions known for the failure when it was archived."""

    normalized_signature: str
    steps: list[dict[str, Any]]
    task_input: str | None
    conditions: tuple[dict[str, Any], ...] = ()


def audit_view(row: Mapping[str, Any], pointer: str) -> dict[str, Any]:
    """A cold row as a plain JSON-ready record: JSON columns decoded, times as ISO."""
    out: dict[str, Any] = {"pointer": pointer}
    for key, value in row.items():
        if key.endswith("_json"):
            out[key.removesuffix("_json")] = json.loads(value) if value else None
        elif isinstance(value, datetime):
            out[key] = value.astimezone(UTC).isoformat().replace("+00:00", "Z")
        else:
            out[key] = value
    return out


def intent_view(intent: Mapping[str, Any], move_id: str, pointer: str, why: str) -> dict[str, Any]:
    """An evicted tool's record as its move's journal intent captured it, for when the
    cold record cannot be read; ``source`` says so."""
    snap = intent["snapshot"]
    return {
        "pointer": pointer,
        "record_id": move_id,
        "tool_id": intent["tool_id"],
        "document": snap["document"],
        "metadata": snap["metadata"],
        "credentials": snap["credentials"],
        "decision": snap.get("decision"),
        "chain_ids": list(intent["chain_ids"]),
        "source": f"journal intent (move {intent['status']}; cold record: {why})",
    }
