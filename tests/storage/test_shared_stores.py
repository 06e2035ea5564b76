"""The shared deployment's settings: ``SIDECAR_COLD_URL`` (with the AWS variables) puts
the archive in a Delta table, and what cannot be shared safely is refused at start with
exit code 14."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.app.home import s3_options
from sidecar.errors import (
    EXIT_INVALID,
    EXIT_UNSAFE,
    Busy,
    ConfigError,
    InvalidInput,
    UnsafeStorage,
)
from sidecar.settings import Settings
from sidecar.storage.backends.postgres import PostgresDatabase
from tests.cold_store.backends import ACCESS, REGION, FakeStore, S3Server
from tests.sidecar.helpers import abandoned

SCRIPT = str(Path(sys.executable).with_name("sidecar"))


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.close()


def aws_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": ACCESS["aws_secret_access_key"],
    }


def test_s3_options_come_from_the_standard_aws_variables() -> None:
    opts = s3_options(
        {
            "AWS_ENDPOINT_URL": "http://general:1",
            "AWS_ENDPOINT_URL_S3": "http://s3-only:2",
            "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_ACCESS_KEY_ID": "id",
            "AWS_SECRET_ACCESS_KEY": "secret",
        }
    )
    assert opts.endpoint_url == "http://s3-only:2"  # the service's own endpoint wins
    assert (opts.region, opts.access_key_id, opts.secret_access_key) == (
        "eu-west-1",
        "id",
        "secret",
    )
    assert opts.session_token is None
    plain = s3_options({})
    assert plain.endpoint_url is None and plain.region == "us-east-1"


@pytest.mark.parametrize("url", ["ftp://bucket/x", "s3://", "delta+file://host/x"])
def test_a_cold_url_of_no_known_store_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="cold_url"):
        Settings.load({"SIDECAR_COLD_URL": url})


@pytest.mark.integration
def test_the_archive_lives_on_s3_and_another_process_reads_it(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_server.new_bucket()
    for name, value in aws_env(s3_server.endpoint).items():
        monkeypatch.setenv(name, value)
    cold = f"s3://{bucket}/archive"
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "one", cold_url=cold, evict_min_chains=1
    ) as one:
        one.add_tools([Tool(n, f"tool {n}") for n in ("fetch", "parse", "write")])
        chain = one.report(abandoned(["fetch", "parse", "write"], "HTTP 400"))
        evicted = one.evict()
        assert evicted.evicted
        assert not (tmp_path / "one" / "cold").exists()  # nothing kept on local disk
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert any(k.startswith("archive/chains/_delta_log/") for k in keys), keys
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "one", cold_url=cold, read_only=True
    ) as reader:
        assert reader.audit(f"cold://chains/{chain.chain_id}")["chain_id"] == chain.chain_id
        for tool, pointer in evicted.pointers.items():
            assert reader.audit(pointer)["tool_id"] == tool


@pytest.mark.integration
@pytest.mark.parametrize("put_status", [200, 501])
def test_an_object_store_without_conditional_writes_is_refused_at_start(
    tmp_path: Path, put_status: int
) -> None:
    """200: the store ignores ``If-None-Match`` (two writers would both commit one Delta
    version); 501: it does not implement it.  Either way the server refuses to start."""
    fake = FakeStore(put_status)
    try:
        env = {
            **os.environ,
            **aws_env(fake.endpoint),
            "SIDECAR_HOME": str(tmp_path / "home"),
            "SIDECAR_EMBEDDER": "hashing",
            "SIDECAR_COLD_URL": "s3://bucket/cold",
        }
        proc = subprocess.run(
            [SCRIPT, "serve", "--port", "0"], capture_output=True, text=True, env=env, timeout=120
        )
    finally:
        fake.close()
    assert proc.returncode == EXIT_UNSAFE, proc.stderr
    assert "refusing the cold store s3://bucket/cold" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_cold_url_is_a_usage_error_on_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path), "SIDECAR_COLD_URL": "gopher://x"}
    proc = subprocess.run(
        [SCRIPT, "archive", "status"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == EXIT_INVALID, proc.stderr
    assert "cold_url" in proc.stderr


def test_a_pooler_that_moves_sessions_is_refused(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PgBouncer in transaction mode hands each statement to whichever server session is
    free: the state's advisory locks would stop excluding anyone.  Seen from the client,
    the backend's pid changes between statements."""
    pids = iter(range(100, 200))
    real = PostgresDatabase._one

    def moving(self: PostgresDatabase, conn: object, sql: str, params: object = ()) -> object:
        if sql == "SELECT pg_backend_pid()":
            return (next(pids),)
        return real(self, conn, sql, params)  # type: ignore[arg-type]

    with postgres_server.schema() as url:
        monkeypatch.setattr(PostgresDatabase, "_one", moving)
        with pytest.raises(UnsafeStorage, match="PgBouncer"):
            PostgresDatabase(url, writable=True)
        assert UnsafeStorage.exit_code == EXIT_UNSAFE


