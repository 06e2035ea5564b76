"""Usage requests in the state, on every backend: a (tool, source, outcome) keeps at most
``memory`` rows whatever the number of sessions, a request seen again grows a count,
and forgetting a source removes its rows."""

from __future__ import annotations

import numpy as np

from sidecar.storage import Database
from sidecar.storage.filters import SessionFilter
from sidecar.storage.requests import RequestRepository, RequestRow
from tests.support.state import state_on


def row(session: str, text: int, source: str = "alice", outcome: str = "completed") -> RequestRow:
    """One session's request for ``tool``: the same ``text`` is the same request."""
    vector = np.random.default_rng(text).standard_normal(8).astype("<f4")
    key = f"{text:032x}"
    return RequestRow("tool", source, f"src:{source}/session:{session}", key, vector.tobytes(),
                      outcome, 1_000.0 + text)  # fmt: skip


def test_sessions_of_one_request_are_one_row_with_their_count(db: Database) -> None:
    """500 sessions with one task text were 500 rows: now one, counting 500."""
    state = state_on(db)
    with state.tx() as tx:
        grown = [state.requests.add(tx, [row(f"s{n + k}", 7) for k in range(50)])
                 for n in range(0, 500, 50)]  # fmt: skip
    # the bytes kept grow with the first session only: the others are a count
    assert grown[0] > 8 * 4 and grown[1:] == [0] * 9
    assert state.requests.count() == 1
    (kept,), _ = state.requests.since(0)
    assert kept.sessions == 500 and kept.key == f"{7:032x}"


def test_rows_stay_bounded_per_tool_source_and_outcome(db: Database) -> None:
    repo = RequestRepository(db, memory=3)
    state = state_on(db)
    with state.tx() as tx:
        for n in range(40):
            repo.add(tx, [row(f"s{n}", n % 10), row(f"t{n}", n % 10, outcome="abandoned")])
            repo.add(tx, [row(f"u{n}", n % 10, source="bob")])
    rows, _ = repo.since(0)
    by_group: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        by_group.setdefault((r.source, r.outcome), []).append(r.key)
    # each group keeps its three smallest request keys, each seen by four sessions
    assert {g: sorted(keys) for g, keys in by_group.items()} == {
        g: [f"{t:032x}" for t in range(3)]
        for g in (("alice", "completed"), ("alice", "abandoned"), ("bob", "completed"))
    }
    assert {r.sessions for r in rows} == {4}


def test_a_later_read_sees_the_count_grow(db: Database) -> None:
    state = state_on(db)
    with state.tx() as tx:
        state.requests.add(tx, [row("s1", 3)])
    _, seen = state.requests.since(0)
    with state.tx() as tx:
        state.requests.add(tx, [row("s2", 3), row("s3", 3)])
    (grown,), _ = state.requests.since(seen)
    assert grown.sessions == 3


def test_forgetting_a_source_removes_its_rows_only(db: Database) -> None:
    state = state_on(db)
    with state.tx() as tx:
        state.requests.add(tx, [row(f"a{n}", n % 2) for n in range(6)])
        state.requests.add(tx, [row(f"b{n}", n % 2, source="bob") for n in range(6)])
    with state.tx() as tx:
        assert state.requests.forget(tx, SessionFilter("src:alice/")) == 2
    rows, _ = state.requests.since(0)
    assert {(r.source, r.sessions) for r in rows} == {("bob", 3)}
