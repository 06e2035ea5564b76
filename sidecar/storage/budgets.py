"""Evidence budgets: how many bytes of evidence each source has put into the state.

- ``evidence_bytes``: per source and day (UTC days since the epoch), the bytes its
  batches stored: the sessions the memory learned (as the evidence log keeps them),
  their steps, the archived calls' records, the usage rows and the counters' rows.
  Written in each intake batch's own transaction, so a batch that rolls back spends
  nothing; read as a sum per token before a batch is taken.

Forgetting a source deletes its rows (since a time: the rows of that time's day and
after, so a forget releases at least what it removed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from sidecar.storage.base import Connection, Database

DAY_S = 86_400


class BudgetRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS evidence_bytes (
    source TEXT NOT NULL, day INTEGER NOT NULL, bytes INTEGER NOT NULL,
    PRIMARY KEY (source, day)
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def spend(self, tx: Connection, source: str, n: int, now: float) -> None:
        """``source`` stored ``n`` more bytes of evidence at ``now``."""
        if n <= 0:
            return
        tx.execute(
            "INSERT INTO evidence_bytes VALUES (?, ?, ?) ON CONFLICT(source, day) "
            "DO UPDATE SET bytes = evidence_bytes.bytes + excluded.bytes",
            (source, int(now // DAY_S), n),
        )

    def spent(self, sources: Sequence[str]) -> int:
        """The bytes ``sources`` stored, together."""
        if not sources:
            return 0
        row = self._db.execute(
            "SELECT SUM(bytes) FROM evidence_bytes "
            f"WHERE source IN ({','.join('?' * len(sources))})",
            list(sources),
        ).fetchone()
        return int(row[0] or 0)

    def by_source(self) -> dict[str, int]:
        """Every source's bytes."""
        rows = self._db.execute(
            "SELECT source, SUM(bytes) FROM evidence_bytes GROUP BY source ORDER BY source"
        ).fetchall()
        return {str(source): int(n) for source, n in rows}

    def forget(self, tx: Connection, source: str, since: float | None) -> None:
        if since is None:
            tx.execute("DELETE FROM evidence_bytes WHERE source=?", (source,))
        else:
            tx.execute(
                "DELETE FROM evidence_bytes WHERE source=? AND day >= ?",
                (source, int(since // DAY_S)),
            )
