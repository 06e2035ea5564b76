"""What waits for a person: calls held for an operator's approval (``approvals``) and
agents' appeals against blocks (``appeals``).

An approval is bound to one call: the tool, the hash of its exact arguments and the
source that asked (:func:`call_key`).  ``pending -> approved | denied``; an approval
given once becomes ``used`` when the call it approved is forwarded, one given for a
time is ``expired`` after it.  An appeal is ``open`` until an operator closes it
(``upheld``: the block stays; ``granted``: the rule was lifted or the call approved)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from sidecar.storage.base import Connection, Database, MissingTable, Row

APPROVAL_STATUSES = ("pending", "approved", "denied", "used", "expired")
APPEAL_STATUSES = ("open", "upheld", "granted")


@dataclass(frozen=True)
class Approval:
    approval_id: str
    tool: str
    arguments: dict[str, Any]
    """The call's arguments as shown to the operator (redacted).  The approval is bound
    to the real ones by a hash kept in the state alone: a hash of arguments that hold a
    secret is not shown either."""
    source: str
    why: str
    status: str
    created_at: float
    decided_at: float | None = None
    decided_by: str | None = None
    until: float | None = None
    """An approval for a time: valid until then (``None``: for one call)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Appeal:
    appeal_id: str
    tool: str
    arguments: dict[str, Any]
    constraint_ids: tuple[str, ...]
    reason: str
    source: str
    status: str
    created_at: float
    decided_at: float | None = None
    decided_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["constraint_ids"] = list(self.constraint_ids)
        return out


