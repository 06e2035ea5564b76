"""What the state keeps of one tool, read back on every backend: its moves newest first
with their times, and the sessions its kept usage requests count by source and outcome."""

from __future__ import annotations

import numpy as np

from sidecar.storage import Database
from sidecar.storage.moves import Move
from sidecar.storage.requests import RequestRow
from tests.support.state import state_on


def row(session: str, text: int, source: str = "alice", outcome: str = "completed") -> RequestRow:
    """One session's request for ``tool``: the same ``text`` is the same request."""
    vector = np.random.default_rng(text).standard_normal(8).astype("<f4")
    return RequestRow("tool", source, f"src:{source}/session:{session}", f"{text:032x}",
                      vector.tobytes(), outcome, 1_000.0 + text)  # fmt: skip


def move(move_id: str, tool_id: str = "parser") -> Move:
    return Move(move_id, tool_id, "intent", {"document": "d", "metadata": {}}, (f"c-{move_id}",))


def test_the_moves_of_a_tool_are_read_newest_first_with_their_times(db: Database) -> None:
    state = state_on(db)
    with state.tx() as tx:
        state.moves.write_intents(tx, [move("m1"), move("x1", "other")], 100.0)
        state.moves.finish(tx, [move("m1")], {"m1": "cold://tools/m1"}, 150.0)
    with state.tx() as tx:
        state.moves.write_intents(tx, [move("m2")], 200.0)
        state.moves.advance(tx, ["m2"], "archived", 210.0)
    assert state.moves.moves_of("parser") == [
        {"move_id": "m2", "status": "archived", "chain_ids": ["c-m2"], "created_at": 200.0,
         "updated_at": 210.0},
        {"move_id": "m1", "status": "done", "chain_ids": ["c-m1"], "created_at": 100.0,
         "updated_at": 150.0},
    ]  # fmt: skip
    assert state.moves.moves_of("nothing") == []


def test_a_tools_usage_is_tallied_by_source_and_outcome(db: Database) -> None:
    state = state_on(db)
    with state.tx() as tx:
        state.requests.add(tx, [row(f"s{n}", n % 3) for n in range(7)])
        state.requests.add(tx, [row(f"a{n}", 9, outcome="abandoned") for n in range(2)])
        state.requests.add(tx, [row("b1", 4, source="bob")])
    # alice: 7 completed sessions over 3 requests, 2 abandoned over one; bob: one
    assert state.requests.tally("tool") == [
        ("alice", "abandoned", 2, 1),
        ("alice", "completed", 7, 3),
        ("bob", "completed", 1, 1),
    ]
    assert state.requests.tally("other") == []
