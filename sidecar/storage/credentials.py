"""Credential references of the active tools (kept out of the hot index): key ids,
vault paths, OAuth clients and scopes; never secret values."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import ClassVar

from sidecar.model import CredentialRef
from sidecar.storage.base import Connection, Database

CHUNK = 500
"""Ids per ``IN (...)`` list."""


class CredentialRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS tool_credentials (
    tool_id TEXT NOT NULL, ref TEXT NOT NULL, scopes TEXT NOT NULL,
    provider TEXT, revocation_endpoint TEXT,
    PRIMARY KEY (tool_id, ref)
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def replace(self, tx: Connection, tool_id: str, creds: Sequence[CredentialRef]) -> None:
        """The tool's credential references are exactly ``creds`` from now on."""
        tx.execute("DELETE FROM tool_credentials WHERE tool_id=?", (tool_id,))
        tx.executemany(
            "INSERT INTO tool_credentials VALUES (?, ?, ?, ?, ?)",
            [
                (tool_id, c.ref, json.dumps(list(c.scopes)), c.provider, c.revocation_endpoint)
                for c in creds
            ],
        )

    def drop(self, tx: Connection, tool_ids: Iterable[str]) -> None:
        tx.executemany("DELETE FROM tool_credentials WHERE tool_id=?", [(t,) for t in tool_ids])

    def in_use(self, tx: Connection, ref: str) -> bool:
        """Whether an active tool still holds ``ref``."""
        row = tx.execute("SELECT 1 FROM tool_credentials WHERE ref=? LIMIT 1", (ref,))
        return row.fetchone() is not None

    def in_use_of(self, tx: Connection, refs: Iterable[str]) -> set[str]:
        """Which of ``refs`` an active tool still holds (one statement per
        :data:`CHUNK`)."""
        wanted = list(dict.fromkeys(refs))
        used: set[str] = set()
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            rows = tx.execute(
                "SELECT DISTINCT ref FROM tool_credentials "
                f"WHERE ref IN ({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            used.update(r[0] for r in rows)
        return used

    def held_beyond(self, refs: Iterable[str], tool_ids: Iterable[str]) -> set[str]:
        """Which of ``refs`` an active tool other than ``tool_ids`` holds (one statement
        per :data:`CHUNK`)."""
        wanted = list(dict.fromkeys(refs))
        leaving = set(tool_ids)
        held: set[str] = set()
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            rows = self._db.execute(
                "SELECT ref, tool_id FROM tool_credentials "
                f"WHERE ref IN ({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            held.update(ref for ref, tool_id in rows if tool_id not in leaving)
        return held

    def of(self, tool_ids: Iterable[str]) -> dict[str, list[CredentialRef]]:
        wanted = list(dict.fromkeys(tool_ids))
        out: dict[str, list[CredentialRef]] = {t: [] for t in wanted}
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            rows = self._db.execute(
                "SELECT tool_id, ref, scopes, provider, revocation_endpoint FROM tool_credentials "
                f"WHERE tool_id IN ({','.join('?' * len(chunk))}) ORDER BY tool_id, ref",
                chunk,
            ).fetchall()
            for tool_id, r, s, p, e in rows:
                out[tool_id].append(CredentialRef(r, tuple(json.loads(s)), p, e))
        return out