def arguments_sha256(arguments: Mapping[str, Any]) -> str:
    """The hash an approval is bound to: the arguments' canonical JSON."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def call_key(tool: str, digest: str, source: str) -> str:
    return hashlib.sha256(f"{tool}\x1f{digest}\x1f{source}".encode()).hexdigest()


_APPROVAL_COLUMNS = (
    "approval_id, tool, arguments, source, why, status, created_at, decided_at, decided_by, until"
)
_APPEAL_COLUMNS = (
    "appeal_id, tool, arguments, constraint_ids, reason, source, status, created_at, "
    "decided_at, decided_by"
)


class ReviewRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS approvals (
    approval_id TEXT PRIMARY KEY, call_key TEXT NOT NULL, tool TEXT NOT NULL,
    arguments TEXT NOT NULL, arguments_sha256 TEXT NOT NULL, source TEXT NOT NULL,
    why TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL,
    decided_at REAL, decided_by TEXT, until REAL
);
CREATE INDEX IF NOT EXISTS approvals_by_call ON approvals (call_key, created_at);
CREATE TABLE IF NOT EXISTS appeals (
    appeal_id TEXT PRIMARY KEY, tool TEXT NOT NULL, arguments TEXT NOT NULL,
    constraint_ids TEXT NOT NULL, reason TEXT NOT NULL, source TEXT NOT NULL,
    status TEXT NOT NULL, created_at REAL NOT NULL, decided_at REAL, decided_by TEXT
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    # ---- approvals
    def latest(self, tx: Connection | None, key: str) -> Approval | None:
        """The newest approval of one call (:func:`call_key`), in ``tx`` or not."""
        sql = (
            f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE call_key=? "
            "ORDER BY created_at DESC LIMIT 1"
        )
        try:
            row = (tx or self._db).execute(sql, (key,)).fetchone()
        except MissingTable:  # a home written before approvals existed, read only
            return None
        return None if row is None else _approval(row)

    def pending_of(self, tx: Connection, source: str) -> int:
        return _count(tx, "approvals", source, "pending")

    def open_appeals_of(self, tx: Connection, source: str) -> int:
        return _count(tx, "appeals", source, "open")

    def insert_approval(self, tx: Connection, key: str, digest: str, approval: Approval) -> None:
        """``key``: the call's (:func:`call_key`); ``digest``: its arguments' hash."""
        tx.execute(
            "INSERT INTO approvals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                approval.approval_id, key, approval.tool, json.dumps(approval.arguments),
                digest, approval.source, approval.why, approval.status,
                approval.created_at, approval.decided_at, approval.decided_by, approval.until,
            ),
        )  # fmt: skip

    def set_approval(
        self,
        tx: Connection,
        approval_id: str,
        status: str,
        decided: tuple[float, str] | None = None,
        until: float | None = None,
    ) -> None:
        if decided is None:
            tx.execute("UPDATE approvals SET status=? WHERE approval_id=?", (status, approval_id))
            return
        tx.execute(
            "UPDATE approvals SET status=?, decided_at=?, decided_by=?, until=? "
            "WHERE approval_id=?",
            (status, decided[0], decided[1], until, approval_id),
        )

    def approval(self, approval_id: str, tx: Connection | None = None) -> Approval | None:
        row = (
            (tx or self._db)
            .execute(
                f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE approval_id=?", (approval_id,)
            )
            .fetchone()
        )
        return None if row is None else _approval(row)

    def approvals(self, status: str | None, limit: int) -> list[Approval]:
        rows = self._newest("approvals", _APPROVAL_COLUMNS, "approval_id", status, limit)
        return [_approval(r) for r in rows]

    def _newest(
        self, table: str, columns: str, key: str, status: str | None, limit: int
    ) -> list[Row]:
        """The newest rows of ``table`` (all, or those with ``status``)."""
        where, args = ("WHERE status=? ", [status]) if status else ("", [])
        try:
            return self._db.execute(
                f"SELECT {columns} FROM {table} {where}ORDER BY created_at DESC, {key} LIMIT ?",
                [*args, limit],
            ).fetchall()
        except MissingTable:  # a home written before the review desk existed, read only
            return []

    # ---- appeals
    def insert_appeal(self, tx: Connection, appeal: Appeal) -> None:
        tx.execute(
            "INSERT INTO appeals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                appeal.appeal_id, appeal.tool, json.dumps(appeal.arguments),
                json.dumps(list(appeal.constraint_ids)), appeal.reason, appeal.source,
                appeal.status, appeal.created_at, appeal.decided_at, appeal.decided_by,
            ),
        )  # fmt: skip

    def appeals(self, status: str | None, limit: int) -> list[Appeal]:
        rows = self._newest("appeals", _APPEAL_COLUMNS, "appeal_id", status, limit)
        return [_appeal(r) for r in rows]

    def close_appeal(self, tx: Connection, appeal_id: str, status: str, at: float, by: str) -> int:
        return tx.execute(
            "UPDATE appeals SET status=?, decided_at=?, decided_by=? "
            "WHERE appeal_id=? AND status='open'",
            (status, at, by, appeal_id),
        ).rowcount

    def appeal(self, appeal_id: str) -> Appeal | None:
        row = self._db.execute(
            f"SELECT {_APPEAL_COLUMNS} FROM appeals WHERE appeal_id=?", (appeal_id,)
        ).fetchone()
        return None if row is None else _appeal(row)


def _count(tx: Connection, table: str, source: str, status: str) -> int:
    """The rows of ``table`` (approvals or appeals) of ``source`` with ``status``."""
    row = tx.execute(
        f"SELECT COUNT(*) FROM {table} WHERE source=? AND status=?", (source, status)
    ).fetchone()
    return int(row[0])


def _approval(row: Row) -> Approval:
    return Approval(
        str(row[0]), str(row[1]), json.loads(row[2]), str(row[3]), str(row[4]), str(row[5]),
        float(row[6]),
        None if row[7] is None else float(row[7]), row[8],
        None if row[9] is None else float(row[9]),
    )  # fmt: skip


def _appeal(row: Row) -> Appeal:
    return Appeal(
        str(row[0]), str(row[1]), json.loads(row[2]), tuple(json.loads(row[3])), str(row[4]),
        str(row[5]), str(row[6]), float(row[7]),
        None if row[8] is None else float(row[8]), row[9],
    )  # fmt: skip
