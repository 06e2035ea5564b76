"""The sessions the sidecar learned from, a page at a time: the call memory's and those
that met an archived chain, in key order, each with its source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.errors import InvalidInput
from tests.sidecar.helpers import abandoned
from tests.support.shop import good_session
from tests.support.tokens import fabricated


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "home", database_url=state_url
    ) as lib:
        yield lib


def test_an_empty_home_has_no_session(sc: Sidecar) -> None:
    page = sc.sessions_page()
    assert page.sessions == () and page.next_cursor is None and page.total == 0


def test_pages_follow_one_another_and_cover_every_session_once(sc: Sidecar) -> None:
    sc.report_many([good_session(n) for n in range(7)])
    sc.report_many([fabricated(n, "alice") for n in range(2)], source="alice", role="agent")
    sc.report(abandoned(["a", "b"], session_id="chain-1"))
    seen, cursor = [], None
    while True:
        page = sc.sessions_page(cursor, limit=3)
        assert len(page.sessions) <= 3 and page.total == 10
        seen += list(page.sessions)
        cursor = page.next_cursor
        if cursor is None:
            break
    keys = [s.session_key for s in seen]
    assert keys == sorted(keys) and len(set(keys)) == 10
    by_key = {s.session_key: s for s in seen}
    alice = [s for s in seen if s.source == "alice"]
    assert len(alice) == 2 and all(s.chains for s in alice)
    chain = next(s for k, s in by_key.items() if k.endswith("chain-1"))
    assert chain.source == "local" and len(chain.chains) == 1
    assert all(s.steps == 2 for s in seen if "ok-" in s.session_key)


def test_a_cursor_this_sidecar_did_not_give_is_refused(sc: Sidecar) -> None:
    with pytest.raises(InvalidInput):
        sc.sessions_page("%%%")
