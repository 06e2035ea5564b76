"""The move journal: write-ahead intents for hot -> cold moves, and what they left.

A move goes ``intent -> archived -> mandated -> deleted -> done``:

====================  =========================================================
status                meaning (what is true once it is recorded)
====================  =========================================================
``intent``            the tool's full hot record is captured here; nothing moved
``archived``          the record is in the cold ``tools`` table
``mandated``          its credentials left the active set; mandates written
``deleted``           the tool is gone from the hot index (verified)
``done``              ``evicted_tools`` names its cold pointer
====================  =========================================================

Every step is idempotent (cold appends skip stored keys, mandates are keyed, Chroma
deletes are verified), so recovery simply replays the steps after a move's status.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar import revocation
from sidecar.model import CredentialRef
from sidecar.state import StateStore

STATUSES = ("intent", "archived", "mandated", "deleted", "done")

SCHEMA = """
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
"""


def move_id(tool_id: str, chain_ids: Iterable[str], generation: int) -> str:
    """Deterministic: the same decision on the same inputs names the same move."""
    payload = json.dumps([tool_id, sorted(chain_ids), generation], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def mandate_key(move: str, ref: str) -> str:
    return hashlib.sha256(f"{move}|{ref}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Move:
    move_id: str
    tool_id: str
    status: str
    snapshot: dict[str, Any]
    """The tool's hot record: ``document``, ``metadata``, ``credentials``, ``decision``."""
    chain_ids: tuple[str, ...]

    def credentials(self) -> list[CredentialRef]:
        return [
            CredentialRef(
                c["ref"],
                tuple(c.get("scopes", ())),
                c.get("provider"),
                c.get("revocation_endpoint"),
            )
            for c in self.snapshot.get("credentials", [])
        ]


@dataclass(frozen=True)
class EvictedTool:
    tool_id: str
    move_id: str
    pointer: str
    evicted_at: float


