"""Fixtures for the cold store tests: stores in tmp_path (or in a bucket of a test S3
server) that are always closed."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cold_store import ColdStore
from tests.cold_store.backends import Backend, S3Server

OpenStore = Callable[[], ColdStore]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "cold"


@pytest.fixture
def open_store(root: Path) -> Iterator[OpenStore]:
    """Opens a ColdStore on ``root`` (again and again); every one is closed at teardown."""
    opened: list[ColdStore] = []

    def factory() -> ColdStore:
        store = ColdStore(root)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> ColdStore:
    return open_store()


@pytest.fixture(autouse=True)
def _no_aws_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The object store client under Delta fills what a store was not given from the
    ``AWS_*`` variables: none of the developer's may reach a test."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.close()


BACKENDS = [
    pytest.param("parquet"),
    pytest.param("delta"),
    pytest.param("s3", marks=pytest.mark.integration),
]
DELTA_BACKENDS = BACKENDS[1:]


def make_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    if kind == "parquet":
        return Backend(kind, str(tmp_path / "cold"))
    if kind == "delta":
        return Backend(kind, f"delta+file://{tmp_path / 'cold'}")
    server: S3Server = request.getfixturevalue("s3_server")
    bucket = server.new_bucket()
    return Backend(kind, f"s3://{bucket}/cold", server.options(), server, bucket)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend in turn; every store it opened is closed at teardown."""
    made = make_backend(request.param, tmp_path, request)
    yield made
    for store in made.opened:
        store.close()


@pytest.fixture(params=DELTA_BACKENDS)
def delta_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The Delta backends only: a local folder and S3."""
    made = make_backend(request.param, tmp_path, request)
    yield made
    for store in made.opened:
        store.close()
