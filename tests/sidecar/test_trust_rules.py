"""Trust, round two: one rule for every kind of evidence.  Each test is an attack an
agent holding an ordinary token could make, run against the HTTP API over a real
sidecar; none may change a verdict for other agents, evict or revoke, and forgetting
the attacker undoes what it caused."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.model import CredentialRef
from sidecar.shells.api import create_app
from tests.sidecar.helpers import abandoned, completed
from tests.support.otlp import post_traces, settle, traces
from tests.support.shop import exchange, good_session, lookup
from tests.support.tokens import OPERATOR, TOKENS, fabricated, post, tokens_file, verdict

FATAL = ["search_api", "html_parser", "llm_extractor"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Sidecar, TestClient]]:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(
        embedder=HashingEmbedder(), home=home, evict_on_report=True, report_rate=1000
    ) as sc:
        sc.add_tools(
            [
                Tool("get_order", "look up an order"),
                Tool("exchange_items", "exchange"),
                Tool("search_api", "search", credentials=(CredentialRef("env:S", ("s",)),)),
                Tool("html_parser", "parse", credentials=(CredentialRef("env:P", ("p",)),)),
                Tool("llm_extractor", "extract"),
            ]
        )
        sc.report_many([good_session(n) for n in range(20)])  # the operator's own evidence
        with TestClient(create_app(sc, OPERATOR), base_url="http://127.0.0.1") as client:
            yield sc, client


def test_otlp_traces_teach_as_the_token_that_sent_them(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    for n in range(8):
        assert post_traces(client, TOKENS["alice"], traces("alice", n)) == 200
    settle(sc, client)
    assert verdict(sc) == "warn"  # one untrusted token, whatever the route
    views = [v for v in sc.constraints() if v.kind == "call" and "pending" in v.rule]
    assert views and all(v.sources == ("otlp:alice",) for v in views)
    assert all(not v.independent for v in views)
    # forgetting the token reaches its traces too
    assert post(client, OPERATOR, "/v1/sources/alice/forget", {}).json()["sessions"] == 8
    assert verdict(sc) == "allow"


def test_otlp_is_rate_limited_per_token(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=home, report_rate=5) as sc,
        TestClient(create_app(sc, OPERATOR), base_url="http://127.0.0.1") as client,
    ):
        for n in range(24):
            post_traces(client, TOKENS["alice"], traces("alice", n))
        settle(sc, client)
        forgotten = sc.forget("alice")
        assert forgotten.sessions <= 5  # one batch of 24: over the rate, refused whole


def test_a_fatal_sequence_from_one_agent_warns_and_evicts_nothing(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    for n in range(3):
        body = {"reports": [abandoned(FATAL, "HTTP 413", session_id=f"a{n}")]}
        assert post(client, TOKENS["alice"], "/v1/reports", body).status_code == 200
    check = sc.check(FATAL)
    assert check.safe and check.warnings  # warned, not blocked
    lookup_after = sc.search("extract", k=5, after=FATAL[:2])
    assert "llm_extractor" in {h.tool_id for h in lookup_after.hits}
    (view,) = [v for v in sc.constraints() if v.kind == "sequence"]
    assert view.sources == ("alice",) and not view.independent
    assert {t.tool_id for t in sc.list_tools()} >= set(FATAL)  # nothing evicted
    assert sc.mandates() == []
    # a second source makes it independent
    post(client, TOKENS["bob"], "/v1/reports", {"reports": [abandoned(FATAL, "HTTP 413")]})
    assert not sc.check(FATAL).safe


def test_an_agent_cannot_retire_an_operators_rules(
    served: tuple[Sidecar, TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    sc, client = served
    sc.report_many([fabricated(n, "ops") for n in range(3)])  # the operator's evidence
    sc.report(abandoned(["a", "b"], "HTTP 400 bad"))
    assert verdict(sc) == "block" and not sc.check(["a", "b"]).safe
    caplog.set_level(logging.WARNING, logger="sidecar.archive.audit")
    fakes = [
        {"steps": [lookup(f"#M{n}", "pending"), exchange(f"#M{n}")],
         "outcome": "completed", "session_id": f"mallory-{n}"}
        for n in range(4)
    ]  # fmt: skip
    fakes += [{**completed(["a", "b"]), "session_id": f"mallory-chain-{n}"} for n in range(3)]
    assert post(client, TOKENS["alice"], "/v1/reports", {"reports": fakes}).status_code == 200
    assert verdict(sc) == "block"
    assert not sc.check(["a", "b"]).safe
    (sequence,) = [v for v in sc.constraints() if v.kind == "sequence" and v.sequence == ("a", "b")]
    assert sequence.status == "active" and sequence.ignored_contradictions == 3
    assert any("contradiction ignored" in r.message for r in caplog.records)
    assert sc.status().ignored_contradictions >= 3
    # a trusted source's own success does contest it
    sc.report(completed(["a", "b"]))
    assert sc.check(["a", "b"]).warnings


def test_a_success_reported_before_the_operators_rule_does_not_contest_it(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    sc.add_tools([Tool("c", "c"), Tool("d", "d")])  # an agent reports on catalog tools only
    early = {**completed(["c", "d"]), "session_id": "mallory-early"}
    post(client, TOKENS["alice"], "/v1/reports", {"reports": [early]})
    sc.report(abandoned(["c", "d"], "HTTP 400 bad"))
    (view,) = [v for v in sc.constraints() if v.sequence == ("c", "d")]
    assert view.status == "active" and view.ignored_contradictions == 1


def test_forgetting_an_agent_restores_what_its_evidence_evicted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.add_tools(
            [
                Tool("search_api", "search", credentials=(CredentialRef("env:S", ("s",)),)),
                Tool("html_parser", "parse"),
                Tool("llm_extractor", "extract"),
            ]
        )
        for who in ("alice", "bob"):
            sc.report(abandoned(FATAL, "HTTP 413", session_id=who), source=who, role="agent")
        evicted = {d.tool_id for d in sc.evict().evicted}
        assert evicted == {"search_api", "html_parser"}
        assert [m.status for m in sc.mandates()] == ["pending"]
        forgotten = sc.forget("alice")
        assert set(forgotten.restored) == evicted
        assert {t.tool_id for t in sc.list_tools()} >= evicted
        (mandate,) = sc.mandates()
        assert mandate.status == "cancelled" and "restored" in (mandate.last_error or "")
        # bob alone: warned, never evicted again
        assert sc.evict().evicted == ()


def test_an_agents_runs_of_an_operators_fatal_sequence_keep_no_tool_from_eviction(
    served: tuple[Sidecar, TestClient],
) -> None:
    """Completed runs an agent reports of an operator's fatal sequence are ignored as
    contradictions, and are no use of its tools either: the eviction it drives goes
    ahead.  The operator's own completed run is a use, and keeps them."""
    sc, client = served
    sc.report(abandoned(FATAL, "HTTP 413", session_id="ops-dead-end"))
    fakes = [{**completed(FATAL), "session_id": f"mallory-run-{n}"} for n in range(3)]
    steps = [{"tool": t, "arguments": {"n": n}, "output": {"ok": n}} for n, t in enumerate(FATAL)]
    fakes.append({"steps": steps, "outcome": "completed", "session_id": "mallory-steps"})
    assert post(client, TOKENS["alice"], "/v1/reports", {"reports": fakes}).status_code == 200
    (view,) = [v for v in sc.constraints() if v.kind == "sequence"]
    assert view.status == "active" and view.ignored_contradictions == 4
    assert sc.evict(dry_run=True, min_chains=1).kept == ()
    evicted = {d.tool_id for d in sc.evict(min_chains=1).evicted}
    assert evicted == {"search_api", "html_parser"}


def test_a_trusted_run_of_a_fatal_sequence_still_keeps_its_tools(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, _client = served
    sc.report(abandoned(FATAL, "HTTP 413", session_id="ops-dead-end"))
    sc.report(completed(FATAL))  # the operator's own: a use, and a contradiction
    assert sc.evict(min_chains=1).evicted == ()
    (view,) = [v for v in sc.constraints() if v.kind == "sequence"]
    assert view.status != "active" and view.ignored_contradictions == 0
