"""The call memory in the state: the evidence log it is a fold of, the learner's snapshot,
and every condition it ever derived with its lifecycle.

- ``memory_evidence``: every session the memory learned from, as what the learner
  derived from it (never raw outputs), and every hand-written condition, with its source
  and arrival time: the truth, folded in any order;
- ``call_memory``: the learner's snapshot (a fold of the log) and its revision, which
  tells another process to reload it;
- ``learned_sessions`` / ``learned_steps``: which sessions were learned, and how many of
  their steps (a session sent again longer teaches its new steps only);
- ``conditions``: what derivation forgets: when each condition was first and last
  confirmed, operators' lifts and reinstatements, its last form once derivation no
  longer produces it;
- ``lifted_families``: lifts that cover a condition's family.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sidecar.storage.base import Connection, Database, MissingTable


@dataclass(frozen=True)
class StoredCondition:
    condition_id: str
    record: str
    """The condition's JSON form."""
    pointer: str | None
    valid_from: float
    last_seen: float
    contradictions: int
    lifted: bool
    baseline: int
    present: bool
    """Whether derivation still produces it."""
    invalid_at: float | None


class ConditionRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS call_memory (
    id INTEGER PRIMARY KEY CHECK (id = 1), snapshot TEXT NOT NULL, revision INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS conditions (
    condition_id TEXT PRIMARY KEY, tool TEXT NOT NULL, signature TEXT NOT NULL,
    record TEXT NOT NULL, pointer TEXT, valid_from REAL NOT NULL, last_seen REAL NOT NULL,
    support INTEGER NOT NULL, contradictions INTEGER NOT NULL,
    lifted INTEGER NOT NULL DEFAULT 0, baseline INTEGER NOT NULL DEFAULT 0,
    present INTEGER NOT NULL DEFAULT 1, invalid_at REAL
);
CREATE INDEX IF NOT EXISTS conditions_tool ON conditions(tool);
CREATE TABLE IF NOT EXISTS learned_sessions (session_key TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memory_evidence (
    evidence_key TEXT PRIMARY KEY, source TEXT NOT NULL, kind TEXT NOT NULL,
    received_at REAL NOT NULL, payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_evidence_source ON memory_evidence(source, received_at);
CREATE TABLE IF NOT EXISTS lifted_families (
    condition_id TEXT PRIMARY KEY, predicate_key TEXT NOT NULL, words TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS learned_steps (
    session_key TEXT PRIMARY KEY, steps INTEGER NOT NULL, digest TEXT NOT NULL
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    # ---- the snapshot ------------------------------------------------------------------
    def revision(self, conn: Connection | None = None) -> int:
        try:
            row = (conn or self._db).execute("SELECT revision FROM call_memory WHERE id=1")
            found = row.fetchone()
        except MissingTable:
            return 0  # a home written before this memory existed, opened read-only
        return int(found[0]) if found else 0

    def snapshot(self) -> str | None:
        row = self._db.execute("SELECT snapshot FROM call_memory WHERE id=1").fetchone()
        return str(row[0]) if row else None

    def write(self, tx: Connection, snapshot: str, revision: int) -> None:
        tx.execute(
            "INSERT INTO call_memory VALUES (1, ?, ?) ON CONFLICT(id) DO UPDATE "
            "SET snapshot=excluded.snapshot, revision=excluded.revision",
            (snapshot, revision),
        )

    def set_revision(self, tx: Connection, revision: int) -> None:
        tx.execute("UPDATE call_memory SET revision=? WHERE id=1", (revision,))

    def set_snapshot(self, tx: Connection, snapshot: str) -> None:
        tx.execute("UPDATE call_memory SET snapshot=? WHERE id=1", (snapshot,))

    # ---- the evidence log --------------------------------------------------------------
    def learn_from(
        self, tx: Connection, key: str, digests: Sequence[str], now: float
    ) -> int | None:
        """Where learning a session starts (``digests``: of each prefix of its steps, the
        empty one first): 0 for a session never learned; for one learned before and sent
        again longer with the same first steps, the number learned then; ``None`` when
        there is nothing new.  Records what is learned now."""
        steps = len(digests) - 1
        if tx.execute("INSERT OR IGNORE INTO learned_sessions VALUES (?, ?)", (key, now)).rowcount:
            tx.execute(
                "INSERT INTO learned_steps VALUES (?, ?, ?) ON CONFLICT(session_key) DO UPDATE "
                "SET steps=excluded.steps, digest=excluded.digest",
                (key, steps, digests[-1]),
            )
            return 0
        known = tx.execute(
            "SELECT steps, digest FROM learned_steps WHERE session_key=?", (key,)
        ).fetchone()
        if known is None or steps <= known[0] or digests[known[0]] != known[1]:
            return None
        tx.execute(
            "UPDATE learned_steps SET steps=?, digest=? WHERE session_key=?",
            (steps, digests[-1], key),
        )
        return int(known[0])

    def append(
        self, tx: Connection, key: str, source: str, kind: str, payload: str, now: float
    ) -> bool:
        """Add a piece of evidence once per key; returns whether it is new."""
        return bool(
            tx.execute(
                "INSERT INTO memory_evidence VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(evidence_key) DO NOTHING",
                (key, source, kind, now, payload),
            ).rowcount
        )

    def evidence(self, conn: Connection | None = None) -> list[tuple[str, str]]:
        """``(kind, payload)`` of the whole log, in key order."""
        try:
            rows = (
                (conn or self._db)
                .execute("SELECT kind, payload FROM memory_evidence ORDER BY evidence_key")
                .fetchall()
            )
        except MissingTable:
            return []  # a home written before the log existed, opened read-only
        return [(k, p) for k, p in rows]

    def remove_source(
        self, tx: Connection, source: str, since: float | None
    ) -> list[tuple[str, str]]:
        """Delete a source's evidence (since ``since``); returns ``(kind, key)`` of each."""
        where, args = "source=?", list[Any]([source])
        if since is not None:
            where += " AND received_at >= ?"
            args.append(since)
        rows = tx.execute(
            f"SELECT kind, evidence_key FROM memory_evidence WHERE {where}", args
        ).fetchall()
        tx.execute(f"DELETE FROM memory_evidence WHERE {where}", args)
        return [(k, key) for k, key in rows]

    def unlearn(self, tx: Connection, sessions: Iterable[str]) -> None:
        """As if never reported: the same sessions sent again teach again."""
        for key in sessions:
            tx.execute("DELETE FROM learned_sessions WHERE session_key=?", (key,))
            tx.execute("DELETE FROM learned_steps WHERE session_key=?", (key,))

    # ---- the conditions ------------------------------------------------------------------
    def rows(self) -> list[StoredCondition]:
        try:
            rows = self._db.execute(
                "SELECT condition_id, record, pointer, valid_from, last_seen, contradictions, "
                "lifted, baseline, present, invalid_at FROM conditions"
            ).fetchall()
        except MissingTable:
            return []  # a home written before this memory existed, opened read-only
        return [
            StoredCondition(c, r, p, v, s, int(n), bool(lf), int(b), bool(pr), inv)
            for c, r, p, v, s, n, lf, b, pr, inv in rows
        ]

    def known(self, tx: Connection, tool: str) -> dict[str, tuple[int, bool, str]]:
        """Per stored condition of ``tool``: its support, whether it is present, and its
        record as last derived."""
        return {
            cid: (int(support), bool(present), str(record))
            for cid, support, present, record in tx.execute(
                "SELECT condition_id, support, present, record FROM conditions WHERE tool=?",
                (tool,),
            )
        }

    def insert(
        self, tx: Connection, cid: str, tool: str, signature: str, record: str,
        pointer: str | None, now: float, support: int, against: int, lifted: bool,
    ) -> None:  # fmt: skip
        tx.execute(
            "INSERT INTO conditions(condition_id, tool, signature, record, pointer, "
            "valid_from, last_seen, support, contradictions, lifted) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (cid, tool, signature, record, pointer, now, now, support, against, int(lifted)),
        )

    def update(
        self, tx: Connection, cid: str, record: str, support: int, against: int,
        pointer: str | None, confirmed: bool, now: float,
    ) -> None:  # fmt: skip
        """Derived again: its record and counts; ``confirmed``: new support since (its
        pointer and last confirmation move); present again if it had left."""
        tx.execute(
            "UPDATE conditions SET record=?, support=?, contradictions=?, present=1, "
            "pointer=COALESCE(?, pointer), last_seen=CASE WHEN ? THEN ? ELSE last_seen "
            "END, invalid_at=CASE WHEN present=0 THEN NULL ELSE invalid_at END "
            "WHERE condition_id=?",
            (record, support, against, pointer if confirmed else None, confirmed, now, cid),
        )

    def retire_if_contradicted(
        self, tx: Connection, cid: str, retire_after: int, now: float
    ) -> None:
        tx.execute(
            "UPDATE conditions SET invalid_at=? WHERE condition_id=? AND invalid_at IS NULL "
            "AND contradictions - baseline >= ?",
            (now, cid, retire_after),
        )

    def mark_gone(self, tx: Connection, cids: Iterable[str], now: float) -> None:
        """Derivation no longer produces them: retired, their last form readable."""
        tx.executemany(
            "UPDATE conditions SET present=0, invalid_at=? WHERE condition_id=?",
            [(now, cid) for cid in cids],
        )

    def record(self, tx: Connection, cid: str) -> str | None:
        row = tx.execute("SELECT record FROM conditions WHERE condition_id=?", (cid,)).fetchone()
        return str(row[0]) if row else None

    def records_of(self, tx: Connection, tool: str) -> list[tuple[str, str]]:
        rows = tx.execute(
            "SELECT condition_id, record FROM conditions WHERE tool=?", (tool,)
        ).fetchall()
        return [(c, r) for c, r in rows]

    def set_lifted(self, tx: Connection, cids: Sequence[str]) -> None:
        tx.executemany("UPDATE conditions SET lifted=1 WHERE condition_id=?", [(c,) for c in cids])

    def reinstate(self, tx: Connection, cids: Sequence[str], cid: str, now: float) -> None:
        """Enforce again, counting only contradictions from now on; ``cid`` (the one an
        operator named) is present again whatever derivation says."""
        tx.executemany(
            "UPDATE conditions SET lifted=0, baseline=contradictions, invalid_at=NULL, "
            "last_seen=? WHERE condition_id=?",
            [(now, c) for c in cids],
        )
        tx.execute("UPDATE conditions SET present=1 WHERE condition_id=?", (cid,))

    def lifted_families(self, conn: Connection) -> list[tuple[str, str, frozenset[str]]]:
        """``(condition_id, predicate_key, words)`` of every lift that covers a family."""
        rows = conn.execute(
            "SELECT condition_id, predicate_key, words FROM lifted_families"
        ).fetchall()
        return [(c, k, frozenset(json.loads(w))) for c, k, w in rows]

    def lift_family(
        self, tx: Connection, cid: str, key: str, words: Iterable[str], now: float
    ) -> None:
        tx.execute(
            "INSERT INTO lifted_families VALUES (?, ?, ?, ?) ON CONFLICT(condition_id) DO NOTHING",
            (cid, key, json.dumps(sorted(words), separators=(",", ":")), now),
        )

    def unlift_family(self, tx: Connection, cid: str) -> None:
        tx.execute("DELETE FROM lifted_families WHERE condition_id=?", (cid,))
