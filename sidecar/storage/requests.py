"""Usage requests: the requests finished sessions brought to each tool (see
:mod:`indexes.usage`), kept so that every replica's lookups rebuild the same usage.

- ``usage_requests``: one row per tool, source and session: the request's vector
  (little-endian float32, base64), its key (the vector's hash), whether the session
  completed or was abandoned at the tool, when, and the ``requests_seq`` revision of the
  write that added it (a replica reads only the rows added since its last read).

A (tool, source, outcome) keeps the rows of its ``memory`` smallest request keys, the
same bottom-k sample the usage index keeps: the rows the index would never score are
deleted as they are pushed out, so disk stays bounded per tool and source whatever the
number of sessions.  Forgetting moves ``requests_generation``: replicas then read the
rows again from the start.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from sidecar.storage.base import Connection, Database
from sidecar.storage.filters import SessionFilter
from sidecar.storage.revisions import RevisionRepository

KEPT = 64
"""Requests kept per tool, source and outcome: :data:`indexes.usage.MEMORY` (a test holds
them equal; the storage layer does not import the index's package)."""
SEQ = "requests_seq"
GENERATION = "requests_generation"


@dataclass(frozen=True)
class RequestRow:
    """One tool of one finished session, as :meth:`indexes.usage.Evidence.row` gives it
    (the vector as float32 bytes)."""

    tool_id: str
    source: str
    session: str
    key: str
    vector: bytes
    outcome: str
    at: float

    def to_json(self) -> list[object]:
        vector = base64.b64encode(self.vector).decode()
        return [self.tool_id, self.source, self.session, self.key, vector, self.outcome, self.at]

    @classmethod
    def from_json(cls, row: Sequence[object]) -> RequestRow:
        tool, source, session, key, vector, outcome, at = row
        return cls(
            str(tool),
            str(source),
            str(session),
            str(key),
            base64.b64decode(str(vector)),
            str(outcome),
            float(at),  # type: ignore[arg-type]
        )

    def evidence_row(self) -> tuple[str, str, str, str, bytes, str, float]:
        return (
            self.tool_id,
            self.source,
            self.session,
            self.key,
            self.vector,
            self.outcome,
            self.at,
        )


class RequestRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS usage_requests (
    tool_id TEXT NOT NULL, source TEXT NOT NULL, session_key TEXT NOT NULL,
    request_key TEXT NOT NULL, vector TEXT NOT NULL, outcome TEXT NOT NULL,
    seen_at REAL NOT NULL, rev INTEGER NOT NULL,
    PRIMARY KEY (tool_id, source, session_key)
);
CREATE INDEX IF NOT EXISTS usage_requests_rev ON usage_requests (rev);
"""

    def __init__(self, db: Database, memory: int = KEPT) -> None:
        self._db = db
        self._memory = memory

    # ---- writes ------------------------------------------------------------------------
    def add(self, tx: Connection, rows: Sequence[RequestRow]) -> int:
        """Keep each row (a session already kept for a tool counts once); returns the
        rows added.  Each (tool, source, outcome) written keeps its ``memory`` smallest
        request keys."""
        if not rows:
            return 0
        RevisionRepository.bump(tx, SEQ)
        found = tx.execute("SELECT value FROM meta WHERE key=?", (SEQ,)).fetchone()
        rev = int(found[0])
        added = 0
        for r in rows:
            added += tx.execute(
                "INSERT OR IGNORE INTO usage_requests VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    r.tool_id,
                    r.source,
                    r.session,
                    r.key,
                    base64.b64encode(r.vector).decode(),
                    r.outcome,
                    r.at,
                    rev,
                ),
            ).rowcount
        for tool, source, outcome in sorted({(r.tool_id, r.source, r.outcome) for r in rows}):
            self._prune(tx, tool, source, outcome)
        return added

    def _prune(self, tx: Connection, tool: str, source: str, outcome: str) -> None:
        group = "tool_id=? AND source=? AND outcome=?"
        kept = tx.execute(
            f"SELECT DISTINCT request_key FROM usage_requests WHERE {group} "
            "ORDER BY request_key LIMIT ?",
            (tool, source, outcome, self._memory + 1),
        ).fetchall()
        if len(kept) <= self._memory:
            return
        tx.execute(
            f"DELETE FROM usage_requests WHERE {group} AND request_key >= ?",
            (tool, source, outcome, kept[-1][0]),
        )

    def forget(self, tx: Connection, which: SessionFilter) -> int:
        """Delete the rows of the sessions ``which`` names; returns how many."""
        where, args = which.where()
        gone = int(tx.execute(f"DELETE FROM usage_requests WHERE {where}", args).rowcount)
        if gone:
            RevisionRepository.bump(tx, GENERATION)
        return gone

    # ---- reads -------------------------------------------------------------------------
    def since(self, rev: int) -> tuple[list[RequestRow], int]:
        """The rows added by writes after revision ``rev`` (0: every row), in a fixed
        order, and the last revision read (``rev`` when there is none)."""
        rows = self._db.execute(
            "SELECT tool_id, source, session_key, request_key, vector, outcome, seen_at, rev "
            "FROM usage_requests WHERE rev > ? ORDER BY rev, tool_id, source, session_key",
            (rev,),
        ).fetchall()
        out = [
            RequestRow(tool, source, session, key, base64.b64decode(vector), outcome, float(at))
            for tool, source, session, key, vector, outcome, at, _rev in rows
        ]
        return out, max((int(r[-1]) for r in rows), default=rev)

    def count(self) -> int:
        row = self._db.execute("SELECT COUNT(*) FROM usage_requests").fetchone()
        return int(row[0])
