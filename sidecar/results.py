"""Typed answers of the library that the shells show (see :mod:`sidecar.wire` for their
JSON form)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.model import Tool
from sidecar.storage.decisions import Decision
from sidecar.storage.mandates import Mandate


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
    ignored_contradictions: int = 0
    """Successes from untrusted sources that matched a rule a trusted source stands
    behind, set aside (see ``constraints show``)."""
    pending_records: int = 0
    """Cold records acknowledged and not yet in the archive (published shortly; a
    pointer to one resolves meanwhile)."""


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
    independent: bool = True
    """Whether its evidence came from two sources, or a trusted one: only then may it
    block, withhold or evict; otherwise it warns."""
    ignored_contradictions: int = 0
    """Successes that matched it from sources without the standing to contest it:
    recorded and shown, they change no verdict."""
    judged: str | None = None
    """An operator's standing judgement: ``confirmed`` (it blocks, as a hand-written rule
    does) or ``retired`` (not enforced); ``None``: none."""
    judged_by: str | None = None
    """The operator who gave it (shown to operators only)."""
    to_block: int | None = None
    """A learned call condition in force, in :meth:`~sidecar.Sidecar.constraint` (one
    rule; the lists leave it ``None``): how many more independent situations it needs
    before it blocks (0: it blocks now; ``None``: no number would do, or not a learned
    condition)."""


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
    restored: tuple[str, ...] = ()
    """Evicted tools whose eviction rested on what was forgotten: brought back (their
    open revocation mandates cancelled, recorded as such)."""


@dataclass(frozen=True)
class ConstraintChange:
    chain_id: str
    status: str


@dataclass(frozen=True)
class ConstraintEvent:
    """One recorded change of a rule: ``action`` the status it was given (``lifted``,
    ``active``) or a variant's note, with its reason (which names the operator who
    made it, when a shell said who) and when."""

    action: str
    reason: str
    at: float


@dataclass(frozen=True)
class LearnedSession:
    """A session the sidecar learned from: its key (a source's sessions carry its name),
    its source, when it was first seen, the steps the call memory learned of it, and the
    archived chains it met."""

    session_key: str
    source: str
    first_seen: float
    steps: int | None
    chains: tuple[str, ...]


@dataclass(frozen=True)
class SessionPage:
    sessions: tuple[LearnedSession, ...]
    next_cursor: str | None
    """Where the next page starts (``None``: this was the last)."""
    total: int


@dataclass(frozen=True)
class ToolMove:
    """One move of a tool out of the hot index: ``intent -> archived -> mandated ->
    deleted -> done``, the chains that drove it, when it began and last advanced."""

    move_id: str
    status: str
    chain_ids: tuple[str, ...]
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class ToolRestore:
    """One restore: the move it undid, its reason, the chains it lifted, and when."""

    move_id: str
    reason: str
    lifted: tuple[str, ...]
    restored_at: float


@dataclass(frozen=True)
class ToolUsage:
    """What finished sessions of one source brought to a tool, for one outcome
    (``completed``: it served the request; ``abandoned``: the session failed at it): the
    sessions behind the requests kept, and how many requests are kept (a source keeps a
    bounded sample per tool and outcome; sessions of requests pushed out are not counted)."""

    source: str
    outcome: str
    sessions: int
    requests: int


@dataclass(frozen=True)
class ToolHistory:
    """One tool as the sidecar knows it: its definition, where it is now, every move
    and restore of it (newest first), its revocation mandates, the usage finished
    sessions brought to it and the rules that name it.

    ``state``: ``hot`` (in the active index), ``moving`` (a move has begun and not
    finished), ``cold`` (evicted: ``evicted_at``, ``move_id`` and ``pointer`` say when,
    by which move and where its record is) or ``gone`` (once evicted and restored, since
    dropped from the index by its catalog source)."""

    tool_id: str
    state: str
    tool: Tool | None
    """The definition: the active record, else the one the latest move captured."""
    evicted_at: float | None = None
    move_id: str | None = None
    pointer: str | None = None
    moves: tuple[ToolMove, ...] = ()
    restores: tuple[ToolRestore, ...] = ()
    mandates: tuple[Mandate, ...] = ()
    usage: tuple[ToolUsage, ...] = ()
    """By source, then outcome."""
    completed_chains: int = 0
    """Distinct completed chains that used it (evidence that keeps it hot)."""
    rules: tuple[ConstraintView, ...] = ()
    """Fatal sequences and call conditions that name it, whatever their status."""

    def sessions_by_outcome(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for u in self.usage:
            out[u.outcome] = out.get(u.outcome, 0) + u.sessions
        return out

    def sessions_by_source(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for u in self.usage:
            out[u.source] = out.get(u.source, 0) + u.sessions
        return out


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


@dataclass(frozen=True)
class SchemaMigration:
    """What ``sidecar migrate`` did to the state's schema."""

    location: str
    """The state database (a path, or a URL without its password)."""
    version: int
    """The schema version the state is at now: this code's."""
    created: tuple[str, ...] = ()
    """Tables it created."""
    applied: tuple[str, ...] = ()
    """Migrations it applied, oldest first, as ``"<version>: <description>"``."""


class AuditRecord(dict[str, Any]):
    """The full archived record behind a pointer, JSON columns decoded, times as ISO
    text (a plain JSON object: ``record["topology"]``)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditRecord:
        return cls(data)


@dataclass(frozen=True)
class SessionActivity:
    """One session as a person reads it: what the sidecar learned of it (``None``: not
    learned, e.g. its only call was refused), the archived chains it met, and every call
    and lookup decided for it that named it, oldest first."""

    session_key: str
    source: str
    learned: LearnedSession | None
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class HourActivity:
    """One hour (``start``, Unix time): sessions first seen, lookups, calls by verdict,
    tools evicted (and not restored since)."""

    start: float
    sessions: int = 0
    lookups: int = 0
    allowed: int = 0
    warned: int = 0
    blocked: int = 0
    held: int = 0
    evicted: int = 0


@dataclass(frozen=True)
class SourceActivity:
    """One source's requests that named their sessions, over the last hour and day."""

    source: str
    calls_hour: int
    lookups_hour: int
    calls_day: int
    lookups_day: int


@dataclass(frozen=True)
class Activity:
    """What came in and what it changed, hour by hour, and the home's learning curve:
    when the first call was blocked, after how many sessions."""

    hours: tuple[HourActivity, ...]
    first_block: Decision | None
    sessions_before_first_block: int | None
    sources: tuple[SourceActivity, ...]
    refusals: tuple[Decision, ...]
    """The newest calls blocked or held, newest first."""
    dropped: int = 0
    """Decisions this process could not write (the state refused writes too long)."""


@dataclass(frozen=True)
class RuleSessions:
    """The sessions behind a rule and against it, by key (each a session's page).  A
    call condition keeps a few of the failing sessions it explains (``sample``) and
    counts, but does not keep, the successes that contradicted it."""

    supporting: tuple[str, ...]
    contradicting: tuple[str, ...]
    sample: bool = False
    """``supporting`` is a sample, not every session."""
