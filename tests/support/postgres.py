"""What a test reads of a PostgreSQL database directly."""

from __future__ import annotations

import psycopg


def tables_in(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
    return {r[0] for r in rows}
