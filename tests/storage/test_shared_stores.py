"""The shared deployment's settings: ``SIDECAR_COLD_URL`` (with the AWS variables) puts
the archive in a Delta table, and what cannot be shared safely is refused at start with
exit code 14."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import EXIT_INVALID, EXIT_UNSAFE, ConfigError, UnsafeStorage
from sidecar.home import s3_options
from sidecar.settings import Settings
from sidecar.storage.postgres import PostgresDatabase
from tests.cold_store.backends import ACCESS, REGION, S3Server
from tests.cold_store.test_probe import FakeStore
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
