"""The active tools' records (``hot_tools``: what a lookup shows and the text that was
embedded) and which catalog source brought each (``tool_sources``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import ClassVar

from indexes import IndexRecord
from sidecar.storage.base import Connection, Database
from sidecar.storage.credentials import CHUNK


class ToolRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS hot_tools (
    tool_id TEXT PRIMARY KEY, document TEXT NOT NULL, metadata TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tool_sources (
    tool_id TEXT PRIMARY KEY, source TEXT NOT NULL, gone_at REAL
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def put(self, tx: Connection, records: Sequence[IndexRecord]) -> None:
        now = time.time()
        tx.executemany(
            "INSERT INTO hot_tools VALUES (?, ?, ?, ?) ON CONFLICT(tool_id) DO UPDATE "
            "SET document=excluded.document, metadata=excluded.metadata, "
            "updated_at=excluded.updated_at",
            [(r.id, r.document, json.dumps(dict(r.metadata)), now) for r in records],
        )

    def remove(self, tx: Connection, ids: Iterable[str]) -> None:
        tx.executemany("DELETE FROM hot_tools WHERE tool_id=?", [(i,) for i in ids])

    def get(self, ids: Iterable[str]) -> dict[str, IndexRecord]:
        out: dict[str, IndexRecord] = {}
        wanted = list(dict.fromkeys(ids))
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            rows = self._db.execute(
                "SELECT tool_id, document, metadata FROM hot_tools "
                f"WHERE tool_id IN ({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            for tool_id, document, metadata in rows:
                out[tool_id] = IndexRecord(tool_id, document, json.loads(metadata))
        return out

    def present(self, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` are active tools."""
        out: set[str] = set()
        wanted = list(dict.fromkeys(ids))
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            rows = self._db.execute(
                f"SELECT tool_id FROM hot_tools WHERE tool_id IN ({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            out.update(r[0] for r in rows)
        return out

    def all(self) -> list[IndexRecord]:
        rows = self._db.execute(
            "SELECT tool_id, document, metadata FROM hot_tools ORDER BY tool_id"
        ).fetchall()
        return [IndexRecord(t, d, json.loads(m)) for t, d, m in rows]

    def page(self, after: str, limit: int) -> list[IndexRecord]:
        """Up to ``limit`` records in id order, those after ``after``."""
        rows = self._db.execute(
            "SELECT tool_id, document, metadata FROM hot_tools WHERE tool_id > ? "
            "ORDER BY tool_id LIMIT ?",
            (after, limit),
        ).fetchall()
        return [IndexRecord(t, d, json.loads(m)) for t, d, m in rows]

    def ids(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT tool_id FROM hot_tools")}

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM hot_tools").fetchone()[0])

    def of_source(self, source: str) -> set[str]:
        """The tools a catalog source brought that it has not dropped."""
        rows = self._db.execute(
            "SELECT tool_id FROM tool_sources WHERE source=? AND gone_at IS NULL", (source,)
        )
        return {r[0] for r in rows}

    def set_source(
        self, tx: Connection, source: str, present: Sequence[str], gone: Sequence[str]
    ) -> None:
        now = time.time()
        tx.executemany(
            "INSERT INTO tool_sources VALUES (?, ?, NULL) ON CONFLICT(tool_id) DO UPDATE "
            "SET source=excluded.source, gone_at=NULL",
            [(t, source) for t in present],
        )
        tx.executemany(
            "UPDATE tool_sources SET gone_at=? WHERE tool_id=? AND source=?",
            [(now, t, source) for t in gone],
        )
