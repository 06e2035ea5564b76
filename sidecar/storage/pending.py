"""Cold records acknowledged but not yet in the archive (``archive_pending``).

An intake batch that archives chains writes their cold records here, in the same
transaction that applies its counters and compiles its rules: once it commits, the
batch is durable and in force.  A publisher then appends what is pending to the cold
store (many batches, of any process, in one commit) and removes what it appended.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from sidecar.storage.base import Connection, Database

_DT = "$datetime"


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {_DT: value.isoformat()}
    raise TypeError(f"cannot keep {type(value).__name__} in a pending record")


def _decode(value: dict[str, Any]) -> Any:
    return datetime.fromisoformat(value[_DT]) if set(value) == {_DT} else value


class PendingRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS archive_pending (
    record_key TEXT PRIMARY KEY, cold_table TEXT NOT NULL, row TEXT NOT NULL,
    queued_at REAL NOT NULL
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def enqueue(
        self, tx: Connection, table: str, key: str, rows: Sequence[Mapping[str, Any]], now: float
    ) -> None:
        """Keep ``rows`` of cold table ``table`` (each keyed by its ``key`` column)."""
        tx.executemany(
            "INSERT OR IGNORE INTO archive_pending VALUES (?, ?, ?, ?)",
            [(str(r[key]), table, json.dumps(dict(r), default=_encode), now) for r in rows],
        )

    def oldest(self, limit: int) -> list[tuple[str, str, dict[str, Any]]]:
        """Up to ``limit`` pending records, oldest first: ``(key, table, row)``."""
        rows = self._db.execute(
            "SELECT record_key, cold_table, row FROM archive_pending "
            "ORDER BY queued_at, record_key LIMIT ?",
            (limit,),
        ).fetchall()
        return [(k, t, json.loads(r, object_hook=_decode)) for k, t, r in rows]

    def get(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT row FROM archive_pending WHERE record_key=?", (key,)
        ).fetchone()
        return json.loads(row[0], object_hook=_decode) if row else None

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every pending record of cold table ``table``."""
        rows = self._db.execute(
            "SELECT row FROM archive_pending WHERE cold_table=? ORDER BY record_key", (table,)
        ).fetchall()
        return [json.loads(r[0], object_hook=_decode) for r in rows]

    def done(self, tx: Connection, keys: Iterable[str]) -> None:
        tx.executemany("DELETE FROM archive_pending WHERE record_key=?", [(k,) for k in keys])

    def count(self, table: str | None = None) -> int:
        if table is None:
            return int(self._db.execute("SELECT COUNT(*) FROM archive_pending").fetchone()[0])
        sql = "SELECT COUNT(*) FROM archive_pending WHERE cold_table=?"
        return int(self._db.execute(sql, (table,)).fetchone()[0])
