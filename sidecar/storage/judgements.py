"""A person's judgement of a rule: ``judgements`` keeps, per rule id, the latest one
an operator gave that still stands.

- ``confirmed``: an operator vouches for the rule: it acts as a hand-written rule would
  (it blocks when it holds, and its text may be read by every agent);
- ``retired``: an operator retired it: it is not enforced, and is kept to be read and
  reinstated.

Lifting or reinstating a rule clears its judgement; every judgement is also written to
the rule's history (``constraint_events``) with who gave it and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

from sidecar.storage.base import Connection, Database, MissingTable

Verdict = Literal["confirmed", "retired"]
JUDGEMENTS: tuple[str, ...] = get_args(Verdict)


@dataclass(frozen=True)
class Judgement:
    rule_id: str
    judgement: str
    """``confirmed`` or ``retired``."""
    by: str
    reason: str
    at: float
    subject: str = ""
    """What was judged, for a rule whose content may change under one id (a call
    condition's predicate values grow with new evidence): a digest of it then.  A
    judgement whose subject is no longer the rule's does not hold; empty: always."""


class JudgementRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS judgements (
    rule_id TEXT PRIMARY KEY, judgement TEXT NOT NULL, by_whom TEXT NOT NULL,
    reason TEXT NOT NULL, at REAL NOT NULL, subject TEXT NOT NULL
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def all(self, conn: Connection | None = None) -> dict[str, Judgement]:
        """Every judgement that stands, by rule id (none in a state from before them)."""
        try:
            rows = (
                (conn or self._db)
                .execute("SELECT rule_id, judgement, by_whom, reason, at, subject FROM judgements")
                .fetchall()
            )
        except MissingTable:
            return {}
        return {
            str(r[0]): Judgement(str(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]), str(r[5]))
            for r in rows
        }

    def set(self, tx: Connection, judgement: Judgement) -> None:
        tx.execute("DELETE FROM judgements WHERE rule_id=?", (judgement.rule_id,))
        tx.execute(
            "INSERT INTO judgements VALUES (?, ?, ?, ?, ?, ?)",
            (
                judgement.rule_id,
                judgement.judgement,
                judgement.by,
                judgement.reason,
                judgement.at,
                judgement.subject,
            ),
        )

    def clear(self, tx: Connection, rule_ids: list[str]) -> None:
        tx.executemany("DELETE FROM judgements WHERE rule_id=?", [(r,) for r in rule_ids])
