"""The sidecar's own small state: what is neither a hot tool nor a cold record.

SQLite under the home (WAL, so readers never block the writer):

- ``tool_credentials``: credential references of active tools (kept out of Chroma);
- ``completed_chains`` / ``completed_tools``: usage evidence from completed chains;
- ``sightings``: how often an unknown-kind failure has been reported;
- ``constraints``: the compiled-form view of archived chains.  The cold archive is the
  truth; this table is rebuilt from it for any chain it misses (see
  :meth:`sidecar.app.Sidecar.reconcile`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from sidecar.model import ArchivedConstraint, Condition, CredentialRef

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_credentials (
    tool_id TEXT NOT NULL, ref TEXT NOT NULL, scopes TEXT NOT NULL,
    provider TEXT, revocation_endpoint TEXT,
    PRIMARY KEY (tool_id, ref)
);
CREATE TABLE IF NOT EXISTS completed_chains (
    chain_key TEXT PRIMARY KEY, topology TEXT NOT NULL, times INTEGER NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS completed_tools (
    tool_id TEXT PRIMARY KEY, chains INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sightings (
    sighting_key TEXT PRIMARY KEY, topology TEXT NOT NULL, signature TEXT NOT NULL,
    times INTEGER NOT NULL, first_seen REAL NOT NULL, last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS constraints (
    chain_id TEXT PRIMARY KEY, ord INTEGER NOT NULL UNIQUE, sequence TEXT NOT NULL,
    rule TEXT NOT NULL, signature TEXT NOT NULL, when_json TEXT NOT NULL,
    gapped INTEGER NOT NULL, pointer TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'active', archived_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS constraint_events (
    chain_id TEXT NOT NULL, action TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS moves (
    move_id TEXT PRIMARY KEY, tool_id TEXT NOT NULL, status TEXT NOT NULL,
    snapshot TEXT NOT NULL, chain_ids TEXT NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS moves_status ON moves(status);
CREATE TABLE IF NOT EXISTS evicted_tools (
    tool_id TEXT PRIMARY KEY, move_id TEXT NOT NULL, pointer TEXT NOT NULL,
    evicted_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS restores (
    tool_id TEXT NOT NULL, move_id TEXT NOT NULL, reason TEXT NOT NULL,
    lifted TEXT NOT NULL, restored_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS released_credentials (
    ref TEXT NOT NULL, move_id TEXT NOT NULL, tool_id TEXT NOT NULL,
    PRIMARY KEY (ref, move_id)
);
CREATE TABLE IF NOT EXISTS mandates (
    idempotency_key TEXT PRIMARY KEY, tool_ids TEXT NOT NULL, move_id TEXT NOT NULL,
    chain_ids TEXT NOT NULL, ref TEXT NOT NULL, scopes TEXT NOT NULL, provider TEXT,
    revocation_endpoint TEXT, status TEXT NOT NULL, attempts INTEGER NOT NULL,
    last_error TEXT, next_attempt_at REAL, reason TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL
);
"""


