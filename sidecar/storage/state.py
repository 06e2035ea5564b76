"""The state: every repository on one database.

Each repository owns its tables, its statements and its migrations; the rest of the
sidecar sees only their methods and the domain types they return.  A unit of work that
spans several repositories opens one write transaction (:meth:`State.tx`) and hands its
connection to each repository's writes, so that it commits, or rolls back, whole.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager

from sidecar.storage.base import Concern, Connection, Database, Lock
from sidecar.storage.budgets import BudgetRepository
from sidecar.storage.conditions import ConditionRepository, numbered_log
from sidecar.storage.credentials import CredentialRepository
from sidecar.storage.decisions import DecisionRepository
from sidecar.storage.judgements import JudgementRepository
from sidecar.storage.mandates import MandateRepository
from sidecar.storage.moves import MoveRepository
from sidecar.storage.pending import PendingRepository
from sidecar.storage.requests import RequestRepository, counted_requests
from sidecar.storage.review import ReviewRepository
from sidecar.storage.revisions import RevisionRepository
from sidecar.storage.schema import Migration
from sidecar.storage.sequences import SequenceRepository
from sidecar.storage.sessions import SessionReads
from sidecar.storage.sightings import SightingRepository, sessions_from_counts
from sidecar.storage.staging import StagingRepository
from sidecar.storage.tools import ToolRepository
from sidecar.storage.uses import UsesRepository

REPOSITORIES = (
    RevisionRepository,
    CredentialRepository,
    ToolRepository,
    UsesRepository,
    SightingRepository,
    SequenceRepository,
    StagingRepository,
    ConditionRepository,
    MoveRepository,
    MandateRepository,
    PendingRepository,
    RequestRepository,
    BudgetRepository,
    ReviewRepository,
    JudgementRepository,
    DecisionRepository,
)
SCHEMAS: tuple[str, ...] = tuple(r.SCHEMA for r in REPOSITORIES)
"""Every repository's tables, created when a state is opened for writing."""
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sightings count sessions, not reports", sessions_from_counts),
    Migration(2, "the call memory's evidence log numbered", numbered_log),
    Migration(3, "usage requests counted per request, not kept per session", counted_requests),
)
"""The schema's versions (see :mod:`sidecar.storage.schema`), oldest first."""


class State:
    """The repositories of one state database."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.revisions = RevisionRepository(db, uuid.uuid4().hex)
        self.credentials = CredentialRepository(db)
        self.tools = ToolRepository(db)
        self.uses = UsesRepository(db)
        self.sightings = SightingRepository(db)
        self.sequences = SequenceRepository(db)
        self.staging = StagingRepository(db)
        self.conditions = ConditionRepository(db)
        self.moves = MoveRepository(db)
        self.mandates = MandateRepository(db)
        self.pending = PendingRepository(db)
        self.requests = RequestRepository(db)
        self.budgets = BudgetRepository(db)
        self.review = ReviewRepository(db)
        self.judgements = JudgementRepository(db)
        self.decisions = DecisionRepository(db)
        self.sessions = SessionReads(db)

    @property
    def writable(self) -> bool:
        return self._db.writable

    @property
    def location(self) -> str:
        return self._db.location

    @property
    def dialect(self) -> str:
        return self._db.dialect

    @property
    def database(self) -> Database:
        """The database itself: for the storage layer's own work (copying a state,
        tests of the backends); the rest of the sidecar uses the repositories."""
        return self._db

    def tx(self, concern: Concern | None = None) -> AbstractContextManager[Connection]:
        """A write transaction that excludes every other writer of the state, or of
        ``concern`` only (:data:`~sidecar.storage.base.CONCERNS`)."""
        return self._db.tx(concern)

    def lock(self, name: str, purpose: str) -> Lock:
        """A lock for singleton work across every process of the state."""
        return self._db.advisory_lock(name, purpose)

    def change_token(self) -> object | None:
        return self._db.change_token()

    def close(self) -> None:
        self._db.close()
