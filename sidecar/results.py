"""Typed answers of the library that the shells show (see :mod:`sidecar.wire` for their
JSON form)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sidecar.callmemory import ConditionState
    from sidecar.model import ArchivedConstraint


@dataclass(frozen=True)
class QuarantinedView:
    file: str
    path: str
    reason: str


@dataclass(frozen=True)
class ArchiveStatus:
    chains: int
    """Archived chains that can be read."""
    active_constraints: int
    """Fatal sequences the matcher enforces."""
    evicted_tools: int
    quarantined: tuple[QuarantinedView, ...]
    unreadable_chains: int = 0
    """Chains whose cold file was quarantined (their records cannot be read)."""
    active_tools: int = 0
    unfinished_moves: int = 0
    degraded: str | None = None
    damaged: tuple[QuarantinedView, ...] = ()
    """Cold files that are not what was published (missing, resized, or with another
    checksum when verified deeply): found before a read trips on them."""
    call_conditions: int = 0
    """Learned (or hand-written) call conditions that checks enforce: active, or
    contested (warn only); ``constraints list`` shows them beside the sequences."""


@dataclass(frozen=True)
class Digest:
    digest: str
    chains: int
    unreadable_chains: int = 0

    def __str__(self) -> str:
        return self.digest


@dataclass(frozen=True)
class ConstraintView:
    """A constraint as ``constraints list`` shows it: a fatal sequence (``kind``
    ``sequence``, its ``chain_id`` the archived chain's) or a learned call condition
    (``kind`` ``call``, its ``chain_id`` the condition's id, ``sequence`` its tool)."""

    chain_id: str
    sequence: tuple[str, ...]
    rule: str
    expected_failure: str
    pointer: str | None
    status: str
    archived_at: float
    kind: str = "sequence"
    valid_from: float = 0.0
    last_seen: float = 0.0
    invalid_at: float | None = None
    support: int = 1
    contradictions: int = 0
    confidence: float | None = None
    condition: Mapping[str, Any] | None = None
    """A call condition's JSON form (predicate, family, evidence)."""
    sessions: int = 0
    """The sessions behind it (``support`` counts them as independent situations for a
    call condition; for a fatal sequence every session is its own)."""
    sources: tuple[str, ...] = ()
    chance: float | None = None
    """How likely chance alone explains a learned condition."""
    confirmations: int | None = None


@dataclass(frozen=True)
class MaintenanceStep:
    """One maintenance step on one cold table."""

    table: str
    step: str
    """``compact``, ``checkpoint`` or ``vacuum``."""
    files_added: int
    files_removed: int
    version: int | None
    """The table's version after the step (``None``: the backend keeps no versions)."""


@dataclass(frozen=True)
class ArchiveMaintenance:
    """What one maintenance run did to the cold archive."""

    backend: str
    """``parquet`` (nothing to do: its files are never rewritten), ``delta`` or ``s3``."""
    steps: tuple[MaintenanceStep, ...]
    retention_hours: float
    """Files no commit names are deleted only once they are this old."""


@dataclass(frozen=True)
class Forgotten:
    """What forgetting a source removed, and what was derived again."""

    source: str
    sessions: int
    """Sessions (and chain reports) no longer counted."""
    conditions: int
    """Hand-written conditions removed."""
    constraints: int
    """Archived chains no longer enforced (they stay in the archive, for audit)."""
    tools: tuple[str, ...]
    """Tools whose learned conditions were derived again."""


def sequence_view(
    c: ArchivedConstraint, status: str, sessions: int, sources: tuple[str, ...] = ()
) -> ConstraintView:
    return ConstraintView(
        chain_id=c.chain_id,
        sequence=c.sequence,
        rule=c.rule,
        expected_failure=c.signature,
        pointer=c.pointer,
        status=status,
        archived_at=c.archived_at,
        kind="sequence",
        valid_from=c.archived_at,
        last_seen=c.last_seen,
        invalid_at=c.invalid_at if status == "retired" else None,
        support=sessions,
        contradictions=c.contradictions,
        sessions=sessions,
        sources=sources,
    )


def condition_view(st: ConditionState) -> ConstraintView:
    c = st.condition
    return ConstraintView(
        chain_id=c.condition_id,
        sequence=(c.tool,),
        rule=c.explanation,
        expected_failure=c.signature,
        pointer=st.pointer,
        status=st.status,
        archived_at=st.valid_from,
        kind="call",
        valid_from=st.valid_from,
        last_seen=st.last_seen,
        invalid_at=st.invalid_at if st.status == "retired" else None,
        support=c.support,
        contradictions=c.contradictions,
        confidence=c.confidence,
        condition=c.to_dict(),
        sessions=c.session_count or c.support,
        sources=c.sources,
        chance=c.chance if c.source == "learned" else None,
        confirmations=c.confirmations if c.source == "learned" else None,
    )


@dataclass(frozen=True)
class ConstraintChange:
    chain_id: str
    status: str


@dataclass(frozen=True)
class RevocationRun:
    revoker: str
    results: Mapping[str, int]


@dataclass(frozen=True)
class Recovered:
    recovered_moves: int


@dataclass(frozen=True)
class Health:
    ready: bool
    checks: Mapping[str, str] = field(default_factory=dict)


class AuditRecord(dict[str, Any]):
    """The full archived record behind a pointer, JSON columns decoded, times as ISO
    text (a plain JSON object: ``record["topology"]``)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditRecord:
        return cls(data)
