"""Revisions: small counters every process reads to know whether its caches are stale,
and the state's key-value settings (``meta``).

- ``tools_rev`` moves before and after every write to the hot index, by any process;
  ``tools_writes`` remembers which process made each of the last revisions, so that a
  process can tell its own writes (its in-memory copies followed them) from others';
- ``constraints_rev`` moves whenever the fatal sequences in force may have changed;
- ``usage_rev`` moves whenever a completed run is counted.
"""

from __future__ import annotations

from typing import ClassVar

from sidecar.storage.base import Connection, Database

TOOLS_WRITES_KEPT = 4096
"""Hot-index revisions remembered with their writer; a process that fell further behind
treats the gap as another process's write."""


class RevisionRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tools_writes (rev INTEGER PRIMARY KEY, writer TEXT NOT NULL);
"""

    def __init__(self, db: Database, writer: str) -> None:
        self._db = db
        self.writer = writer
        """This process's name in ``tools_writes``."""
        self._cache: tuple[object, tuple[int, int]] | None = None

    # ---- settings ----------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, tx: Connection, key: str, value: str) -> None:
        tx.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def has_settings(self) -> bool:
        """Whether the database holds a sidecar state at all."""
        return self._db.has_table("meta")

    # ---- counters ----------------------------------------------------------------------
    @staticmethod
    def bump(tx: Connection, key: str) -> None:
        """Move a revision counter inside a transaction."""
        tx.execute(
            "INSERT INTO meta VALUES (?, '1') ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(meta.value AS INTEGER) + 1",
            (key,),
        )

    def counter(self, key: str) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def revisions(self) -> tuple[int, int]:
        """The constraints revision and the hot-index revision, in one read; kept while
        the database's change token says no process can have written since."""
        token = self._db.change_token()
        cached = self._cache
        if token is not None and cached is not None and cached[0] == token:
            return cached[1]
        rows = dict(
            self._db.execute(
                "SELECT key, value FROM meta WHERE key IN ('constraints_rev', 'tools_rev')"
            ).fetchall()
        )
        revisions = int(rows.get("constraints_rev", 0)), int(rows.get("tools_rev", 0))
        self._cache = (token, revisions)
        return revisions

    def bump_tools(self, tx: Connection) -> None:
        """Move the hot-index revision inside a transaction, recording that this process
        made it (see :meth:`written_elsewhere`)."""
        self.bump(tx, "tools_rev")
        (rev,) = tx.execute(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key='tools_rev'"
        ).fetchone()
        tx.execute(
            "INSERT INTO tools_writes VALUES (?, ?) "
            "ON CONFLICT(rev) DO UPDATE SET writer=excluded.writer",
            (rev, self.writer),
        )
        tx.execute("DELETE FROM tools_writes WHERE rev <= ?", (rev - TOOLS_WRITES_KEPT,))

    def written_elsewhere(self, since: int, now: int) -> bool:
        """Whether any hot-index revision in ``(since, now]`` was made by another
        process (or cannot be told: a read-only state, revisions no longer remembered)."""
        if not self._db.writable or since < 0:
            return True
        with self._db.reading():
            mine = self._db.execute(
                "SELECT count(*) FROM tools_writes WHERE rev > ? AND rev <= ? AND writer = ?",
                (since, now, self.writer),
            ).fetchone()[0]
        return int(mine) != now - since
