"""Freshness for one round trip: a check reads the state once (every revision in one
small read) when nothing changed, and a commit made by another process before the check
started is in its answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.storage.base import Database
from tests.sidecar.test_call_memory import failing_session, good_session, lookup

SUCCESSES = 20


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "home", database_url=state_url
    ) as sidecar:
        yield sidecar


def statements(monkeypatch: pytest.MonkeyPatch, db: Database) -> list[str]:
    """Every statement the database runs from now on."""
    seen: list[str] = []
    original = type(db).execute

    def counted(self: Database, sql: str, params: Any = ()) -> Any:
        if self is db:
            seen.append(sql)
        return original(self, sql, params)

    monkeypatch.setattr(type(db), "execute", counted)
    return seen


def pending_exchange(sc: Sidecar) -> str:
    steps = [lookup("#C3000", "pending")]
    return sc.check_call(steps, "exchange_items", {"order_id": "#C3000"}).decision


def test_a_check_reads_the_state_once_when_nothing_changed(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc.report_many([good_session(n) for n in range(SUCCESSES)])
    sc.report_many([failing_session(n) for n in range(3)])
    assert pending_exchange(sc) == "block"
    seen = statements(monkeypatch, sc.state.database)
    for _ in range(3):
        assert pending_exchange(sc) == "block"
        assert sc.check(["a", "b"]).safe
    assert len(seen) == 6, seen  # one read of the revisions per request


def test_a_commit_by_another_replica_is_in_its_next_check(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """Two replicas on one PostgreSQL state (one SQLite home has one writer)."""
    with postgres_server.schema() as url:
        _replicas(tmp_path, url)


def _replicas(tmp_path: Path, url: str) -> None:
    homes = [tmp_path / "a", tmp_path / "b"]
    opened = [Sidecar.open(embedder=HashingEmbedder(), home=h, database_url=url) for h in homes]
    try:
        a, b = opened
        a.report_many([good_session(n) for n in range(SUCCESSES)])
        assert pending_exchange(b) == "allow"
        a.report_many([failing_session(n) for n in range(3)])
        assert pending_exchange(b) == "block"  # the very next request on the other replica
        a.forget("local")
        assert pending_exchange(b) == "allow"
    finally:
        for s in opened:
            s.close()
