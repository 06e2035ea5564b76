"""The one interface (:class:`sidecar.interface.SidecarAPI`), run the same way against the
library in this process and against a server over HTTP: the same calls on fresh homes
give the same answers (mypy holds the signatures; this holds the behaviour)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder
from sidecar import RemoteSidecar, Sidecar, Tool
from sidecar.interface import SidecarAPI
from tests.serving import serving
from tests.sidecar.test_call_memory import failing_session, good_session

TOKEN = "interface-contract-token-0123456789"


@pytest.fixture(params=["library", "http"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SidecarAPI]:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        if request.param == "library":
            yield sc
            return
        with serving(sc, TOKEN) as url, RemoteSidecar(url, TOKEN) as remote:
            yield remote


def scenario(api: SidecarAPI) -> dict[str, Any]:
    """A home's first hour: tools added, sessions reported, a call checked, the rule
    read and audited, a lookup, the archive's digest and status, a dry eviction."""
    added = api.add_tools(
        [
            Tool("get_order", "look up an order by id"),
            Tool("exchange_items", "exchange delivered items of an order"),
            Tool("weather", "the weather in a city"),
        ]
    )
    reports = api.report_many([good_session(n) for n in range(6)])
    reports += api.report_many([failing_session(n) for n in range(3)])
    steps = failing_session(9)["steps"]
    check = api.check_call(steps[:-1], steps[-1]["tool"], steps[-1]["arguments"])
    rules = api.constraints()
    call_rules = [r for r in rules if r.kind == "call"]
    first = api.constraint(call_rules[0].chain_id)
    audited = api.audit(first.pointer) if first.pointer else None
    found = api.search("exchange the items of my order", k=2)
    return {
        "added": sorted(added.added),
        "reports": [r.status for r in reports],
        "check": (check.decision, sorted(r.constraint_id for r in check.reasons)),
        "rules": sorted((r.chain_id, r.kind, r.status, r.support) for r in rules),
        "first": (first.chain_id, first.pointer, first.rule),
        "audited": None if audited is None else sorted(audited),
        "found": [h.tool_id for h in found.hits],
        "tools": sorted(t.tool_id for t in api.list_tools()),
        "digest": api.digest().chains,
        "status": api.status().chains,
        "decide": sorted(d.tool_id for d in api.decide()),
        "dry_run": sorted(d.tool_id for d in api.evict(dry_run=True).evicted),
        "health": api.health().ready,
    }


def test_the_library_and_the_server_answer_the_same(tmp_path: Path) -> None:
    answers = {}
    for where in ("library", "http"):
        with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / where) as sc:
            if where == "library":
                answers[where] = scenario(sc)
                continue
            with serving(sc, TOKEN) as url, RemoteSidecar(url, TOKEN) as remote:
                answers[where] = scenario(remote)
    assert answers["library"] == answers["http"]
    got = answers["library"]
    # and the answers are the ones the scenario is for, not two empty ones alike
    assert got["check"][0] == "block" and got["check"][1]
    assert "exchange_items" in got["found"] and got["audited"]
    assert got["reports"].count("archived") >= 3 and got["health"]


def test_each_implementation_is_the_interface(api: SidecarAPI) -> None:
    """Every method the interface declares is there, and callable as declared."""
    declared = [n for n in vars(SidecarAPI) if not n.startswith("_")]
    assert len(declared) >= 25
    for name in declared:
        assert callable(getattr(api, name)), name
    assert api.hidden_tools() == set() and api.mandates() == []
