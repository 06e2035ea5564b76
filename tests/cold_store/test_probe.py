"""The conditional-write probe: a Delta store is opened for writing only where a second
put-if-absent of one key is refused.  Moto honours it; small HTTP servers stand in for
stores that do not."""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import pytest

from cold_store import (
    BadLocation,
    ColdStore,
    S3Options,
    StoreUnavailable,
    UnsafeStore,
    parse_location,
)
from cold_store.probe import probe_folder, signed_headers
from tests.cold_store.backends import FakeStore, S3Server


@pytest.fixture
def fake_store(request: pytest.FixtureRequest) -> Iterator[FakeStore]:
    store = FakeStore(request.param)
    yield store
    store.close()


def options(endpoint: str) -> S3Options:
    return S3Options(endpoint_url=endpoint, access_key_id="k", secret_access_key="s", timeout_s=5)


@pytest.mark.integration
def test_moto_honours_conditional_writes_and_the_probe_leaves_nothing(
    s3_server: S3Server,
) -> None:
    bucket = s3_server.new_bucket()

    store = ColdStore(f"s3://{bucket}/cold", s3=s3_server.options())
    store.close()

    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys and all(k.startswith(("cold/chains/", "cold/tools/")) for k in keys), keys


@pytest.mark.parametrize("fake_store", [200], indirect=True)
def test_a_store_that_ignores_if_none_match_is_refused(fake_store: FakeStore) -> None:
    with pytest.raises(UnsafeStore, match="accepted a second put-if-absent"):
        ColdStore("s3://bucket/cold", s3=options(fake_store.endpoint))

    puts = [r for r in fake_store.requests if r[0] == "PUT"]
    assert len(puts) == 2 and all(r[2] == "*" for r in puts)
    assert puts[0][1] == puts[1][1] and puts[0][1].startswith("/bucket/cold/_probe/")
    assert ("DELETE", puts[0][1], None) in fake_store.requests  # the probe key is cleaned up
    assert len(fake_store.requests) == 3  # nothing else was tried


@pytest.mark.parametrize("fake_store", [501], indirect=True)
def test_a_store_without_conditional_writes_is_refused(fake_store: FakeStore) -> None:
    with pytest.raises(UnsafeStore, match="does not implement conditional writes"):
        ColdStore("s3://bucket/cold", s3=options(fake_store.endpoint))


@pytest.mark.parametrize("fake_store", [403], indirect=True)
def test_a_store_refusing_the_probe_write_is_unavailable(fake_store: FakeStore) -> None:
    with pytest.raises(StoreUnavailable, match="refused \\(403\\)"):
        ColdStore("s3://bucket/cold", s3=options(fake_store.endpoint))


def test_an_unreachable_store_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        ColdStore("s3://bucket/cold", s3=options(f"http://127.0.0.1:{port}"))


def test_the_folder_probe_passes_and_leaves_no_file(tmp_path: Path) -> None:
    probe_folder(tmp_path)

    assert list((tmp_path / "_probe").iterdir()) == []


def test_a_folder_where_a_second_link_succeeds_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def overwriting_link(src: str | Path, dst: str | Path) -> None:
        Path(dst).write_bytes(Path(src).read_bytes())  # a filesystem that replaces

    monkeypatch.setattr(os, "link", overwriting_link)
    with pytest.raises(UnsafeStore, match="second hard link"):
        ColdStore(f"delta+file://{tmp_path / 'cold'}")
    assert not (tmp_path / "cold" / "chains").exists()


def test_a_folder_without_hard_links_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(_src: str | Path, _dst: str | Path) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    with pytest.raises(UnsafeStore, match="hard link"):
        ColdStore(f"delta+file://{tmp_path / 'cold'}")


def test_the_probe_signature_is_aws_signature_version_4() -> None:
    """Checked against botocore's signer, for a key that needs escaping."""
    opts = S3Options(
        endpoint_url="http://127.0.0.1:9000",
        region="eu-west-1",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    )
    url = opts.object_url("bucket", "a prefix/_probe/x+y")
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    mine = signed_headers(opts, "PUT", url, b"first", {"If-None-Match": "*"}, now=now)

    request = botocore.awsrequest.AWSRequest(
        method="PUT", url=url, data=b"first", headers={"If-None-Match": "*"}
    )
    credentials = botocore.credentials.Credentials(
        str(opts.access_key_id), str(opts.secret_access_key)
    )
    with mock.patch("botocore.auth.get_current_datetime", return_value=now.replace(tzinfo=None)):
        botocore.auth.S3SigV4Auth(credentials, "s3", "eu-west-1").add_auth(request)
    assert mine["authorization"] == request.headers["Authorization"]


# ---- locations ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("location", "parsed"),
    [
        ("/srv/cold", ("parquet", "/srv/cold")),
        ("relative/cold", ("parquet", "relative/cold")),
        (Path("/srv/cold"), ("parquet", "/srv/cold")),
        ("file:///srv/cold", ("parquet", "/srv/cold")),
        ("delta+file:///srv/cold", ("delta", "/srv/cold")),
        ("delta+file:///srv/with%20space", ("delta", "/srv/with space")),
        ("s3://bucket/a/prefix/", ("s3", "bucket/a/prefix")),
        ("s3://bucket", ("s3", "bucket")),
    ],
)
def test_locations_name_their_backend(location: str | Path, parsed: tuple[str, str]) -> None:
    assert parse_location(location) == parsed


@pytest.mark.parametrize(
    "location", ["", "gs://bucket/x", "s3:///prefix", "file://host/srv", "delta+file://"]
)
def test_a_location_of_no_known_backend_is_refused(location: str) -> None:
    with pytest.raises(BadLocation):
        parse_location(location)
