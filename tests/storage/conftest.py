"""The contract suite's fixture: one :class:`~sidecar.storage.Database` per backend, and
a way to open more on the same state (another process, as far as the state can tell)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from benchmarks.pgserver import PostgresServer
from sidecar.storage import Database
from sidecar.storage.backends.postgres import PostgresDatabase
from sidecar.storage.backends.sqlite import SqliteDatabase

Opener = Callable[..., Database]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Opener]:
    """``open_db(writable=True)``: a new database object on this test's one state."""
    opened: list[Database] = []
    if backend == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        schema = server.schema()
        url = schema.__enter__()

        def make(writable: bool = True) -> Database:
            db = PostgresDatabase(url, writable)
            opened.append(db)
            return db
    else:
        path = tmp_path / "state.sqlite"

        def make(writable: bool = True) -> Database:
            db = SqliteDatabase(path, writable)
            opened.append(db)
            return db

    yield make
    for db in opened:
        db.close()
    if backend == "postgres":
        schema.__exit__(None, None, None)


@pytest.fixture
def db(open_db: Opener) -> Database:
    return open_db()
