"""``sidecar migrate --to-database URL``: a local home's state copied into PostgreSQL,
nothing lost (every table's count equal before and after), and the same answers from
a sidecar on the copy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.errors import EXIT_INVALID, EXIT_OK
from sidecar.home import SCHEMAS
from sidecar.model import CredentialRef, Tool
from sidecar.storage.copy import counts, tables_of
from sidecar.storage.postgres import PostgresDatabase
from sidecar.storage.sqlite import SqliteDatabase
from tests.sidecar.helpers import abandoned
from tests.sidecar.test_call_memory import lookup, teach

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
