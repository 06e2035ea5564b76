"""``sidecar migrate`` with no target: the one explicit step that creates and upgrades the
state's schema, one run at a time; and ``SIDECAR_MIGRATE=never``, under which no other
process writes the schema (a replica's database role needs no right to create tables).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.app.home import SCHEMAS, migrate_schema, schema_pending
from sidecar.errors import (
    EXIT_BUSY,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    Busy,
    SchemaPending,
    StateUnavailable,
)
from sidecar.settings import Settings
from sidecar.storage.backends.postgres import PostgresDatabase
from sidecar.storage.schema import SCHEMA, created_tables, latest
from sidecar.storage.state import MIGRATIONS
from tests.sidecar.helpers import abandoned
from tests.support.postgres import tables_in

SCRIPT = str(Path(sys.executable).with_name("sidecar"))
TABLES = len(created_tables((SCHEMA, *SCHEMAS)))


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=300
    )


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> Iterator[str]:
    with postgres_server.schema() as url:
        yield url


def test_migrate_creates_then_upgrades_nothing_more(tmp_path: Path, pg_url: str) -> None:
    env = {"SIDECAR_HOME": str(tmp_path / "home"), "SIDECAR_DATABASE_URL": pg_url}
    first = run("migrate", "--json", env=env)
    assert first.returncode == EXIT_OK, first.stderr
    done = json.loads(first.stdout)
    assert done["version"] == latest(MIGRATIONS)
    # every repository's table, the version table and the backend's own (the leases)
    assert len(done["created"]) == TABLES + 2
    assert {"feed_leases", "feed_writes"} <= set(done["created"])
    assert [a.split(":")[0] for a in done["applied"]] == [str(m.version) for m in MIGRATIONS]
    assert set(done["created"]) <= tables_in(pg_url)
    again = run("migrate", env=env)
    assert again.returncode == EXIT_OK, again.stderr
    assert again.stdout.strip().endswith(
        f"at version {latest(MIGRATIONS)} ({done['location']}): nothing to do"
    )
    # the home folder of a shared state holds nothing of it: none was made
    assert not (tmp_path / "home").exists()


def test_a_second_migration_at_once_is_refused(tmp_path: Path, pg_url: str) -> None:
    settings = Settings(home=tmp_path / "home", database_url=pg_url)
    holder = PostgresDatabase(pg_url, writable=True, migrate=False)
    try:
        with holder.advisory_lock("migrate", "a schema migration"):
            with pytest.raises(Busy, match="schema migration"):
                migrate_schema(settings)
            refused = run("migrate", env={"SIDECAR_DATABASE_URL": pg_url})
            assert refused.returncode == EXIT_BUSY, refused.stderr
            assert tables_in(pg_url) == set()  # the refused run wrote nothing
        assert migrate_schema(settings).version == latest(MIGRATIONS)
    finally:
        holder.close()


def test_sqlite_migrations_take_turns_on_a_lock_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home):
        pass
    settings = Settings(home=home)
    from sidecar.app.lock import WriterLock

    lock = WriterLock(home / "migrate.lock", "a schema migration")
    lock.acquire()
    try:
        with pytest.raises(Busy):
            migrate_schema(settings)
    finally:
        lock.release()
    assert migrate_schema(settings).applied == ()  # its open had migrated it already


def test_never_opens_nothing_until_migrated_and_writes_no_ddl(
    tmp_path: Path, pg_url: str, postgres_server: PostgresServer
) -> None:
    """Under ``never`` a writable open of an empty database fails naming ``sidecar
    migrate`` and creates no table; after the step, a sidecar whose role may read and
    write rows but create nothing opens, reports, checks and looks up."""
    never = Settings(home=tmp_path / "home", database_url=pg_url, migrate="never")
    with pytest.raises(SchemaPending, match="sidecar migrate"):
        Sidecar(never, HashingEmbedder())
    assert tables_in(pg_url) == set()
    assert schema_pending(never)[0].startswith("table(s) schema_version, meta")
    proc = run("report", "-", env={"SIDECAR_DATABASE_URL": pg_url, "SIDECAR_MIGRATE": "never",
                                    "SIDECAR_HOME": str(tmp_path / "cli")})  # fmt: skip
    assert proc.returncode == EXIT_UNAVAILABLE and "sidecar migrate" in proc.stderr
    migrate_schema(never)
    assert schema_pending(never) == []
    schema = pg_url.rsplit("%3D", 1)[1]
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"
        )
    try:
        dml_only = pg_url.replace("postgres@", f"{role}@", 1)
        replica = never.with_(database_url=dml_only)
        tools = [Tool(n, f"tool {n}") for n in ("search_api", "html_parser", "llm_extractor")]
        with Sidecar(replica, HashingEmbedder()) as sc:
            sc.add_tools(tools)
            got = sc.report(abandoned([t.tool_id for t in tools], "HTTP 413", rule="R"))
            assert got.status == "archived"
            assert not sc.check([t.tool_id for t in tools]).safe
        # the same role, left to migrate at start as before, is refused at its first DDL
        # statement: the opens above ran none
        with pytest.raises(StateUnavailable, match="permission denied"):
            Sidecar(replica.with_(migrate="auto"), HashingEmbedder())
    finally:
        with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_pending_names_a_missing_table_and_an_unapplied_migration(
    tmp_path: Path, pg_url: str
) -> None:
    settings = Settings(home=tmp_path / "home", database_url=pg_url, migrate="never")
    migrate_schema(settings)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE mandates")
        conn.execute("DELETE FROM schema_version WHERE version = %s", (latest(MIGRATIONS),))
    missing = schema_pending(settings)
    assert missing[0] == "table(s) mandates not created"
    assert missing[1].startswith(f"schema version {latest(MIGRATIONS) - 1}, {latest(MIGRATIONS)}")
    with pytest.raises(SchemaPending, match="mandates"):
        Sidecar(settings, HashingEmbedder())
    done = migrate_schema(settings)
    assert done.created == ("mandates",) and len(done.applied) == 1
    assert schema_pending(settings) == []
