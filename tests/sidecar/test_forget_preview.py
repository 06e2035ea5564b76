"""Forgetting a source, previewed: ``forget(..., dry_run=True)`` changes nothing and
answers with the figures the real forgetting then reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import InvalidInput
from tests.sidecar.helpers import abandoned
from tests.support.shop import good_session
from tests.support.tokens import fabricated, tokens_file, verdict


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    """On SQLite and on PostgreSQL (a preview copies either into a throwaway SQLite)."""
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(
        embedder=HashingEmbedder(), home=home, evict_min_chains=1, database_url=state_url
    ) as lib:
        lib.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
        lib.report_many([good_session(n) for n in range(20)])
        yield lib


def _state(sc: Sidecar) -> tuple[object, ...]:
    views = sc.constraints(include_lifted=True)
    return (
        verdict(sc),
        sorted((v.chain_id, v.status, v.sessions, v.sources) for v in views),
        sc.status().active_constraints,
    )


def test_a_preview_changes_nothing_and_equals_the_forgetting(sc: Sidecar) -> None:
    sc.report_many([fabricated(n, "alice") for n in range(4)], source="alice", role="agent")
    sc.report_many([fabricated(0, "bob")], source="bob", role="agent")
    chain = abandoned(["a", "b", "c"], session_id="alice-chain")
    sc.report_many([chain], source="alice", role="agent")
    assert verdict(sc) == "block"
    before = _state(sc)

    preview = sc.forget("alice", dry_run=True)

    assert _state(sc) == before  # nothing changed
    assert preview.sessions >= 4 and preview.constraints >= 1 and preview.tools
    done = sc.forget("alice")
    assert done == preview
    assert verdict(sc) == "warn"  # bob alone warns


def test_a_preview_of_a_source_that_taught_nothing_is_empty(sc: Sidecar) -> None:
    before = _state(sc)
    preview = sc.forget("nobody", dry_run=True)
    assert (preview.sessions, preview.conditions, preview.constraints) == (0, 0, 0)
    assert preview.tools == () and preview.restored == ()
    assert _state(sc) == before


def test_a_rules_history_names_who_lifted_and_reinstated_it(sc: Sidecar) -> None:
    sc.report(abandoned(["a", "b"], session_id="s1"))
    (view,) = [v for v in sc.constraints() if v.kind == "sequence"]
    sc.lift(view.chain_id, "a false alarm", by="ops")
    sc.reinstate(view.chain_id, "it failed again", by="ops")
    history = sc.constraint_history(view.chain_id)
    assert [(e.action, e.reason) for e in history] == [
        ("active", "it failed again (by ops)"),
        ("lifted", "a false alarm (by ops)"),
    ]
    assert history[0].at >= history[1].at
    assert sc.constraint_history(view.chain_id, limit=1) == history[:1]


def test_a_preview_names_the_evicted_tools_forgetting_would_bring_back(tmp_path: Path) -> None:
    """The tools are named, not moved: they stay cold until the forgetting itself."""
    home = tmp_path / "home"
    home.mkdir()
    path = tokens_file(home / "tokens.json")
    data = json.loads(path.read_text())
    data["tokens"].append({"name": "ops", "role": "operator", "token": "ops-token-0123456789"})
    path.write_text(json.dumps(data))
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as lib:
        lib.add_tools([Tool(t, f"the {t} tool") for t in ("fetch_page", "parse_page", "extract")])
        lib.report(
            abandoned(["fetch_page", "parse_page", "extract"], session_id="o1"), source="ops"
        )
        assert lib.evict(min_chains=1).evicted
        cold = lib.hidden_tools()
        preview = lib.forget("ops", dry_run=True)
        assert preview.restored and set(preview.restored) <= cold
        assert lib.hidden_tools() == cold  # nothing moved
        assert lib.forget("ops") == preview
        assert not set(preview.restored) & lib.hidden_tools()


@pytest.mark.parametrize("since", [8e23, 8 * 10**23, 10**400, float("inf"), float("nan"), -1e12])
def test_a_since_no_record_can_have_is_refused_as_input(tmp_path: Path, since: float) -> None:
    """A time past any record (found by the API fuzzer: an integer too large for the
    state's column was a server error)."""
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        with pytest.raises(InvalidInput, match="since"):
            sc.forget("alice", since)
        with pytest.raises(InvalidInput, match="since"):
            sc.forget("alice", since, dry_run=True)
