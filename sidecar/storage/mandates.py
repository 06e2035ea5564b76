"""The revocation ledger (``mandates``): one mandate per credential reference that an
eviction left unused, ``pending -> submitted -> revoked | failed | unsupported``, or
``cancelled`` when the credential is in use again."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sidecar.limits import MANDATE_STATUSES
from sidecar.model import CredentialRef
from sidecar.storage.base import Connection, Database


@dataclass(frozen=True)
class Mandate:
    idempotency_key: str
    tool_ids: tuple[str, ...]
    move_id: str
    chain_ids: tuple[str, ...]
    ref: str
    scopes: tuple[str, ...]
    provider: str | None
    revocation_endpoint: str | None
    status: str
    attempts: int
    last_error: str | None
    next_attempt_at: float | None
    reason: str
    created_at: float
    updated_at: float

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for key in ("tool_ids", "chain_ids", "scopes"):
            out[key] = list(out[key])
        return out


class MandateRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS mandates (
    idempotency_key TEXT PRIMARY KEY, tool_ids TEXT NOT NULL, move_id TEXT NOT NULL,
    chain_ids TEXT NOT NULL, ref TEXT NOT NULL, scopes TEXT NOT NULL, provider TEXT,
    revocation_endpoint TEXT, status TEXT NOT NULL, attempts INTEGER NOT NULL,
    last_error TEXT, next_attempt_at REAL, reason TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def insert(
        self,
        tx: Connection,
        *,
        key: str,
        tool_ids: Sequence[str],
        move_id: str,
        chain_ids: Sequence[str],
        credential: CredentialRef,
        reason: str,
        now: float,
    ) -> int:
        """Write one pending mandate, once per ``key`` (idempotent); returns 1 when new."""
        return tx.execute(
            "INSERT OR IGNORE INTO mandates VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, NULL, NULL, ?, ?, ?)",
            (
                key,
                json.dumps(list(tool_ids)),
                move_id,
                json.dumps(list(chain_ids)),
                credential.ref,
                json.dumps(list(credential.scopes)),
                credential.provider,
                credential.revocation_endpoint,
                reason,
                now,
                now,
            ),
        ).rowcount

    def cancel(self, tx: Connection, refs: Sequence[str], why: str, now: float) -> None:
        """Cancel the open mandates of credentials that are in use again."""
        tx.executemany(
            "UPDATE mandates SET status='cancelled', last_error=?, next_attempt_at=NULL, "
            "updated_at=? WHERE ref=? AND status IN ('pending', 'submitted')",
            [(why, now, ref) for ref in refs],
        )

    def cancel_keys(self, tx: Connection, keys: Sequence[str], why: str, now: float) -> int:
        """Cancel these open mandates; returns how many were open."""
        return sum(
            tx.execute(
                "UPDATE mandates SET status='cancelled', last_error=?, next_attempt_at=NULL, "
                "updated_at=? WHERE idempotency_key=? AND status IN ('pending', 'submitted')",
                (why, now, key),
            ).rowcount
            for key in keys
        )

    def mandates(self, status: str | None = None) -> list[Mandate]:
        sql = "SELECT * FROM mandates"
        args: tuple[Any, ...] = ()
        if status is not None:
            sql += " WHERE status=?"
            args = (status,)
        rows = self._db.execute(sql + " ORDER BY created_at, idempotency_key", args).fetchall()
        return [_mandate(r) for r in rows]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(MANDATE_STATUSES, 0)
        for status, n in self._db.execute("SELECT status, COUNT(*) FROM mandates GROUP BY status"):
            out[status] = n
        return out

    def due(self, now: float) -> list[Mandate]:
        rows = self._db.execute(
            "SELECT * FROM mandates WHERE status='pending' OR (status='submitted' AND "
            "(next_attempt_at IS NULL OR next_attempt_at <= ?)) ORDER BY created_at",
            (now,),
        ).fetchall()
        return [_mandate(r) for r in rows]

    def submit(self, tx: Connection, key: str, now: float) -> None:
        tx.execute(
            "UPDATE mandates SET status='submitted', attempts=attempts+1, updated_at=? "
            "WHERE idempotency_key=?",
            (now, key),
        )

    def settle(
        self,
        tx: Connection,
        key: str,
        status: str,
        detail: str | None,
        next_at: float | None,
        now: float,
    ) -> None:
        tx.execute(
            "UPDATE mandates SET status=?, last_error=?, next_attempt_at=?, updated_at=? "
            "WHERE idempotency_key=?",
            (status, detail, next_at, now, key),
        )


def _mandate(row: Sequence[Any]) -> Mandate:
    key, tools, move, chains, ref, scopes, provider, endpoint = row[:8]
    status, attempts, error, next_at, reason, created, updated = row[8:]
    return Mandate(
        key, tuple(json.loads(tools)), move, tuple(json.loads(chains)), ref,
        tuple(json.loads(scopes)), provider, endpoint, status, attempts, error, next_at,
        reason, created, updated,
    )  # fmt: skip
