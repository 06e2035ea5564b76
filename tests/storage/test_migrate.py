"""``sidecar migrate --to-database URL --to-cold URL``: a local home's state copied into
PostgreSQL and its archive into a Delta table, nothing lost (every table's count equal
before and after, the archive's digest too), and the same answers from a sidecar on the
copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.app.home import SCHEMAS, table_digest
from sidecar.errors import EXIT_INVALID, EXIT_NOT_FOUND, EXIT_OK
from sidecar.model import CredentialRef, Tool
from sidecar.storage.backends.postgres import PostgresDatabase
from sidecar.storage.backends.sqlite import SqliteDatabase
from sidecar.storage.copy import counts, tables_of
from tests.sidecar.helpers import abandoned
from tests.support.shop import lookup, teach

SCRIPT = str(Path(sys.executable).with_name("sidecar"))


def views(sc: Sidecar) -> dict[str, object]:
    steps = [lookup("#C3000", "pending")]
    return {
        "check_call": sc.check_call(steps, "exchange_items", {"order_id": "#C3000"}).decision,
        "check": sc.check(["search_api", "html_parser", "llm_extractor"]).safe,
        "constraints": sorted((v.chain_id, v.status, v.support) for v in sc.constraints()),
        "mandates": sorted((m.idempotency_key, m.status) for m in sc.mandates()),
        "tools": sorted(t.tool_id for t in sc.list_tools()),
        "digest": sc.digest().digest,
    }


def test_a_home_migrates_into_postgres_with_nothing_lost(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        secret = CredentialRef("env:CRM", ("crm.read",), "crm", None)
        sc.add_tools(
            [
                Tool("get_order", "look up an order"),
                Tool("exchange_items", "exchange delivered items"),
                Tool("search_api", "search", credentials=(secret,)),
                Tool("html_parser", "parse html"),
                Tool("llm_extractor", "extract"),
            ]
        )
        teach(sc)
        sc.report(abandoned(["search_api", "html_parser", "llm_extractor"], "HTTP 413"))
        sc.evict()
        before = views(sc)
    assert before["check_call"] == "block" and before["mandates"]
    tables = tables_of(SCHEMAS)
    local = SqliteDatabase(home / "state.sqlite", writable=False)
    source_counts = counts(local, tables)
    local.close()
    assert sum(source_counts.values()) > 20

    with postgres_server.schema() as url:
        env = {**os.environ, "SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing"}
        proc = subprocess.run(
            [SCRIPT, "migrate", "--to-database", url, "--json"],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert proc.returncode == EXIT_OK, proc.stderr
        shared = PostgresDatabase(url, writable=False)
        assert counts(shared, tables) == source_counts
        shared.close()
        with Sidecar.open(embedder=HashingEmbedder(), home=home, database_url=url) as sc:
            assert views(sc) == before
        # a second migration into the same database refuses: it is not empty
        again = subprocess.run(
            [SCRIPT, "migrate", "--to-database", url],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert again.returncode == EXIT_INVALID, again.stderr
        assert "not empty" in again.stderr


@pytest.mark.parametrize("url", ["mysql://x/y", ""])
def test_migrate_needs_a_postgresql_url(tmp_path: Path, url: str) -> None:
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [SCRIPT, "migrate", "--to-database", url], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == EXIT_INVALID, proc.stderr


def test_a_home_migrates_its_state_and_archive_with_nothing_lost(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """Both shared stores at once: the state into PostgreSQL, the Parquet archive into a
    Delta table; the archive's rows and digest are equal on both sides, and a sidecar on
    the shared stores answers as the local home did and reads the archived records."""
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        sc.add_tools([Tool(n, f"tool {n}") for n in ("search_api", "html_parser", "x")])
        chain = sc.report(abandoned(["search_api", "html_parser", "x"], "HTTP 413"))
        report = sc.evict()
        before = views_of_archive(sc, report.pointers)
        local_digests = {n: table_digest(sc.cold.table(n)) for n in ("chains", "tools")}
    assert report.evicted and local_digests["chains"][0] == 1
    cold_url = f"delta+file://{tmp_path / 'shared-cold'}"
    with postgres_server.schema() as url:
        env = {**os.environ, "SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing"}
        proc = subprocess.run(
            [SCRIPT, "migrate", "--to-database", url, "--to-cold", cold_url, "--json"],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert proc.returncode == EXIT_OK, proc.stderr
        copied = json.loads(proc.stdout)
        assert {n: (c["rows"], c["digest"]) for n, c in copied["cold"].items()} == local_digests
        # the local archive is gone from view: only the shared stores are opened
        shutil.rmtree(home / "cold")
        with Sidecar.open(
            embedder=HashingEmbedder(), home=home, database_url=url, cold_url=cold_url
        ) as sc:
            assert views_of_archive(sc, report.pointers) == before
            assert sc.audit(f"cold://chains/{chain.chain_id}")["chain_id"] == chain.chain_id
            shared = {n: table_digest(sc.cold.table(n)) for n in ("chains", "tools")}
        assert shared == local_digests
        again = subprocess.run(
            [SCRIPT, "migrate", "--to-cold", cold_url],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert again.returncode == EXIT_INVALID, again.stderr
        assert "already holds chains" in again.stderr


def views_of_archive(sc: Sidecar, pointers: dict[str, str]) -> dict[str, object]:
    return {
        "digest": sc.digest().digest,
        "tools": sorted(t.tool_id for t in sc.list_tools()),
        "audits": {tool: sc.audit(p)["tool_id"] for tool, p in sorted(pointers.items())},
    }


def test_migrate_needs_somewhere_to_go(tmp_path: Path) -> None:
    """The library's copy needs a target; the command with none is the schema step
    (``tests/storage/test_schema_step.py``), which makes no home where there is none."""
    from sidecar.app.home import migrate
    from sidecar.errors import InvalidInput
    from sidecar.settings import Settings

    with pytest.raises(InvalidInput, match="--to-database URL, --to-cold URL or both"):
        migrate(Settings(home=tmp_path / "home"))
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "home")}
    proc = subprocess.run([SCRIPT, "migrate"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == EXIT_NOT_FOUND, proc.stderr
    assert "no sidecar home at" in proc.stderr and not (tmp_path / "home").exists()
