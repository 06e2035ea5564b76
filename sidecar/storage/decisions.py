"""What the sidecar decided, call by call: ``decisions`` keeps, newest last, each call a
session named (its verdict, the rules behind it, its redacted arguments) and each lookup
it named (the tools offered), so that a person can read afterwards why a call was
refused and what an agent was shown.  The table is bounded: past its size the oldest
rows go (:meth:`DecisionRepository.prune`).  ``hour`` is the row's hour (``at // 3600``),
kept so that counts per hour are one ``GROUP BY`` on every backend."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sidecar.storage.base import Connection, Database, MissingTable, Row

HOUR_S = 3600


@dataclass(frozen=True)
class Decision:
    decision_id: str
    at: float
    kind: str
    """``call`` (a call's verdict) or ``lookup`` (the tools a lookup offered)."""
    source: str
    session_key: str | None
    """The session as the sidecar learns it (``src:<source>/session:<id>``)."""
    tool: str
    """The call's tool (a lookup: its query, redacted and shortened)."""
    decision: str
    """A call's: ``allow``, ``warn``, ``block``, ``held`` (for a person's approval) or
    ``sampled`` (a block forwarded once to test whether it still holds); a lookup's:
    ``offered``."""
    arguments: dict[str, Any] = field(default_factory=dict)
    reasons: tuple[dict[str, str], ...] = ()
    """Each rule that held: ``rule_id``, ``level``, ``explanation``, ``evidence``."""
    offered: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["reasons"], out["offered"] = list(self.reasons), list(self.offered)
        return out


_COLUMNS = (
    "decision_id, at, hour, kind, source, session_key, tool, decision, arguments, reasons, offered"
)


class DecisionRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS decisions (
    decision_id TEXT PRIMARY KEY, at REAL NOT NULL, hour INTEGER NOT NULL,
    kind TEXT NOT NULL, source TEXT NOT NULL, session_key TEXT, tool TEXT NOT NULL,
    decision TEXT NOT NULL, arguments TEXT NOT NULL, reasons TEXT NOT NULL,
    offered TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_by_session ON decisions (session_key, at);
CREATE INDEX IF NOT EXISTS decisions_by_time ON decisions (at);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def insert(self, tx: Connection, rows: Sequence[Decision]) -> None:
        tx.executemany(
            f"INSERT INTO decisions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (decision_id) DO NOTHING",  # a batch written again after a commit
            [
                (
                    d.decision_id, d.at, int(d.at // HOUR_S), d.kind, d.source, d.session_key,
                    d.tool, d.decision, json.dumps(d.arguments, default=str),
                    json.dumps(list(d.reasons)), json.dumps(list(d.offered)),
                )
                for d in rows
            ],
        )  # fmt: skip

    def prune(self, tx: Connection, keep: int) -> None:
        """Keep the newest ``keep`` rows."""
        row = tx.execute(
            "SELECT at FROM decisions ORDER BY at DESC LIMIT 1 OFFSET ?", (keep,)
        ).fetchone()
        if row is not None:
            tx.execute("DELETE FROM decisions WHERE at <= ?", (float(row[0]),))

    def of_session(self, session_key: str, limit: int) -> list[Decision]:
        """A session's newest ``limit`` decisions, oldest first."""
        rows = self._select("WHERE session_key = ? ORDER BY at DESC LIMIT ?", (session_key, limit))
        return rows[::-1]

    def recent(self, decisions: Sequence[str], limit: int) -> list[Decision]:
        """The newest calls decided one of ``decisions``, newest first."""
        marks = ",".join("?" * len(decisions))
        return self._select(
            f"WHERE kind = 'call' AND decision IN ({marks}) ORDER BY at DESC LIMIT ?",
            (*decisions, limit),
        )

    def first(self, decision: str) -> Decision | None:
        found = self._select("WHERE decision = ? ORDER BY at LIMIT 1", (decision,))
        return found[0] if found else None

    def per_hour(self, since_hour: int) -> list[tuple[int, str, str, int]]:
        """``(hour, kind, decision, count)`` from ``since_hour`` on."""
        try:
            rows = self._db.execute(
                "SELECT hour, kind, decision, COUNT(*) FROM decisions WHERE at >= ? "
                "GROUP BY hour, kind, decision",
                (float(since_hour * HOUR_S),),  # by time: the index the rows are kept in
            ).fetchall()
        except MissingTable:
            return []
        return [(int(h), str(k), str(d), int(n)) for h, k, d, n in rows]

    def per_source(self, since: float) -> list[tuple[str, str, int]]:
        """``(source, kind, count)`` of the rows since ``since``."""
        try:
            rows = self._db.execute(
                "SELECT source, kind, COUNT(*) FROM decisions WHERE at >= ? GROUP BY source, kind",
                (since,),
            ).fetchall()
        except MissingTable:
            return []
        return [(str(s), str(k), int(n)) for s, k, n in rows]

    def _select(self, where: str, args: Sequence[Any]) -> list[Decision]:
        try:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM decisions {where}", args).fetchall()
        except MissingTable:  # a home written before decisions were kept, read only
            return []
        return [_decision(r) for r in rows]


def _decision(row: Row) -> Decision:
    return Decision(
        decision_id=str(row[0]),
        at=float(row[1]),
        kind=str(row[3]),
        source=str(row[4]),
        session_key=None if row[5] is None else str(row[5]),
        tool=str(row[6]),
        decision=str(row[7]),
        arguments=json.loads(row[8]),
        reasons=tuple(json.loads(row[9])),
        offered=tuple(json.loads(row[10])),
    )
