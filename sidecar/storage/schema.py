"""Schema versions: which migrations a state database has had.

Every module's tables are created with ``CREATE TABLE IF NOT EXISTS`` whenever a
database is opened for writing; a :class:`Migration` is the change that cannot be said
that way (a column, data moved between tables).  The ``schema_version`` table records
each migration applied.  :func:`prepare` runs them all in one write transaction, which
excludes every other writer of the state (SQLite's ``BEGIN IMMEDIATE``; on PostgreSQL
every concern's advisory transaction lock, as a write naming no concern takes), so
that processes opening one database at once apply each migration once.  A database
whose version is newer than the newest migration this code knows was written by a
newer sidecar: it is refused, for reading and for writing, before anything is written
(:class:`~sidecar.storage.base.SchemaTooNew`).

A process told not to migrate (``SIDECAR_MIGRATE=never``) asks :func:`pending` instead:
what the database lacks to be at this code's schema, with nothing written, so that the
one explicit step (``sidecar migrate``) is the only writer of the schema.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sidecar.storage.base import Database, SchemaTooNew, statements

_TABLE = re.compile(r"CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.IGNORECASE)

SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Database], None]
    """Runs inside the migrating transaction: the database's statements are its own."""


def version(db: Database) -> int:
    """The newest migration the database has had (0: none, or no version table yet)."""
    if not db.has_table("schema_version"):
        return 0
    row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def check(db: Database, migrations: Sequence[Migration]) -> int:
    """The database's version; :class:`SchemaTooNew` when this code is older than it."""
    known = latest(migrations)
    found = version(db)
    if found > known:
        raise SchemaTooNew(
            f"the state database {db.location} has schema version {found}, newer than the "
            f"{known} this sidecar knows: a newer sidecar wrote it; run that version (or "
            "newer) here.  Nothing was changed."
        )
    return found


def latest(migrations: Sequence[Migration]) -> int:
    return max((m.version for m in migrations), default=0)


def prepare(db: Database, ddl: Sequence[str], migrations: Sequence[Migration]) -> int:
    """Create every module's missing tables and apply the migrations the database
    lacks, in one write transaction; returns how many were applied."""
    return len(upgrade(db, ddl, migrations))


def upgrade(db: Database, ddl: Sequence[str], migrations: Sequence[Migration]) -> list[Migration]:
    """:func:`prepare`, returning the migrations it applied, oldest first."""
    check(db, migrations)
    with db.tx() as conn:
        for script in (SCHEMA, *ddl):
            for statement in statements(script):
                conn.execute(statement)
        # read again under the write lock: another process may have migrated meanwhile
        current = check(db, migrations)
        due = sorted((m for m in migrations if m.version > current), key=lambda m: m.version)
        for migration in due:
            migration.apply(db)
            conn.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?)",
                (migration.version, migration.description, time.time()),
            )
    return due


def created_tables(scripts: Iterable[str]) -> list[str]:
    """The tables a set of DDL scripts creates, in order."""
    return [name for ddl in scripts for name in _TABLE.findall(ddl)]


def pending(
    db: Database,
    ddl: Sequence[str],
    migrations: Sequence[Migration],
    own_tables: Sequence[str] = (),
) -> list[str]:
    """What the database lacks to be at this code's schema (empty: nothing), read
    without writing: tables none created yet (``own_tables``: the backend's own) and
    migrations not applied.  A database newer than this code is refused
    (:class:`SchemaTooNew`): waiting would never bring it back to this version."""
    check(db, migrations)
    missing = [t for t in (*created_tables((SCHEMA, *ddl)), *own_tables) if not db.has_table(t)]
    out = []
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        out.append(f"table(s) {', '.join(missing[:3])}{more} not created")
    current = version(db)
    behind = sorted(m.version for m in migrations if m.version > current)
    if behind:
        out.append(
            f"schema version {current}, {latest(migrations)} expected "
            f"(migration(s) {', '.join(map(str, behind))} not applied)"
        )
    return out