def topology_key(topology: Sequence[str], signature: str = "") -> str:
    payload = json.dumps([list(topology), signature], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


class StateStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._lock = threading.RLock()
        self._db.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a process crash loses nothing; only a power loss may drop the
        # last commits, which the journal's idempotent replays tolerate.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.executescript(_DDL)

    def close(self) -> None:
        self._db.close()

    @property
    def db(self) -> sqlite3.Connection:
        return self._db

    def tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """An immediate (write-locking) transaction."""
        return self._tx()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        # one connection serves every thread of a server: transactions take turns
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ---- credentials --------------------------------------------------------------
    def set_credentials(self, tool_id: str, creds: Sequence[CredentialRef]) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM tool_credentials WHERE tool_id=?", (tool_id,))
            db.executemany(
                "INSERT INTO tool_credentials VALUES (?, ?, ?, ?, ?)",
                [
                    (tool_id, c.ref, json.dumps(list(c.scopes)), c.provider, c.revocation_endpoint)
                    for c in creds
                ],
            )

    def credentials(self, tool_ids: Iterable[str]) -> dict[str, list[CredentialRef]]:
        out: dict[str, list[CredentialRef]] = {}
        for tool_id in dict.fromkeys(tool_ids):
            rows = self._db.execute(
                "SELECT ref, scopes, provider, revocation_endpoint FROM tool_credentials "
                "WHERE tool_id=? ORDER BY ref",
                (tool_id,),
            ).fetchall()
            out[tool_id] = [CredentialRef(r, tuple(json.loads(s)), p, e) for r, s, p, e in rows]
        return out

    # ---- usage evidence -----------------------------------------------------------
    def record_completed(self, topology: Sequence[str]) -> int:
        """Count one completed run of ``topology``; returns how many runs it now has."""
        key = topology_key(topology)
        now = time.time()
        with self._tx() as db:
            row = db.execute(
                "SELECT times FROM completed_chains WHERE chain_key=?", (key,)
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO completed_chains VALUES (?, ?, 1, ?, ?)",
                    (key, json.dumps(list(topology)), now, now),
                )
                for tool in set(topology):
                    db.execute(
                        "INSERT INTO completed_tools VALUES (?, 1) "
                        "ON CONFLICT(tool_id) DO UPDATE SET chains = chains + 1",
                        (tool,),
                    )
                return 1
            db.execute(
                "UPDATE completed_chains SET times = times + 1, last_seen=? WHERE chain_key=?",
                (now, key),
            )
            return int(row[0]) + 1

    def completed_chain_count(self, tool_id: str) -> int:
        """Distinct completed chains that used ``tool_id``."""
        row = self._db.execute(
            "SELECT chains FROM completed_tools WHERE tool_id=?", (tool_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    # ---- sightings of unknown-kind failures -----------------------------------------
    def sight(self, topology: Sequence[str], signature: str) -> int:
        key = topology_key(topology, signature)
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO sightings VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT(sighting_key) "
                "DO UPDATE SET times = times + 1, last_seen = excluded.last_seen",
                (key, json.dumps(list(topology)), signature, now, now),
            )
            return int(
                db.execute("SELECT times FROM sightings WHERE sighting_key=?", (key,)).fetchone()[0]
            )

    def sightings(self, topology: Sequence[str], signature: str) -> int:
        row = self._db.execute(
            "SELECT times FROM sightings WHERE sighting_key=?", (topology_key(topology, signature),)
        ).fetchone()
        return int(row[0]) if row else 0

    # ---- constraints --------------------------------------------------------------
    def add_constraints(
        self,
        items: Sequence[tuple[str, Sequence[str], str, str, Sequence[Condition], bool, str, float]],
    ) -> int:
        """Insert ``(chain_id, sequence, rule, signature, when, gapped, pointer,
        archived_at)`` items not present yet, in arrival order; returns how many."""
        added = 0
        with self._tx() as db:
            (next_ord,) = db.execute(
                "SELECT COALESCE(MAX(ord), -1) + 1 FROM constraints"
            ).fetchone()
            for chain_id, sequence, rule, signature, when, gapped, pointer, archived_at in items:
                if db.execute("SELECT 1 FROM constraints WHERE chain_id=?", (chain_id,)).fetchone():
                    continue
                db.execute(
                    "INSERT INTO constraints VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'active', ?)",
                    (
                        chain_id,
                        next_ord,
                        json.dumps(list(sequence)),
                        rule,
                        signature,
                        json.dumps([c.to_dict() for c in when]),
                        int(gapped),
                        pointer,
                        archived_at,
                    ),
                )
                next_ord += 1
                added += 1
            if added:
                self._bump_revision(db)
        return added

    def constraint_ids(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT chain_id FROM constraints")}

    def constraint_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM constraints").fetchone()[0])

    def active_constraints(self) -> list[ArchivedConstraint]:
        rows = self._db.execute(
            "SELECT chain_id, ord, sequence, rule, signature, when_json, gapped, pointer, "
            "archived_at FROM constraints WHERE status='active' ORDER BY ord"
        ).fetchall()
        return [
            ArchivedConstraint(
                chain_id=cid,
                sequence=tuple(json.loads(seq)),
                rule=rule,
                signature=sig,
                when=tuple(
                    Condition(field=w["field"], op=w["op"], value=w["value"], step=w["step"])
                    for w in json.loads(when)
                ),
                gapped=bool(gapped),
                pointer=pointer,
                order=ord_,
                archived_at=at,
            )
            for cid, ord_, seq, rule, sig, when, gapped, pointer, at in rows
        ]

    def constraint_rows(self, include_lifted: bool = False) -> list[dict[str, object]]:
        where = "" if include_lifted else "WHERE status='active'"
        rows = self._db.execute(
            f"SELECT chain_id, sequence, rule, signature, pointer, status, archived_at "
            f"FROM constraints {where} ORDER BY ord"
        ).fetchall()
        return [
            {
                "chain_id": cid,
                "sequence": json.loads(seq),
                "rule": rule,
                "expected_failure": sig,
                "pointer": pointer,
                "status": status,
                "archived_at": at,
            }
            for cid, seq, rule, sig, pointer, status, at in rows
        ]

    def set_constraint_status(self, chain_id: str, status: str, reason: str) -> bool:
        """Lift (``lifted``) or reinstate (``active``) a constraint; returns whether it
        existed.  Every change is kept in ``constraint_events``."""
        with self._tx() as db:
            found = db.execute(
                "UPDATE constraints SET status=? WHERE chain_id=?", (status, chain_id)
            ).rowcount
            if found:
                db.execute(
                    "INSERT INTO constraint_events VALUES (?, ?, ?, ?)",
                    (chain_id, status, reason, time.time()),
                )
                self._bump_revision(db)
            return bool(found)

    def revision(self) -> int:
        """Changes whenever the active constraints change."""
        return self.revisions()[0]

    def revisions(self) -> tuple[int, int]:
        """The constraints revision and the hot-index revision (bumped by every write
        to the hot index, from any process sharing this home), in one read."""
        rows = dict(
            self._db.execute(
                "SELECT key, value FROM meta WHERE key IN ('constraints_rev', 'tools_rev')"
            ).fetchall()
        )
        return int(rows.get("constraints_rev", 0)), int(rows.get("tools_rev", 0))

    def bump_tools_revision(self) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO meta VALUES ('tools_rev', '1') ON CONFLICT(key) "
                "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
            )

    @staticmethod
    def _bump_revision(db: sqlite3.Connection) -> None:
        db.execute(
            "INSERT INTO meta VALUES ('constraints_rev', '1') ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )
