"""The move journal: write-ahead intents for hot -> cold moves, and what they left.

- ``moves``: one row per move, ``intent -> archived -> mandated -> deleted -> done``,
  with the tool's whole hot record captured at the intent;
- ``evicted_tools``: the tools evicted now, with their move and cold pointer;
- ``restores``: every restore, with its reason and the chains it lifted;
- ``released_credentials``: which moves released which credential references (a
  mandate names every evicted tool that held its reference).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sidecar.model import CredentialRef
from sidecar.storage.base import Connection, Database

STATUSES = ("intent", "archived", "mandated", "deleted", "done")
CHUNK = 500
"""Ids per ``IN (...)`` list."""


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


class MoveRepository:
    SCHEMA: ClassVar[str] = """
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

    def __init__(self, db: Database) -> None:
        self._db = db

    # ---- moves -------------------------------------------------------------------------
    def evicted_since(self, since: float) -> list[float]:
        """When each tool evicted since ``since`` was (its ``evicted_tools`` row: a tool
        restored since is not counted)."""
        rows = self._db.execute(
            "SELECT evicted_at FROM evicted_tools WHERE evicted_at >= ?", (since,)
        ).fetchall()
        return [float(r[0]) for r in rows]

    def write_intents(self, tx: Connection, moves: Sequence[Move], now: float) -> None:
        tx.executemany(
            "INSERT OR IGNORE INTO moves VALUES (?, ?, 'intent', ?, ?, ?, ?)",
            [
                (m.move_id, m.tool_id, json.dumps(m.snapshot), json.dumps(m.chain_ids), now, now)
                for m in moves
            ],
        )

    def advance(self, tx: Connection, move_ids: Sequence[str], status: str, now: float) -> None:
        """Move forward to ``status`` (never backward)."""
        lower = STATUSES[: STATUSES.index(status)]
        marks = ",".join("?" * len(lower))
        tx.executemany(
            f"UPDATE moves SET status=?, updated_at=? WHERE move_id=? AND status IN ({marks})",
            [(status, now, mid, *lower) for mid in move_ids],
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

    def moves_of(self, tool_id: str) -> list[dict[str, Any]]:
        """Every move of ``tool_id``, newest first: its id, status, chains and when it
        began and last advanced."""
        rows = self._db.execute(
            "SELECT move_id, status, chain_ids, created_at, updated_at FROM moves "
            "WHERE tool_id=? ORDER BY created_at DESC, updated_at DESC, move_id DESC",
            (tool_id,),
        ).fetchall()
        return [
            {
                "move_id": m,
                "status": s,
                "chain_ids": json.loads(c),
                "created_at": float(at),
                "updated_at": float(up),
            }
            for m, s, c, at, up in rows
        ]

    def status(self, move: str) -> str | None:
        row = self._db.execute("SELECT status FROM moves WHERE move_id=?", (move,)).fetchone()
        return row[0] if row else None

    def statuses(self, db: Connection, moves: Sequence[str]) -> dict[str, str]:
        """The status of each of ``moves`` the journal holds, read on ``db`` (a
        transaction, or the database)."""
        out: dict[str, str] = {}
        for chunk in _chunks(moves):
            rows = db.execute(
                f"SELECT move_id, status FROM moves WHERE move_id IN ({_marks(chunk)})", chunk
            ).fetchall()
            out.update((m, s) for m, s in rows)
        return out

    def in_flight_tools(self) -> set[str]:
        """Tools whose move has begun but not finished: never served by lookup."""
        return {r[0] for r in self._db.execute("SELECT tool_id FROM moves WHERE status != 'done'")}

    def finish(
        self, tx: Connection, moves: Sequence[Move], pointers: dict[str, str], now: float
    ) -> None:
        tx.executemany(
            "INSERT INTO evicted_tools VALUES (?, ?, ?, ?) ON CONFLICT(tool_id) DO UPDATE "
            "SET move_id=excluded.move_id, pointer=excluded.pointer, "
            "evicted_at=excluded.evicted_at",
            [(m.tool_id, m.move_id, pointers[m.move_id], now) for m in moves],
        )
        tx.executemany(
            "UPDATE moves SET status='done', updated_at=? WHERE move_id=?",
            [(now, m.move_id) for m in moves],
        )

    # ---- credentials the moves released --------------------------------------------------
    def release(self, tx: Connection, released: Sequence[tuple[str, Move]]) -> None:
        """Record that each ``(ref, move)`` released ``ref`` (once)."""
        tx.executemany(
            "INSERT OR IGNORE INTO released_credentials VALUES (?, ?, ?)",
            [(ref, m.move_id, m.tool_id) for ref, m in released],
        )

    def holders(
        self, tx: Connection, refs: Sequence[str]
    ) -> dict[str, list[tuple[str, str, list[str]]]]:
        """For each of ``refs``: ``(move_id, tool_id, chain_ids)`` of every finished move
        whose tool held it."""
        out: dict[str, list[tuple[str, str, list[str]]]] = {r: [] for r in refs}
        for chunk in _chunks(refs):
            rows = tx.execute(
                "SELECT r.ref, r.move_id, r.tool_id, m.chain_ids FROM released_credentials r "
                f"JOIN moves m ON m.move_id = r.move_id WHERE r.ref IN ({_marks(chunk)}) AND "
                "r.move_id IN (SELECT move_id FROM evicted_tools) ORDER BY r.ref, r.move_id",
                chunk,
            ).fetchall()
            for ref, m, t, c in rows:
                out[ref].append((m, t, json.loads(c)))
        return out

    # ---- evicted tools and restores -------------------------------------------------------
    def evicted(self) -> dict[str, EvictedTool]:
        rows = self._db.execute(
            "SELECT tool_id, move_id, pointer, evicted_at FROM evicted_tools"
        ).fetchall()
        return {r[0]: EvictedTool(*r) for r in rows}

    def generation(self, tool_id: str) -> int:
        return self.generations([tool_id])[tool_id]

    def generations(self, tool_ids: Sequence[str]) -> dict[str, int]:
        """How many times each tool was restored (its moves' generation)."""
        out = dict.fromkeys(tool_ids, 0)
        for chunk in _chunks(list(out)):
            rows = self._db.execute(
                "SELECT tool_id, COUNT(*) FROM restores "
                f"WHERE tool_id IN ({_marks(chunk)}) GROUP BY tool_id",
                chunk,
            ).fetchall()
            out.update((t, int(n)) for t, n in rows)
        return out

    def restored_at(self) -> dict[str, float]:
        return {
            t: float(at)
            for t, at in self._db.execute(
                "SELECT tool_id, MAX(restored_at) FROM restores GROUP BY tool_id"
            )
        }

    def record_restore(
        self, tx: Connection, tool: EvictedTool, reason: str, lifted: Sequence[str], now: float
    ) -> None:
        tx.execute("DELETE FROM evicted_tools WHERE tool_id=?", (tool.tool_id,))
        tx.execute(
            "INSERT INTO restores VALUES (?, ?, ?, ?, ?)",
            (tool.tool_id, tool.move_id, reason, json.dumps(list(lifted)), now),
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


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    unique = list(dict.fromkeys(ids))
    return [unique[i : i + CHUNK] for i in range(0, len(unique), CHUNK)]


def _marks(chunk: Sequence[str]) -> str:
    return ",".join("?" * len(chunk))
