"""What one more session writes to the stored conditions, on each state backend: only
the conditions its derivation changed (a tool with many learned conditions is not
rewritten whole under the state's write lock at every report), and only those records
are parsed again when the conditions' states are next read."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.memory import FailureCondition
from sidecar.rules.conditions import ConditionBook, ConditionState
from sidecar.storage.conditions import ConditionRepository, Derived, Known
from tests.support.shop import exchange, lookup, teach

OUT_OF_STOCK = "Error: out of stock"


def out_of_stock(n: int) -> dict[str, Any]:
    """An exchange of a delivered order with five items refused: a second failure of
    the same tool, whose conditions leave the first failure's as they are."""
    order = f"#S{n}"
    return {
        "steps": [lookup(order, "delivered", items=5), exchange(order, OUT_OF_STOCK)],
        "outcome": "abandoned",
        "session_id": f"oos-{n}",
    }


def pending_exchange_succeeded(n: int) -> dict[str, Any]:
    order = f"#P{n}"
    return {
        "steps": [lookup(order, "pending"), exchange(order)],
        "outcome": "completed",
        "session_id": f"pending-ok-{n}",
    }


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "home", database_url=state_url, retire_after=2
    ) as s:
        s.add_tools(
            [
                Tool("get_order", "look up an order by id"),
                Tool("exchange_items", "exchange delivered items of an order"),
            ]
        )
        yield s


def stored(sc: Sidecar) -> dict[str, Known]:
    with sc.state.tx() as tx:
        return sc.state.conditions.known(tx, "exchange_items")


def signature(known: Known) -> str:
    return str(FailureCondition.from_dict(json.loads(known.record)).signature)


class Written:
    """The condition ids each derivation inserts, updates or marks gone, through the
    repository."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inserted: list[str] = []
        self.updated: list[str] = []
        self.gone: list[str] = []
        insert, update = ConditionRepository.insert, ConditionRepository.update
        mark_gone = ConditionRepository.mark_gone

        def inserting(repo: ConditionRepository, tx: Any, cid: str, *args: Any) -> None:
            self.inserted.append(cid)
            insert(repo, tx, cid, *args)

        def updating(
            repo: ConditionRepository, tx: Any, derived: list[Derived], *args: Any
        ) -> None:
            self.updated += [d.condition_id for d in derived]
            update(repo, tx, derived, *args)

        def going(repo: ConditionRepository, tx: Any, cids: Any, now: float) -> None:
            cids = list(cids)
            self.gone += cids
            mark_gone(repo, tx, cids, now)

        monkeypatch.setattr(ConditionRepository, "mark_gone", going)
        monkeypatch.setattr(ConditionRepository, "insert", inserting)
        monkeypatch.setattr(ConditionRepository, "update", updating)

    def clear(self) -> None:
        self.inserted.clear()
        self.updated.clear()
        self.gone.clear()


def test_one_more_session_writes_only_the_conditions_it_changed(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    teach(sc)
    sc.report(out_of_stock(0))
    before = stored(sc)
    refused = {cid for cid, k in before.items() if signature(k) != OUT_OF_STOCK}
    assert len(refused) >= 8  # the first failure's conditions, learned from 23 sessions
    written = Written(monkeypatch)

    sc.report(out_of_stock(1))
    after = stored(sc)
    changed = {cid for cid in after if cid in before and after[cid] != before[cid]}
    new = set(after) - set(before)
    assert changed and new
    assert set(written.updated) | set(written.gone) == changed
    assert len(written.updated) + len(written.gone) == len(changed)
    assert set(written.inserted) == new
    # the other failure's conditions were derived again as they were: none written
    assert not refused & (changed | new)
    assert all(after[cid] == before[cid] for cid in refused)


def test_a_contradicted_condition_is_written_and_retired(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    teach(sc)
    (pending,) = [
        v.chain_id for v in sc.constraints() if v.kind == "call" and "'pending'" in v.rule
    ]
    written = Written(monkeypatch)
    for n in range(2):  # retire_after=2
        before = stored(sc)
        written.clear()
        sc.report(pending_exchange_succeeded(n))
        after = stored(sc)
        assert after[pending].contradictions == before[pending].contradictions + 1
        assert pending in written.updated
        changed = {cid for cid in before if after[cid] != before[cid]}
        assert set(written.updated) | set(written.gone) == changed
        assert not set(written.updated) & set(written.gone)
    view = {v.chain_id: v for v in sc.constraints(include_lifted=True)}[pending]
    assert view.status == "retired" and view.invalid_at is not None
    (row,) = [r for r in sc.state.conditions.rows() if r.condition_id == pending]
    assert row.invalid_at is not None  # stamped when written, not only computed on read


def test_reading_the_states_again_parses_only_the_records_a_write_changed(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    teach(sc)
    sc.report(out_of_stock(0))
    book = sc.rules.conditions
    book.states()
    before = stored(sc)
    parsed: list[str] = []
    inside = [False]
    from_dict = FailureCondition.from_dict.__func__  # type: ignore[attr-defined]
    states = ConditionBook.states

    def parsing(cls: type[FailureCondition], data: dict[str, Any]) -> FailureCondition:
        if inside[0]:
            parsed.append(str(data["id"]))
        return from_dict(cls, data)

    def reading(self: ConditionBook) -> dict[str, ConditionState]:
        inside[0] = True
        try:
            return states(self)
        finally:
            inside[0] = False

    monkeypatch.setattr(FailureCondition, "from_dict", classmethod(parsing))
    monkeypatch.setattr(ConditionBook, "states", reading)
    sc.report(out_of_stock(1))  # its archived record asks for the states: rebuilt once
    got = book.states()
    after = stored(sc)
    touched = {cid for cid in after if cid not in before or after[cid].record != before[cid].record}
    assert set(after) - set(before) <= set(parsed)  # the new ones are read
    assert set(parsed) <= touched and len(parsed) == len(set(parsed)) < len(after)
    # and the states read are those of the records as stored
    assert {cid: st.condition.support for cid, st in got.items() if cid in after} == {
        cid: k.support for cid, k in after.items()
    }


def test_a_check_reading_the_conditions_while_a_batch_archives_waits_its_turn(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that archives reads, inside its transaction, the conditions it just taught
    (for the cold record); a check reading the conditions meanwhile from another thread
    waits for the batch and is answered, and neither holds a lock the other waits on."""
    teach(sc)
    book = sc.rules.conditions
    enforced = ConditionBook.enforced
    readers: list[threading.Thread] = []
    read: list[int] = []

    def archiving(self: ConditionBook, tool: str) -> list[FailureCondition]:
        if not readers:  # the batch's own read: a check arrives just before it
            reader = threading.Thread(target=lambda: read.append(len(book.states())))
            readers.append(reader)
            reader.start()
            reader.join(0.3)  # long enough for the check to take what it can
        return enforced(self, tool)

    monkeypatch.setattr(ConditionBook, "enforced", archiving)
    batch = threading.Thread(target=sc.report, args=(out_of_stock(0),), daemon=True)
    batch.start()
    batch.join(60)
    assert not batch.is_alive(), "the batch and the check wait on each other"
    assert readers
    readers[0].join(60)
    assert not readers[0].is_alive() and read and read[0] >= 1
