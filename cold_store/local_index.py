"""The key index of a local Parquet table: one SQLite file per table,
``<name>.index.sqlite``, mapping each key to (file, row group, row), with each file's
row count, status (``ok`` or ``quarantined``) and fingerprint as published.

The Parquet files are the truth; this index is a cache that makes key lookups read one
row group of one file, rebuilt from the files for any file it does not know.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cold_store.publish import make_dirs

_INDEX_DDL = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    rows INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'ok',
    reason TEXT,
    indexed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS fingerprints (
    name TEXT PRIMARY KEY, size INTEGER NOT NULL, sha256 TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (id TEXT PRIMARY KEY, file TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS keys (
    key TEXT PRIMARY KEY,
    file TEXT NOT NULL,
    row_group INTEGER NOT NULL,
    row INTEGER NOT NULL
);
"""
_OK_KEYS = "FROM keys k JOIN files f ON f.name = k.file WHERE f.status='ok'"


def _read_only(path: Path, no_writer: Callable[[], bool] | None) -> sqlite3.Connection:
    """A read-only connection to an index.  A WAL database needs its ``-shm`` file,
    which a reader creates or maps; where that fails (a read-only mount, a full disk, a
    ``-shm`` a failed writer left torn) and ``no_writer()`` says no process writes the
    store, the file is read as immutable."""
    db = sqlite3.connect(
        f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
    )
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError:
        if no_writer is None or not no_writer():
            raise
        db.close()
        db = sqlite3.connect(
            f"file:{path}?mode=ro&immutable=1",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
    return db


class KeyIndex:
    """The index at ``path``; ``writable=False`` never writes (an index not created yet
    reads as empty)."""

    def __init__(
        self, path: Path, writable: bool, no_writer: Callable[[], bool] | None = None
    ) -> None:
        self.path = path
        # one connection may serve several threads: index writes take turns
        self.lock = threading.RLock()
        self._db = self._connect(writable, no_writer)

    def _connect(self, writable: bool, no_writer: Callable[[], bool] | None) -> sqlite3.Connection:
        if not writable and not self.path.exists():
            # nothing was ever archived here: an empty index, in memory
            db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            db.executescript(_INDEX_DDL)
            return db
        if not writable:
            db = _read_only(self.path, no_writer)
            db.execute("PRAGMA busy_timeout=10000")
            return db
        make_dirs(self.path.parent)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=10000")
        db.executescript(_INDEX_DDL)
        return db

    def close(self) -> None:
        self._db.close()

    # ---- writes -------------------------------------------------------------------
    def add_file(
        self,
        rel: str,
        keys: Sequence[str],
        positions: list[tuple[int, int]],
        size: int,
        digest: str,
        batches: Sequence[str] = (),
    ) -> None:
        """Index ``keys`` at ``positions`` (row group, row) of file ``rel``, with the
        file's size and checksum as published, and record ``batches`` as committed.  A
        key already indexed keeps its first copy, unless that copy was quarantined."""
        with self.lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT OR IGNORE INTO files(name, rows, indexed_at) VALUES (?, ?, ?)",
                    (rel, len(keys), time.time()),
                )
                self._db.execute(
                    "INSERT OR REPLACE INTO fingerprints VALUES (?, ?, ?)", (rel, size, digest)
                )
                self._db.executemany(
                    "INSERT INTO keys(key, file, row_group, row) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET file=excluded.file, "
                    "row_group=excluded.row_group, row=excluded.row "
                    "WHERE keys.file IN (SELECT name FROM files WHERE status='quarantined')",
                    [(k, rel, g, r) for k, (g, r) in zip(keys, positions, strict=True)],
                )
                self._db.executemany(
                    "INSERT OR IGNORE INTO batches(id, file) VALUES (?, ?)",
                    [(b, rel) for b in batches],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def mark_quarantined(self, rel: str, reason: str) -> None:
        with self.lock:
            self._db.execute(
                "INSERT INTO files(name, rows, status, reason, indexed_at) "
                "VALUES (?, 0, 'quarantined', ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET status='quarantined', reason=excluded.reason",
                (rel, reason, time.time()),
            )

    # ---- files --------------------------------------------------------------------
    def file_names(self) -> set[str]:
        return {row[0] for row in self._db.execute("SELECT name FROM files")}

    def ok_files(self) -> list[tuple[str, int]]:
        """(name, rows) of every file not quarantined, in publication order."""
        with self.lock:
            return [
                (str(name), int(rows))
                for name, rows in self._db.execute(
                    "SELECT name, rows FROM files WHERE status='ok' ORDER BY seq"
                )
            ]

    def fingerprints(self) -> list[tuple[str, int | None, str | None]]:
        """(name, size, sha256) of every file not quarantined, in publication order."""
        return [
            (str(n), s, d)
            for n, s, d in self._db.execute(
                "SELECT f.name, p.size, p.sha256 FROM files f LEFT JOIN fingerprints p "
                "ON p.name = f.name WHERE f.status='ok' ORDER BY f.seq"
            )
        ]

    def quarantined(self) -> list[tuple[str, str]]:
        return [
            (str(n), r or "")
            for n, r in self._db.execute(
                "SELECT name, reason FROM files WHERE status='quarantined' ORDER BY seq"
            )
        ]

    def committed(self, batches: Sequence[str]) -> set[str]:
        """Those of ``batches`` recorded by an append."""
        try:
            return {
                str(row[0])
                for row in self._db.execute(
                    f"SELECT id FROM batches WHERE id IN ({','.join('?' * len(batches))})",
                    list(batches),
                )
            }
        except sqlite3.OperationalError:  # an index written before batches were recorded
            return set()

    # ---- keys ---------------------------------------------------------------------
    def file_of(self, key: str) -> str | None:
        """The file not quarantined that holds ``key``."""
        hit = self._db.execute(f"SELECT k.file {_OK_KEYS} AND k.key=?", (key,)).fetchone()
        return None if hit is None else str(hit[0])

    def files_of(self, keys: Sequence[str]) -> list[tuple[str, str]]:
        """(key, file) of those of ``keys`` in files not quarantined (one read per 500
        keys)."""
        found: list[tuple[str, str]] = []
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            found.extend(
                self._db.execute(
                    f"SELECT k.key, k.file {_OK_KEYS} AND k.key IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            )
        return found

    def count(self) -> int:
        return int(self._db.execute(f"SELECT COUNT(*) {_OK_KEYS}").fetchone()[0])

    def count_by_file(self) -> list[tuple[str, int]]:
        return [
            (str(f), int(n))
            for f, n in self._db.execute(f"SELECT k.file, COUNT(*) {_OK_KEYS} GROUP BY k.file")
        ]

    def keys_in_order(self) -> list[tuple[str, str]]:
        """(key, file) of every key in a file not quarantined, in publication order."""
        return list(
            self._db.execute(f"SELECT k.key, k.file {_OK_KEYS} ORDER BY f.seq, k.row_group, k.row")
        )

    def lookup(self, key: str) -> tuple[str, int, int, str, str | None] | None:
        """(file, row group, row, file status, why quarantined) of ``key``."""
        hit = self._db.execute(
            "SELECT k.file, k.row_group, k.row, f.status, f.reason FROM keys k "
            "JOIN files f ON f.name = k.file WHERE k.key=?",
            (key,),
        ).fetchone()
        return None if hit is None else (str(hit[0]), int(hit[1]), int(hit[2]), hit[3], hit[4])
