"""What one untrusted token may put into the sidecar: its steps on tools in no catalog
grow no per-tool state, its rates count steps and tool ids in no catalog as well as
reports, and its evidence in the state is held to a budget (429 naming it past it);
trusted sources and operators keep working as they did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import RateLimited
from tests.support.quota import CATALOG, attack, catalog_session, ghost_steps, tools_in
from tests.support.shop import good_session
from tests.support.tokens import OPERATOR, TOKENS, post, tokens_file


@pytest.fixture
def sc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sidecar]:
    monkeypatch.setenv("SIDECAR_REPORT_RATE", "0")
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as s:
        s.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
        s.report_many([good_session(n) for n in range(5)])
        yield s


def test_an_agents_steps_on_tools_in_no_catalog_grow_no_per_tool_state(sc: Sidecar) -> None:
    answers = sc.report_many([attack(n) for n in range(4)], source="alice", role="agent")
    memory = sc.rules.conditions.memory().to_dict()
    assert set(memory["tools"]) <= CATALOG
    assert {g["tool"] for g in memory["groups"]} <= CATALOG
    for table, tools in tools_in(sc.settings.home).items():
        assert tools <= CATALOG, table
    assert all(a.status == "recorded" for a in answers)  # nothing archived of them
    assert "120 step(s) on tools in no catalog" in answers[0].reason
    # the catalog's tool in the same sessions is learned from, as alice's evidence
    assert "alice" in memory["sources"]
    assert memory["tools"]["get_order"]["sessions"] == 5 + 4


def test_a_session_of_tools_in_no_catalog_alone_stores_nothing(sc: Sidecar) -> None:
    before = sc.rules.conditions.memory().summary()
    (answer,) = sc.report_many(
        [{"steps": ghost_steps(0, 50, False), "outcome": "completed", "session_id": "g"}],
        source="alice",
        role="agent",
    )
    assert answer.status == "recorded" and "every step on tools in no catalog" in answer.reason
    assert sc.rules.conditions.memory().summary() == before


def test_trusted_sources_teach_of_any_tool_and_agents_then_may_too(sc: Sidecar) -> None:
    """The seed took any tool ids from the operator: it still does, and a tool trusted
    evidence named is one an agent may report on."""
    chain = {"topology": ["legacy_a", "legacy_b"], "outcome": "abandoned",
             "failure": {"signature": "Error: invalid record"},
             "constraint": {"rule": "legacy_b fails after legacy_a"}}  # fmt: skip
    assert sc.report(chain).status == "archived"
    agents = {**chain, "topology": ["legacy_a", "made_up"], "session_id": "a1"}
    rejected = sc.report(agents, source="alice", role="agent")
    assert rejected.status == "rejected" and "made_up" in rejected.reason
    again = {**chain, "session_id": "a2"}
    assert sc.report(again, source="alice", role="agent").status == "archived"
    # the gateway (a trusted source) reports any tool's calls
    step = {"tool": "upstream_only", "arguments": {"q": 1}, "output": {"ok": 1}, "error": None}
    sc.report({"steps": [step], "outcome": "completed", "session_id": "g1"}, source="gateway")
    assert sc.rules.conditions.memory().knows("upstream_only")
    sc.report({"steps": [step], "outcome": "completed", "session_id": "g2"}, "alice", "agent")
    assert sc.rules.conditions.memory().to_dict()["tools"]["upstream_only"]["sessions"] == 2


def test_the_rates_count_steps_and_tool_ids_in_no_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIDECAR_STEP_RATE", "300")
    monkeypatch.setenv("SIDECAR_NEW_TOOL_RATE", "100")
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        sc.add_tools([Tool("get_order", "look up an order")])
        with pytest.raises(RateLimited, match="SIDECAR_NEW_TOOL_RATE") as ghosts:
            sc.report(attack(0, count=150), source="alice", role="agent")
        assert ghosts.value.limit == "new_tool_ids" and "send fewer" in str(ghosts.value)
        sc.report(attack(1, count=60), source="alice", role="agent")  # 61 steps, 60 ids
        with pytest.raises(RateLimited, match="SIDECAR_NEW_TOOL_RATE"):
            sc.report(attack(3, count=60), source="alice", role="agent")
        steps = [catalog_session(n) for n in range(15)]  # 300 steps on a catalog tool
        with pytest.raises(RateLimited, match="SIDECAR_STEP_RATE") as many:
            sc.report_many(steps, source="alice", role="agent")
        assert many.value.limit == "steps"
        sc.report_many(steps[:10], source="bob", role="agent")  # each token its own
        # trusted sources and the process itself: no limit
        sc.report(attack(5, count=150), source="gateway")
        sc.report_many(steps)


def test_the_rate_limit_takes_from_every_bucket_or_none() -> None:
    from sidecar.trust.quota import RateLimit

    rate = RateLimit({"reports": 60, "steps": 120})
    rate.take("alice", {"reports": 1, "steps": 100}, now=0.0)
    with pytest.raises(RateLimited) as caught:
        rate.take("alice", {"reports": 1, "steps": 30}, now=0.0)
    assert caught.value.limit == "steps" and caught.value.retry_after == pytest.approx(5.0)
    rate.take("alice", {"reports": 59, "steps": 20}, now=0.0)  # no report was taken above
    rate.take("alice", {"steps": 1}, now=0.5)  # two steps a second come back


def test_an_agents_evidence_is_held_to_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIDECAR_EVIDENCE_BUDGET", "60000")
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        sc.add_tools([Tool("get_order", "look up an order")])
        taken = 0
        with pytest.raises(RateLimited, match="SIDECAR_EVIDENCE_BUDGET") as caught:
            for n in range(100):
                sc.report(catalog_session(n), source="alice", role="agent")
                taken += 1
        assert caught.value.code == "budget_exhausted" and caught.value.retry_after is None
        assert 3 <= taken < 100
        spent = sc.quotas().evidence_bytes["alice"]
        # the request that crossed the budget was taken whole, and no more
        assert 60000 <= spent < 60000 + 2 * spent / taken
        sc.report(catalog_session(999), source="bob", role="agent")  # bob has his own
        sc.report_many([good_session(100 + n) for n in range(3)])  # the process: none
        sc.forget("alice")
        assert "alice" not in sc.quotas().evidence_bytes
        sc.report(catalog_session(1000), source="alice", role="agent")


def test_the_quotas_show_in_metrics_and_a_refusal_names_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sidecar.shells.api import create_app

    monkeypatch.setenv("SIDECAR_EVIDENCE_BUDGET", "20000")
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=home) as sc,
        TestClient(create_app(sc, OPERATOR), base_url="http://127.0.0.1") as client,
    ):
        sc.add_tools([Tool("get_order", "look up an order")])
        statuses = []
        for n in range(40):
            answer = post(client, TOKENS["alice"], "/v1/reports", {"reports": [attack(n, 20)]})
            statuses.append(answer.status_code)
            if answer.status_code != 200:
                break
        assert statuses[-1] == 429 and "Retry-After" not in answer.headers
        assert answer.json()["error"]["code"] == "budget_exhausted"
        assert "SIDECAR_EVIDENCE_BUDGET" in answer.json()["error"]["message"]
        metrics = client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"}).text
    assert 'sidecar_reports_refused_total{limit="evidence_budget"} 1' in metrics
    assert "sidecar_evidence_budget_bytes 20000" in metrics
    spent = [line for line in metrics.splitlines() if line.startswith("sidecar_evidence_bytes")]
    assert spent and spent[0].startswith('sidecar_evidence_bytes{token="alice"}')
    assert int(float(spent[0].split()[-1])) >= 20000
    taken = statuses.count(200)
    assert f'sidecar_uncataloged_steps_total{{token="alice"}} {20 * taken}' in metrics
