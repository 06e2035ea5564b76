"""The call memory in the state: the evidence log it is a fold of, a checkpoint of the
learner, and every condition it ever derived with its lifecycle.

- ``memory_log``: every session the memory learned from, as what the learner derived
  from it (never raw outputs), and every hand-written condition, with its source, its
  arrival time and its *sequence number*: the truth, folded in any order.  Sequence
  numbers are handed out under a lock on their counter that is held until the
  transaction commits, so rows become visible in sequence order: a reader that has
  folded every row up to ``n`` need only read the rows after ``n`` to be up to date;
- ``memory_checkpoint``: a checkpoint of the learner (a fold of the log up to a sequence
  number, within one *generation*: forgetting removes rows and starts a new one), so
  that a process starting up folds only what came after it;
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
from typing import Any, ClassVar, NamedTuple

from sidecar.storage.base import Connection, Database, MissingTable


class Known(NamedTuple):
    """A stored condition as the next derivation compares it."""

    support: int
    present: bool
    record: str
    contradictions: int


@dataclass(frozen=True)
class Derived:
    """A stored condition derived again, changed."""

    condition_id: str
    record: str
    support: int
    against: int
    pointer: str | None
    confirmed: bool


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
CREATE TABLE IF NOT EXISTS memory_checkpoint (
    id INTEGER PRIMARY KEY CHECK (id = 1), snapshot TEXT NOT NULL, seq INTEGER NOT NULL,
    generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS memory_log (
    seq INTEGER PRIMARY KEY, evidence_key TEXT NOT NULL UNIQUE, source TEXT NOT NULL,
    kind TEXT NOT NULL, received_at REAL NOT NULL, payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_log_source ON memory_log(source, received_at);
CREATE TABLE IF NOT EXISTS conditions (
    condition_id TEXT PRIMARY KEY, tool TEXT NOT NULL, signature TEXT NOT NULL,
    record TEXT NOT NULL, pointer TEXT, valid_from REAL NOT NULL, last_seen REAL NOT NULL,
    support INTEGER NOT NULL, contradictions INTEGER NOT NULL,
    lifted INTEGER NOT NULL DEFAULT 0, baseline INTEGER NOT NULL DEFAULT 0,
    present INTEGER NOT NULL DEFAULT 1, invalid_at REAL
);
CREATE INDEX IF NOT EXISTS conditions_tool ON conditions(tool);
CREATE TABLE IF NOT EXISTS learned_sessions (session_key TEXT PRIMARY KEY, at REAL NOT NULL);
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

    # ---- the checkpoint ----------------------------------------------------------------
    def checkpoint(self) -> tuple[str, int, int] | None:
        """The learner's checkpoint: its snapshot, the last sequence number it folded,
        and its generation."""
        try:
            row = self._db.execute(
                "SELECT snapshot, seq, generation FROM memory_checkpoint WHERE id=1"
            ).fetchone()
        except MissingTable:
            return None  # a home written before the log existed, opened read-only
        return (str(row[0]), int(row[1]), int(row[2])) if row else None

    def write_checkpoint(self, tx: Connection, snapshot: str, seq: int, generation: int) -> None:
        tx.execute(
            "INSERT INTO memory_checkpoint VALUES (1, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
            "SET snapshot=excluded.snapshot, seq=excluded.seq, generation=excluded.generation",
            (snapshot, seq, generation),
        )

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

    def fresh(self, tx: Connection, keys: Sequence[str]) -> set[str]:
        """The evidence keys the log does not hold yet."""
        held: set[str] = set()
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            held.update(
                r[0]
                for r in tx.execute(
                    "SELECT evidence_key FROM memory_log "
                    f"WHERE evidence_key IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            )
        return set(keys) - held

    def append(self, tx: Connection, rows: Sequence[tuple[str, str, str, str]], now: float) -> int:
        """Add ``(key, source, kind, payload)`` rows whose keys the log lacks (see
        :meth:`fresh`), numbered after every row before them; returns the sequence
        number of the last one.  The counter's row stays locked until the transaction
        commits, so no later row can become visible before these."""
        top = self._allocate(tx, len(rows))
        first = top - len(rows) + 1
        tx.executemany(
            "INSERT INTO memory_log VALUES (?, ?, ?, ?, ?, ?)",
            [(first + i, k, src, kind, now, p) for i, (k, src, kind, p) in enumerate(rows)],
        )
        return top

    @staticmethod
    def _allocate(tx: Connection, n: int) -> int:
        tx.execute(
            "INSERT INTO meta VALUES ('evidence_seq', ?) ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(meta.value AS INTEGER) + ?",
            (str(n), n),
        )
        (top,) = tx.execute(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key='evidence_seq'"
        ).fetchone()
        return int(top)

    def log_after(self, seq: int, conn: Connection | None = None) -> list[tuple[int, str, str]]:
        """``(seq, kind, payload)`` of the log's rows after ``seq``, in order."""
        db = conn or self._db
        try:
            rows = db.execute(
                "SELECT seq, kind, payload FROM memory_log WHERE seq > ? ORDER BY seq", (seq,)
            ).fetchall()
        except MissingTable:
            return self._legacy_log(db) if seq == 0 else []
        return [(int(n), k, p) for n, k, p in rows]

    @staticmethod
    def _legacy_log(db: Connection | Database) -> list[tuple[int, str, str]]:
        """A home written before the log was numbered, opened read-only: its evidence in
        key order (numbered as migration 2 would number it)."""
        try:
            rows = db.execute(
                "SELECT kind, payload FROM memory_evidence ORDER BY evidence_key"
            ).fetchall()
        except MissingTable:
            return []
        return [(i + 1, k, p) for i, (k, p) in enumerate(rows)]

    def marks(self, conn: Connection | None = None) -> tuple[int, int, int]:
        """The log's last sequence number, its generation and the conditions' revision,
        in one read."""
        try:
            rows = dict(
                (conn or self._db)
                .execute(
                    "SELECT key, value FROM meta WHERE key IN "
                    "('evidence_seq', 'evidence_generation', 'conditions_rev')"
                )
                .fetchall()
            )
        except MissingTable:
            return 0, 0, 0
        return (
            int(rows.get("evidence_seq", 0)),
            int(rows.get("evidence_generation", 0)),
            int(rows.get("conditions_rev", 0)),
        )

    def remove_source(
        self, tx: Connection, source: str, since: float | None
    ) -> list[tuple[str, str]]:
        """Delete a source's evidence (since ``since``); returns ``(kind, key)`` of each,
        and starts a new generation of the log when anything went."""
        where, args = "source=?", list[Any]([source])
        if since is not None:
            where += " AND received_at >= ?"
            args.append(since)
        rows = tx.execute(f"SELECT kind, evidence_key FROM memory_log WHERE {where}", args)
        found = [(k, key) for k, key in rows.fetchall()]
        if found:
            tx.execute(f"DELETE FROM memory_log WHERE {where}", args)
            tx.execute(
                "INSERT INTO meta VALUES ('evidence_generation', '1') ON CONFLICT(key) "
                "DO UPDATE SET value = CAST(meta.value AS INTEGER) + 1"
            )
        return found

    def unlearn(self, tx: Connection, sessions: Iterable[str]) -> None:
        """As if never reported: the same sessions sent again teach again."""
        for key in sessions:
            tx.execute("DELETE FROM learned_sessions WHERE session_key=?", (key,))
            tx.execute("DELETE FROM learned_steps WHERE session_key=?", (key,))

    def bump_conditions(self, tx: Connection) -> None:
        """The conditions' stored lifecycle changed: readers load it again."""
        tx.execute(
            "INSERT INTO meta VALUES ('conditions_rev', '1') ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(meta.value AS INTEGER) + 1"
        )

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

    def known(self, tx: Connection, tool: str) -> dict[str, Known]:
        """Per stored condition of ``tool``: its support, whether it is present, its
        record as last derived, and its contradictions."""
        return {
            cid: Known(int(support), bool(present), str(record), int(against))
            for cid, support, present, record, against in tx.execute(
                "SELECT condition_id, support, present, record, contradictions "
                "FROM conditions WHERE tool=?",
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
        self, tx: Connection, derived: Sequence[Derived], retire_after: int, now: float
    ) -> None:
        """Derived again: each one's record and counts; ``confirmed``: new support since
        (its pointer and last confirmation move); present again if it had left; retired
        when its contradictions since its baseline reach ``retire_after``."""
        if not derived:
            return
        tx.executemany(
            "UPDATE conditions SET record=?, support=?, contradictions=?, present=1, "
            "pointer=COALESCE(?, pointer), last_seen=CASE WHEN ? THEN ? ELSE last_seen "
            "END, invalid_at=CASE WHEN present=0 THEN NULL ELSE invalid_at END "
            "WHERE condition_id=?",
            [
                (d.record, d.support, d.against, d.pointer if d.confirmed else None,
                 d.confirmed, now, d.condition_id)
                for d in derived
            ],
        )  # fmt: skip
        tx.executemany(
            "UPDATE conditions SET invalid_at=? WHERE condition_id=? AND invalid_at IS NULL "
            "AND contradictions - baseline >= ?",
            [(now, d.condition_id, retire_after) for d in derived],
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


def numbered_log(db: Database) -> None:
    """Migration 2: the evidence log numbered (``memory_evidence`` becomes ``memory_log``,
    in key order), and the learner's old snapshot dropped (the log is folded again)."""
    if db.has_table("memory_evidence"):
        rows = db.execute(
            "SELECT evidence_key, source, kind, received_at, payload FROM memory_evidence "
            "ORDER BY evidence_key"
        ).fetchall()
        db.executemany(
            "INSERT INTO memory_log VALUES (?, ?, ?, ?, ?, ?)",
            [(i + 1, *row) for i, row in enumerate(rows)],
        )
        db.execute(
            "INSERT INTO meta VALUES ('evidence_seq', ?) ON CONFLICT(key) "
            "DO UPDATE SET value=excluded.value",
            (str(len(rows)),),
        )
        db.execute("DROP TABLE memory_evidence")
    if db.has_table("call_memory"):
        db.execute("DROP TABLE call_memory")
