"""Typed answers of the library that the shells show (see :mod:`sidecar.wire` for their
JSON form)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
    evicted_tools: int
    quarantined: tuple[QuarantinedView, ...]
    unreadable_chains: int = 0
    """Chains whose cold file was quarantined (their records cannot be read)."""
    active_tools: int = 0
    unfinished_moves: int = 0
    degraded: str | None = None
    """Why writes are refused, when they are (interrupted moves that cannot finish)."""


@dataclass(frozen=True)
class Digest:
    digest: str
    chains: int
    unreadable_chains: int = 0

    def __str__(self) -> str:
        return self.digest


@dataclass(frozen=True)
class ConstraintView:
    chain_id: str
    sequence: tuple[str, ...]
    rule: str
    expected_failure: str
    pointer: str
    status: str
    archived_at: float


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
