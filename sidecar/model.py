"""Frozen domain types shared by the library, the CLI and the service."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sidecar.memory import FailureCondition, SessionRisk, Step
from sidecar.memory.evidence import SessionOutcome
from sidecar.validate import MAX_DEPTH as MAX_DEPTH
from sidecar.validate import TOOL_ID_PATTERN as TOOL_ID_PATTERN

Outcome = Literal["abandoned", "completed"]
FailureKind = Literal["deterministic", "transient"]
CheckMode = Literal["sequence", "prefix"]
Op = Literal[">", ">=", "<", "<=", "==", "!="]
OPS: tuple[str, ...] = (">", ">=", "<", "<=", "==", "!=")
Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class CredentialRef:
    """A reference to a credential (never its value)."""

    ref: str
    scopes: tuple[str, ...] = ()
    provider: str | None = None
    revocation_endpoint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ref": self.ref, "scopes": list(self.scopes)}
        if self.provider is not None:
            out["provider"] = self.provider
        if self.revocation_endpoint is not None:
            out["revocation_endpoint"] = self.revocation_endpoint
        return out


@dataclass(frozen=True)
class Tool:
    tool_id: str
    description: str
    tool_type: str = "unspecified"
    input_schema: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=True)
    credentials: tuple[CredentialRef, ...] = ()
    pinned: bool = False
    source_format: str = "sidecar"

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_id": self.tool_id,
            "tool_type": self.tool_type,
            "description": self.description,
            "input_schema": dict(self.input_schema),
            "credentials": [c.to_dict() for c in self.credentials],
            "pinned": self.pinned,
        }


@dataclass(frozen=True)
class Condition:
    """``field op value``, read from the context (scoped to ``step`` when given)."""

    field: str
    op: Op
    value: Scalar
    step: str | None = None

    def describe(self) -> str:
        name = f"{self.step}.{self.field}" if self.step else self.field
        return f"{name} {self.op} {self.value!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "field": self.field, "op": self.op, "value": self.value}


@dataclass(frozen=True)
class ConstraintSpec:
    rule: str
    when: tuple[Condition, ...] = ()
    gapped: bool = False
    conditions: tuple[FailureCondition, ...] = field(default=(), hash=False)
    """Call-level conditions written by hand (the JSON form of
    :class:`~sidecar.memory.FailureCondition`)."""


@dataclass(frozen=True)
class StepReport:
    """A session reported as its ordered steps (tool, arguments, output or error)."""

    steps: tuple[Step, ...]
    outcome: SessionOutcome
    task_input: str | None = None
    session_id: str | None = None
    report_id: str | None = None
    reported_at: datetime | None = None
    conditions: tuple[FailureCondition, ...] = field(default=(), hash=False)
    context_known: bool = True
    """``False``: the steps are calls nothing could tie to the calls before them (a
    gateway's client that keeps no session and declares none): the memory learns only
    what each call alone shows."""


@dataclass(frozen=True)
class Failure:
    signature: str
    kind: FailureKind | None = None
    error: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class ChainReport:
    topology: tuple[str, ...]
    outcome: Outcome
    failure: Failure | None = None
    constraint: ConstraintSpec | None = None
    logs: tuple[Any, ...] = field(default=(), hash=False)
    session_id: str | None = None
    reported_at: datetime | None = None
    report_id: str | None = None


@dataclass(frozen=True)
class IntakeResult:
    status: Literal["archived", "not_archived", "rejected", "recorded"]
    chain_id: str | None = None
    pointer: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        for key in ("chain_id", "pointer", "reason"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True)
class ArchivedConstraint:
    """A compiled-form constraint: the fatal sequence is ``prefix + (terminal,)``."""

    chain_id: str
    sequence: tuple[str, ...]
    rule: str
    signature: str
    when: tuple[Condition, ...]
    gapped: bool
    pointer: str
    order: int
    """Archive order (0 = first archived), which the seed's prefix check depends on."""
    archived_at: float = 0.0
    kind: str = "sequence"
    """``sequence``: a fatal sequence the matcher enforces; ``call``: a failing call
    reported with its steps (evidence for eviction; learned conditions enforce it)."""
    lifted: bool = False
    contradictions: int = 0
    baseline: int = 0
    last_seen: float = 0.0
    invalid_at: float | None = None
    contested: bool = False
    """Set by the matcher's builder: a contested constraint warns, never blocks."""
    sources: tuple[str, ...] = ()
    """Who reported the sessions behind it (see :mod:`sidecar.rules.standing`)."""
    unconfirmed: bool = False
    """Its evidence is not independent (one untrusted source): it warns, never blocks,
    withholds or evicts."""
    ignored: int = 0
    """Contradictions recorded but not counted: they came from sources without the
    standing to contest it."""
    ignored_sources: tuple[str, ...] = ()
    """The sources of those contradictions: their runs are no use of its tools either
    (an eviction the rule drives does not wait for them)."""
    vouched: bool = False
    """An operator confirmed it: it blocks, and every agent may read it."""
    retired_at: float | None = None
    """When an operator retired it (``None``: not retired by hand)."""

    @property
    def warn_only(self) -> bool:
        return self.contested or self.unconfirmed

    @property
    def prefix(self) -> tuple[str, ...]:
        return self.sequence[:-1]

    @property
    def terminal(self) -> str:
        return self.sequence[-1]


@dataclass(frozen=True)
class Collision:
    chain_id: str
    matched: tuple[str, ...]
    rule: str
    expected_failure: str
    pointer: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "chain_id": self.chain_id,
            "matched": list(self.matched),
            "rule": self.rule,
            "expected_failure": self.expected_failure,
            "pointer": self.pointer,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class CheckResult:
    safe: bool
    collisions: tuple[Collision, ...]
    mode: CheckMode = "sequence"
    warnings: tuple[str, ...] = ()
    """Contested fatal sequences the plan contains: they warn, they do not block."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "safe": self.safe,
            "collisions": [c.to_dict() for c in self.collisions],
        }
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True)
class CheckReason:
    """Why a call is blocked or warned: one constraint that holds for it."""

    level: Literal["warn", "block"]
    constraint_id: str
    kind: Literal["call", "sequence"]
    explanation: str
    evidence: str
    """What the call or the session showed that made it hold."""
    pointer: str | None = None
    status: str = "active"
    quoted: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Free text of the rule's evidence (its failure message, a sequence's rule), shown
    as data to a viewer who may read it (:mod:`sidecar.rules.wording`); empty else."""
    to_block: int | None = None
    """A warning's learned call condition: how many more independent situations (each
    from a source of its own, none contradicting it) it needs before it blocks; ``None``
    when no number would do (its failure is not deterministic, it is contested) or for
    any other reason."""


@dataclass(frozen=True)
class CallCheck:
    """The verdict before a call: ``allow``, ``warn`` (forward it, with the reasons) or
    ``block`` (do not send it), block reasons first."""

    decision: Literal["allow", "warn", "block"]
    reasons: tuple[CheckReason, ...] = ()
    risk: SessionRisk | None = None
    """How likely the session, as its steps so far stand, ends abandoned, learned from
    the outcomes of the sessions reported (``None``: not asked)."""

    @property
    def safe(self) -> bool:
        return self.decision != "block"

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "safe": self.safe,
            "reasons": [{f: getattr(r, f) for f in r.__dataclass_fields__} for r in self.reasons],
            "risk": None if self.risk is None else self.risk.to_dict(),
        }


@dataclass(frozen=True)
class Withheld:
    tool_id: str
    rule: str
    pointer: str
    chain_id: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_id": self.tool_id,
            "rule": self.rule,
            "pointer": self.pointer,
            "chain_id": self.chain_id,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class LookupHit:
    tool_id: str
    score: float
    description: str
    warnings: tuple[str, ...] = ()
    tool_type: str = "unspecified"
    usage: int = 0
    """The completed sessions whose requests, like this one, raised the tool (0: usage
    did not raise it)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_id": self.tool_id,
            "score": self.score,
            "description": self.description,
            "tool_type": self.tool_type,
            "warnings": list(self.warnings),
            "usage": self.usage,
        }


@dataclass(frozen=True)
class LookupResult:
    hits: tuple[LookupHit, ...]
    withheld: tuple[Withheld, ...]
    abstained: bool = False
    """No tool fits well enough: the best hit's similarity is below the calibrated
    threshold (``abstain_below``); the hits are the best candidates anyway."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "hits": [h.to_dict() for h in self.hits],
            "withheld": [w.to_dict() for w in self.withheld],
            "abstained": self.abstained,
        }
