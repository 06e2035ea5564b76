"""Moving a state between databases: every row of every table, checked by count.

Used by ``sidecar migrate --to-database URL`` (:func:`sidecar.app.home.migrate`) to
bring a local home's SQLite state into PostgreSQL.  Both databases hold the same
schema (each was prepared by the same code), so rows are copied column for column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sidecar.errors import InvalidInput
from sidecar.storage.base import Database, DatabaseError
from sidecar.storage.schema import created_tables

CHUNK = 1000
"""Rows written per statement batch."""
KEEP_OWN = frozenset({"schema_version"})
"""Tables the target writes for itself when it is prepared."""


def tables_of(scripts: Iterable[str]) -> list[str]:
    """The tables a set of DDL scripts creates, in order."""
    return [name for name in created_tables(scripts) if name not in KEEP_OWN]


def counts(db: Database, tables: Sequence[str]) -> dict[str, int]:
    return {t: int(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in tables}


def copy_state(source: Database, target: Database, tables: Sequence[str]) -> dict[str, int]:
    """Copy every row of ``tables`` from ``source`` into ``target`` in one write
    transaction of the target, which must hold none yet; returns the rows per table,
    equal in both (checked after the commit)."""
    before = counts(source, tables)
    with target.tx() as tx:
        held = {t: n for t, n in counts(target, tables).items() if n}
        if held:
            raise InvalidInput(
                f"the target state {target.location} is not empty "
                f"({', '.join(f'{t}: {n}' for t, n in sorted(held.items()))}); "
                "migrate into an empty database or schema"
            )
        for table in tables:
            rows = source.execute(f"SELECT * FROM {table}").fetchall()
            if not rows:
                continue
            marks = ",".join("?" * len(rows[0]))
            for start in range(0, len(rows), CHUNK):
                tx.executemany(f"INSERT INTO {table} VALUES ({marks})", rows[start : start + CHUNK])
    after = counts(target, tables)
    if after != before:
        diff = {t: (before[t], after[t]) for t in tables if before[t] != after[t]}
        raise DatabaseError(f"the copy does not match the source (source, target): {diff}")
    return after
