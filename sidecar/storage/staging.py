"""Intake batches staged around their cold publication (``intake_staged``): the counters
of a batch whose chains are being published; whoever first sees the publication done
takes them, once."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from sidecar.storage.base import Connection, Database


@dataclass(frozen=True)
class StagedBatch:
    batch_id: str
    chain_ids: list[str]
    counters: str
    """The batch's counters, as the intake encoded them."""
    staged_at: float


class StagingRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS intake_staged (
    batch_id TEXT PRIMARY KEY, chain_ids TEXT NOT NULL, counters TEXT NOT NULL,
    staged_at REAL NOT NULL
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def stage(
        self, tx: Connection, batch_id: str, chain_ids: Sequence[str], counters: str, now: float
    ) -> None:
        tx.execute(
            "INSERT INTO intake_staged VALUES (?, ?, ?, ?)",
            (batch_id, json.dumps(list(chain_ids)), counters, now),
        )

    def staged(self) -> list[StagedBatch]:
        rows = self._db.execute(
            "SELECT batch_id, chain_ids, counters, staged_at FROM intake_staged ORDER BY staged_at"
        ).fetchall()
        return [StagedBatch(b, json.loads(c), n, float(at)) for b, c, n, at in rows]

    def take(self, tx: Connection, batch_id: str) -> str | None:
        """A staged batch's counters, removed: ``None`` when another process (or an
        earlier attempt) took them already."""
        row = tx.execute(
            "SELECT counters FROM intake_staged WHERE batch_id=?", (batch_id,)
        ).fetchone()
        if row is None:
            return None
        tx.execute("DELETE FROM intake_staged WHERE batch_id=?", (batch_id,))
        return str(row[0])

    def drop(self, tx: Connection, batch_id: str) -> None:
        """Forget a staged batch whose chains were never published (nothing counted)."""
        tx.execute("DELETE FROM intake_staged WHERE batch_id=?", (batch_id,))
