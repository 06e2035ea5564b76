"""Usage requests: the requests finished sessions brought to each tool (see
:mod:`indexes.usage`), kept so that every replica's lookups rebuild the same usage.

- ``usage_request_counts``: one row per tool, source, outcome and request: the request's
  vector (little-endian float32, base64), its key (the vector's hash), how many sessions
  brought it, the latest of them (its key, whose source a forget matches, and when it
  ended), and the ``requests_seq`` revision of the last write that changed the row (a
  replica reads only the rows changed since its last read, and adds what their counts
  grew by).

A (tool, source, outcome) keeps the rows of its ``memory`` smallest request keys: a row
pushed out is one no index can ever score, for the usage index keeps per (tool, outcome,
pool of sources) the smallest keys of the union, and the bottom-k of a union is the
bottom-k of its members' bottom-k.  The index's memory is shared by the sources of a pool;
the rows are kept per source so that a forget, which rebuilds the index from the rows
left, is exact: the requests of other sources that the forgotten one pushed out of the
index come back from their rows.  A request seen again grows its count, not the rows, so
disk stays bounded per tool and source whatever the number of sessions.  Each
session is counted once: the caller passes only the sessions whose success it counts
for the first time (a replay brings none).  Forgetting moves ``requests_generation``:
replicas then read the rows again from the start.  A forget since a time removes the
rows a session at or after it brought or brought again, with their earlier sessions.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, replace
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

    sessions: int = 1
    """The sessions that brought the request (1 for one session's row)."""

    @property
    def group(self) -> tuple[str, str, str, str]:
        """What a stored row is keyed by: the tool, the source, the outcome, the request."""
        return (self.tool_id, self.source, self.outcome, self.key)

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
CREATE TABLE IF NOT EXISTS usage_request_counts (
    tool_id TEXT NOT NULL, source TEXT NOT NULL, outcome TEXT NOT NULL,
    request_key TEXT NOT NULL, session_key TEXT NOT NULL, sessions INTEGER NOT NULL,
    vector TEXT NOT NULL, seen_at REAL NOT NULL, rev INTEGER NOT NULL,
    PRIMARY KEY (tool_id, source, outcome, request_key)
);
CREATE INDEX IF NOT EXISTS usage_request_counts_rev ON usage_request_counts (rev);
"""

    def __init__(self, db: Database, memory: int = KEPT) -> None:
        self._db = db
        self._memory = memory

    # ---- writes ------------------------------------------------------------------------
    def add(self, tx: Connection, rows: Sequence[RequestRow]) -> int:
        """Count each row's sessions for its request (one row per tool, source, outcome
        and request); returns the bytes the rows kept grew by (a request seen again
        grows a count, not the bytes).  Each (tool, source, outcome) written keeps its
        ``memory`` smallest request keys."""
        merged: dict[tuple[str, str, str, str], RequestRow] = {}
        for r in rows:
            found = merged.get(r.group)
            later = r if found is None or r.at >= found.at else found
            total = r.sessions + (found.sessions if found is not None else 0)
            merged[r.group] = replace(later, sessions=total)
        if not merged:
            return 0
        groups = sorted({g[:3] for g in merged})
        before = sum(self._kept(tx, *g) for g in groups)
        RevisionRepository.bump(tx, SEQ)
        found_rev = tx.execute("SELECT value FROM meta WHERE key=?", (SEQ,)).fetchone()
        rev = int(found_rev[0])
        for r in merged.values():
            tx.execute(
                "INSERT INTO usage_request_counts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(tool_id, source, outcome, request_key) DO UPDATE SET "
                "sessions = usage_request_counts.sessions + excluded.sessions, "
                "session_key = excluded.session_key, seen_at = excluded.seen_at, "
                "rev = excluded.rev",
                (
                    r.tool_id,
                    r.source,
                    r.outcome,
                    r.key,
                    r.session,
                    r.sessions,
                    base64.b64encode(r.vector).decode(),
                    r.at,
                    rev,
                ),
            )
        for tool, source, outcome in groups:
            self._prune(tx, tool, source, outcome)
        grown = sum(self._kept(tx, *g) for g in groups) - before
        return max(0, grown) * max(_row_bytes(r) for r in merged.values())

    @staticmethod
    def _kept(tx: Connection, tool: str, source: str, outcome: str) -> int:
        row = tx.execute(
            "SELECT COUNT(*) FROM usage_request_counts WHERE tool_id=? AND source=? AND outcome=?",
            (tool, source, outcome),
        ).fetchone()
        return int(row[0])

    def _prune(self, tx: Connection, tool: str, source: str, outcome: str) -> None:
        group = "tool_id=? AND source=? AND outcome=?"
        kept = tx.execute(
            f"SELECT request_key FROM usage_request_counts WHERE {group} "
            "ORDER BY request_key LIMIT ?",
            (tool, source, outcome, self._memory + 1),
        ).fetchall()
        if len(kept) <= self._memory:
            return
        tx.execute(
            f"DELETE FROM usage_request_counts WHERE {group} AND request_key >= ?",
            (tool, source, outcome, kept[-1][0]),
        )

    def forget(self, tx: Connection, which: SessionFilter) -> int:
        """Delete the rows of the sessions ``which`` names; returns how many."""
        where, args = which.where()
        gone = int(tx.execute(f"DELETE FROM usage_request_counts WHERE {where}", args).rowcount)
        if gone:
            RevisionRepository.bump(tx, GENERATION)
        return gone

    # ---- reads -------------------------------------------------------------------------
    def since(self, rev: int) -> tuple[list[RequestRow], int]:
        """The rows added or counted again by writes after revision ``rev`` (0: every
        row), with their whole counts, in a fixed order, and the last revision read
        (``rev`` when there is none)."""
        rows = self._db.execute(
            "SELECT tool_id, source, session_key, request_key, vector, outcome, seen_at, "
            "sessions, rev FROM usage_request_counts WHERE rev > ? "
            "ORDER BY rev, tool_id, source, outcome, request_key",
            (rev,),
        ).fetchall()
        out = [
            RequestRow(
                tool, source, session, key, base64.b64decode(vector), outcome, float(at), int(n)
            )
            for tool, source, session, key, vector, outcome, at, n, _rev in rows
        ]
        return out, max((int(r[-1]) for r in rows), default=rev)

    def tally(self, tool_id: str) -> list[tuple[str, str, int, int]]:
        """Per source and outcome of ``tool_id``'s kept rows: ``(source, outcome,
        sessions, requests)``, the sessions that brought the kept requests and how many
        requests are kept (sessions of requests pushed out of a full group are not
        counted any more), by source then outcome."""
        rows = self._db.execute(
            "SELECT source, outcome, SUM(sessions), COUNT(*) FROM usage_request_counts "
            "WHERE tool_id=? GROUP BY source, outcome ORDER BY source, outcome",
            (tool_id,),
        ).fetchall()
        return [(str(s), str(o), int(n), int(k)) for s, o, n, k in rows]

    def count(self) -> int:
        """The rows kept."""
        row = self._db.execute("SELECT COUNT(*) FROM usage_request_counts").fetchone()
        return int(row[0])


def _row_bytes(r: RequestRow) -> int:
    """About what one kept row costs: its columns (the vector in base64) and its keys'
    index entries."""
    keys = len(r.tool_id) + len(r.source) + len(r.outcome) + len(r.key)
    return (len(r.vector) + 2) // 3 * 4 + len(r.session) + 2 * keys + 48


def counted_requests(db: Database) -> None:
    """Migration 3: usage requests kept one row per session (``usage_requests``) become
    one row per request with the number of sessions that brought it."""
    if not db.has_table("usage_requests"):
        return
    db.execute(
        "INSERT INTO usage_request_counts "
        "SELECT tool_id, source, outcome, request_key, MAX(session_key), COUNT(*), "
        "MIN(vector), MAX(seen_at), MAX(rev) FROM usage_requests "
        "GROUP BY tool_id, source, outcome, request_key"
    )
    db.execute("DROP TABLE usage_requests")
