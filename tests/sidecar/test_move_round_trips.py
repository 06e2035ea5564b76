"""What one eviction costs in round trips to the stores, on each state backend: a
move's steps share transactions, and nothing is asked once per tool (on PostgreSQL
and a Chroma server every statement and request is a round trip; BENCHMARKS.md section
14, "Moves: round trips")."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.model import CredentialRef
from tests.indexes.helpers import CallRecorder
from tests.sidecar.helpers import abandoned


@contextlib.contextmanager
def counted(db: Any) -> Iterator[Counter[str]]:
    """Statements and write transactions this thread sends through ``db`` (the group
    publisher's thread is not the move's: the move does not wait for it)."""
    counts: Counter[str] = Counter()
    me = threading.get_ident()
    names = ("execute", "executemany", "tx")
    for name in names:
        original = getattr(db, name)

        def wrapped(*args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            if threading.get_ident() == me:
                counts[_name] += 1
            return _original(*args, **kw)

        setattr(db, name, wrapped)
    try:
        yield counts
    finally:
        for name in names:
            delattr(db, name)


@pytest.fixture(params=["parquet", "delta"])
def sc(request: pytest.FixtureRequest, tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    """A sidecar on each state backend, beside a local archive (appended at once) or a
    Delta table (records acknowledged in the state, published in group commits)."""
    cold = {"cold_url": f"delta+file://{tmp_path / 'cold'}"} if request.param == "delta" else {}
    with Sidecar.open(
        embedder=HashingEmbedder(),
        home=tmp_path / "home",
        evict_min_chains=1,
        database_url=state_url,
        **cold,
    ) as sidecar:
        sidecar.add_tools(
            [Tool(f"t{i}", f"tool number {i}") for i in range(12)]
            + [Tool("c0", "tool with a key", credentials=(CredentialRef("env:K0"),))]
            + [Tool("end", "the failing tool")]
        )
        sidecar.report(abandoned(["t11", "end"], "HTTP 400 #warm"))
        sidecar.evict()  # the first move opens what a move touches
        yield sidecar


def evict_counted(sc: Sidecar, tools: list[str], n: int) -> tuple[Counter[str], list[str]]:
    sc.report(abandoned([*tools, "end"], f"HTTP 400 #{n}"))
    recorder = CallRecorder(sc.index._collection)
    sc.index._collection = recorder
    try:
        with counted(sc.state._db) as counts:
            report = sc.evict()
    finally:
        sc.index._collection = recorder._inner
    assert sorted(d.tool_id for d in report.evicted) == sorted(tools)
    return counts, [op for op, _n in recorder.calls]


def test_a_move_takes_two_or_three_transactions_and_nothing_per_tool(sc: Sidecar) -> None:
    one, chroma_one = evict_counted(sc, ["t0"], 1)
    five, chroma_five = evict_counted(sc, ["t1", "t2", "t3", "t4", "t5"], 2)
    # intents (with, beside a shared archive, the records, the mandates and the revision
    # before the hot delete), then the records removed and the moves done; beside a
    # local archive the append comes between the intents and the rest
    assert one["tx"] == (2 if sc.publisher.group else 3), one
    # five tools in one batch cost the statements one tool costs
    assert five == one
    # the hot delete: one delete and the get that verifies it, for the whole batch
    assert chroma_one == chroma_five == ["delete", "get"]


def test_a_tool_with_a_credential_adds_no_statement_per_tool(sc: Sidecar) -> None:
    """Beside the move's own, a credential costs its mandate (written once per
    reference); reading who else holds it and whether it is in use is batched."""
    plain, _ = evict_counted(sc, ["t0"], 1)
    keyed, _ = evict_counted(sc, ["c0", "t1", "t2"], 2)
    assert keyed["tx"] == plain["tx"]
    # one release, one in-use check, one holders read, one mandate
    assert keyed["execute"] + keyed["executemany"] == plain["execute"] + plain["executemany"] + 4
    assert [m.ref for m in sc.mandates()] == ["env:K0"]
