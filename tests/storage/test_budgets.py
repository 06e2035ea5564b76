"""Evidence budgets in the state, on every backend: bytes add up per source and day, are
read together for a token's sources, and a forget releases them (since a time: that
time's day and after)."""

from __future__ import annotations

from sidecar.storage import Database
from sidecar.storage.budgets import DAY_S
from tests.support.state import state_on


def test_bytes_add_up_per_source_and_are_released_by_a_forget(db: Database) -> None:
    state = state_on(db)
    with state.tx() as tx:
        state.budgets.spend(tx, "alice", 100, 0.0)
        state.budgets.spend(tx, "alice", 50, 10.0)
        state.budgets.spend(tx, "otlp:alice", 7, 3 * DAY_S)
        state.budgets.spend(tx, "bob", 5, 0.0)
        state.budgets.spend(tx, "bob", 0, 0.0)  # nothing stored, nothing written
    assert state.budgets.spent(["alice", "gateway:alice", "otlp:alice"]) == 157
    assert state.budgets.by_source() == {"alice": 150, "bob": 5, "otlp:alice": 7}
    with state.tx() as tx:
        state.budgets.forget(tx, "otlp:alice", 3 * DAY_S + 5)  # that day and after
        state.budgets.forget(tx, "alice", 2 * DAY_S)  # nothing that recent
    assert state.budgets.by_source() == {"alice": 150, "bob": 5}
    with state.tx() as tx:
        state.budgets.forget(tx, "alice", None)
    assert state.budgets.spent(["alice"]) == 0 and state.budgets.spent([]) == 0