class Journal:
    def __init__(self, state: StateStore) -> None:
        self._state = state
        self._db = state.db

    # ---- moves --------------------------------------------------------------------
    def write_intents(
        self,
        moves: Sequence[Move],
        still: Callable[[Any, list[str]], set[str]] | None = None,
    ) -> list[Move]:
        """Record the moves' intents, in one transaction; ``still(db, tool_ids)``, read
        in that transaction, names the tools that may still move (usage that arrived
        since the decision keeps the others).  Returns the moves written."""
        now = time.time()
        with self._state.tx() as db:
            if still is not None:
                keep = still(db, [m.tool_id for m in moves])
                moves = [m for m in moves if m.tool_id in keep]
            # from here on lookups withhold the tools: they read the set by this revision
            self._state.bump_tools_in(db)
            db.executemany(
                "INSERT OR IGNORE INTO moves VALUES (?, ?, 'intent', ?, ?, ?, ?)",
                [
                    (
                        m.move_id,
                        m.tool_id,
                        json.dumps(m.snapshot),
                        json.dumps(m.chain_ids),
                        now,
                        now,
                    )
                    for m in moves
                ],
            )
        return list(moves)

    def advance(self, move_ids: Sequence[str], status: str) -> None:
        """Move forward to ``status`` (never backward)."""
        rank = STATUSES.index(status)
        lower = STATUSES[:rank]
        marks = ",".join("?" * len(lower))
        with self._state.tx() as db:
            db.executemany(
                f"UPDATE moves SET status=?, updated_at=? WHERE move_id=? AND status IN ({marks})",
                [(status, time.time(), mid, *lower) for mid in move_ids],
            )

    def unfinished(self) -> list[Move]:
        rows = self._db.execute(
            "SELECT move_id, tool_id, status, snapshot, chain_ids FROM moves "
            "WHERE status != 'done' ORDER BY created_at, move_id"
        ).fetchall()
        return [Move(m, t, s, json.loads(snap), tuple(json.loads(c))) for m, t, s, snap, c in rows]

    def snapshot(self, move: str) -> dict[str, Any] | None:
        """A move's intent: the tool's hot record as it was captured, and its chains."""
        row = self._db.execute(
            "SELECT snapshot, chain_ids, tool_id, status FROM moves WHERE move_id=?", (move,)
        ).fetchone()
        if row is None:
            return None
        return {
            "snapshot": json.loads(row[0]),
            "chain_ids": json.loads(row[1]),
            "tool_id": row[2],
            "status": row[3],
        }

    def latest_move(self, tool_id: str) -> str | None:
        """The move that last took ``tool_id`` out of the hot index (evicted now, or
        since restored)."""
        row = self._db.execute(
            # a tie needs the clock to step back between two moves of one tool
            "SELECT move_id FROM moves WHERE tool_id=? "
            "ORDER BY created_at DESC, updated_at DESC, move_id DESC LIMIT 1",
            (tool_id,),
        ).fetchone()
        return str(row[0]) if row else None

    def status(self, move: str) -> str | None:
        row = self._db.execute("SELECT status FROM moves WHERE move_id=?", (move,)).fetchone()
        return row[0] if row else None

    def in_flight_tools(self) -> set[str]:
        """Tools whose move has begun but not finished: never served by lookup."""
        return {r[0] for r in self._db.execute("SELECT tool_id FROM moves WHERE status != 'done'")}

    def release_credentials(self, moves: Sequence[Move], reason: str) -> int:
        """One transaction: drop the moving tools' credential references from the active
        set, and write one mandate for each reference no remaining active tool uses.
        The mandate names every evicted tool that held the reference (whichever batch
        moved it) and the chains behind them.  Returns how many mandates were new."""
        now = time.time()
        batch = {m.move_id for m in moves}
        with self._state.tx() as db:
            released: dict[str, CredentialRef] = {}
            for m in moves:
                for cred in m.credentials():
                    released.setdefault(cred.ref, cred)
                    db.execute(
                        "INSERT OR IGNORE INTO released_credentials VALUES (?, ?, ?)",
                        (cred.ref, m.move_id, m.tool_id),
                    )
            db.executemany(
                "DELETE FROM tool_credentials WHERE tool_id=?", [(m.tool_id,) for m in moves]
            )
            created = 0
            for ref, cred in sorted(released.items()):
                still_used = db.execute(
                    "SELECT 1 FROM tool_credentials WHERE ref=? LIMIT 1", (ref,)
                ).fetchone()
                if still_used:
                    continue
                owners = db.execute(
                    "SELECT r.move_id, r.tool_id, m.chain_ids FROM released_credentials r "
                    "JOIN moves m ON m.move_id = r.move_id WHERE r.ref=? AND "
                    "r.move_id IN (SELECT move_id FROM evicted_tools) ORDER BY r.move_id",
                    (ref,),
                ).fetchall()
                owners += [
                    (m.move_id, m.tool_id, json.dumps(list(m.chain_ids)))
                    for m in moves
                    if any(c.ref == ref for c in m.credentials())
                ]
                first = min(mid for mid, _t, _c in owners if mid in batch)
                created += revocation.insert_mandate(
                    db,
                    key=mandate_key(first, ref),
                    tool_ids=sorted({t for _m, t, _c in owners}),
                    move_id=first,
                    chain_ids=sorted({c for _m, _t, cs in owners for c in json.loads(cs)}),
                    credential=cred,
                    reason=reason,
                    now=now,
                )
            db.executemany(
                "UPDATE moves SET status='mandated', updated_at=? "
                "WHERE move_id=? AND status IN ('intent', 'archived')",
                [(now, m.move_id) for m in moves],
            )
        return created

    def finish(self, moves: Sequence[Move], pointers: dict[str, str]) -> None:
        now = time.time()
        with self._state.tx() as db:
            self._state.bump_tools_in(db)
            db.executemany(
                "INSERT INTO evicted_tools VALUES (?, ?, ?, ?) ON CONFLICT(tool_id) DO UPDATE "
                "SET move_id=excluded.move_id, pointer=excluded.pointer, "
                "evicted_at=excluded.evicted_at",
                [(m.tool_id, m.move_id, pointers[m.move_id], now) for m in moves],
            )
            db.executemany(
                "UPDATE moves SET status='done', updated_at=? WHERE move_id=?",
                [(now, m.move_id) for m in moves],
            )

    # ---- evicted tools and restores -------------------------------------------------
    def evicted(self) -> dict[str, EvictedTool]:
        rows = self._db.execute(
            "SELECT tool_id, move_id, pointer, evicted_at FROM evicted_tools"
        ).fetchall()
        return {r[0]: EvictedTool(*r) for r in rows}

    def generation(self, tool_id: str) -> int:
        row = self._db.execute(
            "SELECT COUNT(*) FROM restores WHERE tool_id=?", (tool_id,)
        ).fetchone()
        return int(row[0])

    def restored_at(self) -> dict[str, float]:
        return {
            t: float(at)
            for t, at in self._db.execute(
                "SELECT tool_id, MAX(restored_at) FROM restores GROUP BY tool_id"
            )
        }

    def record_restore(
        self,
        tool: EvictedTool,
        reason: str,
        lifted: Sequence[str],
        credentials: Sequence[CredentialRef],
    ) -> None:
        with self._state.tx() as db:
            self._state.bump_tools_in(db)
            db.execute("DELETE FROM evicted_tools WHERE tool_id=?", (tool.tool_id,))
            db.execute(
                "INSERT INTO restores VALUES (?, ?, ?, ?, ?)",
                (tool.tool_id, tool.move_id, reason, json.dumps(list(lifted)), time.time()),
            )
            db.execute("DELETE FROM tool_credentials WHERE tool_id=?", (tool.tool_id,))
            # the credentials are in use again: revoking them now would break the tool
            revocation.cancel_mandates(
                db, [c.ref for c in credentials], f"cancelled: {tool.tool_id} restored"
            )
            db.executemany(
                "INSERT INTO tool_credentials VALUES (?, ?, ?, ?, ?)",
                [
                    (
                        tool.tool_id,
                        c.ref,
                        json.dumps(list(c.scopes)),
                        c.provider,
                        c.revocation_endpoint,
                    )
                    for c in credentials
                ],
            )

    def restores(self, tool_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT move_id, reason, lifted, restored_at FROM restores WHERE tool_id=? "
            "ORDER BY restored_at",
            (tool_id,),
        ).fetchall()
        return [
            {"move_id": m, "reason": r, "lifted": json.loads(lifted), "restored_at": at}
            for m, r, lifted, at in rows
        ]
