"""Reads across the session tables: the sessions the state learned from (the call
memory's, ``learned_sessions``, and those that met an archived chain, ``chain_sessions``),
a page at a time in session-key order.  The tables are their repositories' own
(:mod:`sidecar.storage.conditions`, :mod:`sidecar.storage.sightings`); this module only
reads them."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.storage.base import Database, Row

_KEYS = (
    "SELECT session_key, at FROM learned_sessions "
    "UNION ALL SELECT session_key, seen_at AS at FROM chain_sessions"
)


class SessionReads:
    def __init__(self, db: Database) -> None:
        self._db = db

    def page(
        self, after: str | None, limit: int
    ) -> list[tuple[str, float, int | None, tuple[str, ...]]]:
        """``(session_key, first seen, steps learned, archived chains it met)`` of at most
        ``limit`` sessions whose key sorts after ``after``, in key order."""
        rows = self._db.execute(
            f"SELECT k.session_key, MIN(k.at) FROM ({_KEYS}) k WHERE k.session_key > ? "
            "GROUP BY k.session_key ORDER BY k.session_key LIMIT ?",
            (after or "", limit),
        ).fetchall()
        return self._described(rows)

    def _described(
        self, rows: Sequence[Row]
    ) -> list[tuple[str, float, int | None, tuple[str, ...]]]:
        keys = tuple(str(r[0]) for r in rows)
        if not keys:
            return []
        marks = ",".join("?" * len(keys))
        steps = {
            str(k): int(n)
            for k, n in self._db.execute(
                f"SELECT session_key, steps FROM learned_steps WHERE session_key IN ({marks})",
                keys,
            ).fetchall()
        }
        chains: dict[str, list[str]] = {}
        for cid, key in self._db.execute(
            f"SELECT chain_id, session_key FROM chain_sessions WHERE session_key IN ({marks}) "
            "ORDER BY chain_id",
            keys,
        ).fetchall():
            chains.setdefault(str(key), []).append(str(cid))
        return [
            (str(key), float(at), steps.get(str(key)), tuple(chains.get(str(key), ())))
            for key, at in rows
        ]

    def count(self) -> int:
        row = self._db.execute(
            "SELECT COUNT(*) FROM (SELECT session_key FROM learned_sessions "
            "UNION SELECT session_key FROM chain_sessions) k"
        ).fetchone()
        return int(row[0]) if row else 0

    def first_seen_since(self, since: float) -> list[float]:
        """For each session seen at or after ``since``, its first sighting since then
        (the rows before ``since`` are not grouped: a window's count reads the window)."""
        rows = self._db.execute(
            "SELECT MIN(k.at) FROM (SELECT session_key, at FROM learned_sessions "
            "WHERE at >= ? UNION ALL SELECT session_key, seen_at AS at FROM chain_sessions "
            "WHERE seen_at >= ?) k GROUP BY k.session_key",
            (since, since),
        ).fetchall()
        return [float(r[0]) for r in rows]

    def count_before(self, at: float) -> int:
        """Sessions first seen before ``at``."""
        row = self._db.execute(
            f"SELECT COUNT(*) FROM (SELECT k.session_key FROM ({_KEYS}) k "
            "GROUP BY k.session_key HAVING MIN(k.at) < ?) b",
            (at,),
        ).fetchone()
        return int(row[0]) if row else 0

    def learned(self, session_key: str) -> tuple[float, int | None, tuple[str, ...]] | None:
        """One session as :meth:`page` shows it, without its key (``None``: not learned)."""
        rows = self._db.execute(
            f"SELECT k.session_key, MIN(k.at) FROM ({_KEYS}) k WHERE k.session_key = ? "
            "GROUP BY k.session_key",
            (session_key,),
        ).fetchall()
        found = self._described(rows)
        return found[0][1:] if found else None