def test_the_archive_is_maintained_by_one_process_at_a_time(
    tmp_path: Path, state_url: str | None
) -> None:
    cold = f"delta+file://{tmp_path / 'cold'}"
    settings = {"home": tmp_path / "home", "cold_url": cold, "database_url": state_url}
    with Sidecar.open(embedder=HashingEmbedder(), **settings) as sc:
        sc.add_tools([Tool(n, f"tool {n}") for n in ("fetch", "parse", "write")])
        for i in range(4):  # one commit, one data file each
            sc.report(abandoned(["fetch", "parse", "write"], f"HTTP 40{i}", session_id=f"s{i}"))
            # the group publisher may gather reports in one commit: publish each alone
            sc.publisher.publish()
        before = sc.digest().digest
        with (
            sc.state.lock("archive", "archive maintenance"),
            pytest.raises(Busy, match="archive maintenance"),
        ):
            sc.maintain_archive()
        with pytest.raises(InvalidInput, match="at least 1"):
            sc.maintain_archive(retention_hours=0.5)
        done = sc.maintain_archive()
        compacted = {s.table: s for s in done.steps if s.step == "compact"}
        assert compacted["chains"].files_added == 1 and compacted["chains"].files_removed == 4
        assert done.retention_hours == 168 and done.backend == "delta"
        # the files compacted away are younger than the retention: vacuum keeps them
        assert all(s.files_removed == 0 for s in done.steps if s.step == "vacuum")
        assert sc.digest().digest == before
        assert sc.cold.chains.count() == 4


def test_a_parquet_archive_has_nothing_to_maintain(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        done = sc.maintain_archive()
    assert done.backend == "parquet"
    assert all(s.files_added == s.files_removed == 0 for s in done.steps)


def test_revisions_are_read_every_time_unless_a_cache_is_asked_for(
    postgres_server: PostgresServer,
) -> None:
    with postgres_server.schema() as url:
        db = PostgresDatabase(url)
        try:
            assert db.change_token() is None
        finally:
            db.close()


BUMP = (
    "INSERT INTO meta VALUES ('constraints_rev', '1') ON CONFLICT (key) "
    "DO UPDATE SET value = CAST(meta.value AS INTEGER) + 1"
)


def test_a_revision_cache_follows_writes_at_once_here_and_by_notification_elsewhere(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from sidecar.storage.backends import postgres
    from sidecar.storage.state import SCHEMAS, State

    clock = [1000.0]
    monkeypatch.setattr(postgres.time, "monotonic", lambda: clock[0])
    with postgres_server.schema() as url:
        db = PostgresDatabase(url, revision_cache_s=0.25)
        for ddl in SCHEMAS:
            db.ensure(ddl)
        state = State(db)
        other = psycopg.connect(url, autocommit=True)
        try:
            deadline = time.time() + 30
            while db.change_token() is None:  # the feed's LISTEN is in place
                assert time.time() < deadline
                time.sleep(0.01)
            revisions = state.revisions
            before = revisions.revisions()
            feed = db._feed
            assert feed is not None
            heard, generation = feed._seen, feed.generation
            with state.tx() as tx:  # this process's write: seen at once
                revisions.bump_tools(tx)
            assert revisions.revisions()[1] == before[1] + 1
            seen = revisions.revisions()
            # its own notification comes back too, and drops nothing: the write moved
            # the process's counter, which the cached value's key already holds
            while feed._seen == heard:
                assert time.time() < deadline
                time.sleep(0.01)
            assert feed.generation == generation
            assert revisions.revisions() == seen
            # another process writes without a notification: the cached value stands
            # until the bound has passed (the clock is frozen, then moved past it)
            other.execute(BUMP)
            assert revisions.revisions() == seen
            clock[0] += 0.25
            assert revisions.revisions()[0] == seen[0] + 1
            # another process's write transaction notifies: seen without the clock moving
            seen = revisions.revisions()
            with other.transaction():
                other.execute(BUMP)
                other.execute(f"NOTIFY {db.channel}")
            while revisions.revisions() == seen:
                assert time.time() < deadline
                time.sleep(0.01)
            assert revisions.revisions()[0] == seen[0] + 1
        finally:
            other.close()
            db.close()


@pytest.mark.model
@pytest.mark.integration
def test_an_index_built_with_another_embedder_is_refused_at_start(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text('[{"name": "fetch", "description": "fetch a page"}]')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env |= {"SIDECAR_HOME": str(tmp_path / "home")}
    if "SIDECAR_MODEL_CACHE" in os.environ:
        env["SIDECAR_MODEL_CACHE"] = os.environ["SIDECAR_MODEL_CACHE"]
    added = subprocess.run(
        [SCRIPT, "tools", "add", str(tools)],
        capture_output=True, text=True, env={**env, "SIDECAR_EMBEDDER": "hashing"}, timeout=120,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    served = subprocess.run(
        [SCRIPT, "serve", "--port", "0"], capture_output=True, text=True, env=env, timeout=300
    )
    assert served.returncode == 7, served.stderr
    assert "was built with embedder 'hashing-384', not 'all-MiniLM-L6-v2'" in served.stderr
