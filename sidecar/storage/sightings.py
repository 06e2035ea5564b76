"""Sightings: the distinct sessions that met a failure, and the sessions behind each
archived chain.

- ``sighting_sessions``: per failure (topology and signature), the sessions that met
  it, so an unknown kind is archived once it is reproduced, a replayed report counts
  once, and N sessions count N;
- ``chain_sessions``: the distinct sessions behind each archived chain (eviction
  counts them; their sources are the chain's sources).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from sidecar.storage.base import Connection, Database
from sidecar.storage.credentials import CHUNK
from sidecar.storage.filters import SessionFilter
from sidecar.storage.uses import topology_key

Sighted = tuple[tuple[str, ...], str, str]
"""``(topology, signature, session_key)``: a session met a failure."""


@dataclass(frozen=True)
class ForgottenSightings:
    sessions: set[str]
    chains: set[str]
    """The chains some forgotten session stood behind."""


class SightingRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS sighting_sessions (
    sighting_key TEXT NOT NULL, session_key TEXT NOT NULL, topology TEXT NOT NULL,
    signature TEXT NOT NULL, seen_at REAL NOT NULL,
    PRIMARY KEY (sighting_key, session_key)
);
CREATE TABLE IF NOT EXISTS chain_sessions (
    chain_id TEXT NOT NULL, session_key TEXT NOT NULL, seen_at REAL NOT NULL,
    PRIMARY KEY (chain_id, session_key)
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    def record(
        self,
        tx: Connection,
        sighted: Iterable[Sighted],
        chain_sessions: Iterable[tuple[str, str]],
        now: float,
    ) -> None:
        tx.executemany(
            "INSERT OR IGNORE INTO sighting_sessions VALUES (?, ?, ?, ?, ?)",
            [
                (topology_key(t, sig), session, json.dumps(list(t)), sig, now)
                for t, sig, session in sighted
            ],
        )
        tx.executemany(
            "INSERT OR IGNORE INTO chain_sessions VALUES (?, ?, ?)",
            [(cid, session, now) for cid, session in chain_sessions],
        )

    def sessions_of(
        self, keys: Iterable[tuple[Sequence[str], str]]
    ) -> dict[tuple[tuple[str, ...], str], set[str]]:
        """The distinct sessions that met each failure, in one read."""
        by_key = {topology_key(t, s): (tuple(t), s) for t, s in keys}
        out: dict[tuple[tuple[str, ...], str], set[str]] = {k: set() for k in by_key.values()}
        wanted = list(by_key)
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            rows = self._db.execute(
                "SELECT sighting_key, session_key FROM sighting_sessions "
                f"WHERE sighting_key IN ({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            for key, session in rows:
                out[by_key[key]].add(session)
        return out

    def sessions(self, topology: Sequence[str], signature: str) -> set[str]:
        """The distinct sessions that met this failure."""
        rows = self._db.execute(
            "SELECT session_key FROM sighting_sessions WHERE sighting_key=?",
            (topology_key(topology, signature),),
        ).fetchall()
        return {r[0] for r in rows}

    def chain_sessions(self) -> dict[str, list[tuple[str, float]]]:
        """For each archived chain, each distinct session behind it and when it was seen."""
        out: dict[str, list[tuple[str, float]]] = {}
        for cid, session, at in self._db.execute(
            "SELECT chain_id, session_key, seen_at FROM chain_sessions ORDER BY chain_id, seen_at"
        ):
            out.setdefault(cid, []).append((session, float(at)))
        return out

    def sessions_behind(self, chain_id: str) -> list[str]:
        """The sessions that met one archived chain."""
        rows = self._db.execute(
            "SELECT session_key FROM chain_sessions WHERE chain_id=?", (chain_id,)
        ).fetchall()
        return [str(r[0]) for r in rows]

    def behind(self, tx: Connection, chain_ids: Iterable[str]) -> dict[str, list[str]]:
        """The sessions behind each chain."""
        out: dict[str, list[str]] = {}
        wanted = list(dict.fromkeys(chain_ids))
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            rows = tx.execute(
                "SELECT chain_id, session_key FROM chain_sessions "
                f"WHERE chain_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for cid, session in rows:
                out.setdefault(cid, []).append(session)
        return out

    def forget(self, tx: Connection, which: SessionFilter) -> ForgottenSightings:
        where, args = which.where()
        sessions = {
            r[0]
            for table in ("sighting_sessions", "chain_sessions")
            for r in tx.execute(f"SELECT session_key FROM {table} WHERE {where}", args)
        }
        chains = {
            r[0] for r in tx.execute(f"SELECT chain_id FROM chain_sessions WHERE {where}", args)
        }
        tx.execute(f"DELETE FROM sighting_sessions WHERE {where}", args)
        tx.execute(f"DELETE FROM chain_sessions WHERE {where}", args)
        return ForgottenSightings(sessions, chains)

    def supported(self, tx: Connection, chain_id: str) -> bool:
        """Whether any session still stands behind a chain."""
        row = tx.execute("SELECT 1 FROM chain_sessions WHERE chain_id=? LIMIT 1", (chain_id,))
        return row.fetchone() is not None


def sessions_from_counts(db: Database) -> None:
    """Migration 1: homes written before sightings counted sessions kept a bare count per
    failure; each counted report becomes one anonymous session, so nothing is lost."""
    if not db.has_table("sightings"):
        return
    rows = db.execute(
        "SELECT sighting_key, topology, signature, times, last_seen FROM sightings"
    ).fetchall()
    db.executemany(
        "INSERT OR IGNORE INTO sighting_sessions VALUES (?, ?, ?, ?, ?)",
        [
            (key, f"legacy:{i}", topology, signature, seen)
            for key, topology, signature, times, seen in rows
            for i in range(int(times))
        ],
    )
    db.execute("DROP TABLE sightings")
