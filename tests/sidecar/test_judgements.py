"""An operator's judgement of a rule: confirming one that rests on an untrusted source
alone makes it block (and readable by every agent); retiring one stops it alone;
lifting or reinstating takes either back; each is in the rule's history with who did
it, through the library and over HTTP alike."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import InvalidInput, NotFound
from sidecar.shells.api import create_app
from tests.sidecar.helpers import abandoned
from tests.support.shop import good_session, lookup
from tests.support.tokens import OPERATOR, TOKENS, fabricated, post, tokens_file, verdict

FATAL = ["search_api", "html_parser", "llm_extractor"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Sidecar, TestClient]]:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home, report_rate=1000) as sc:
        sc.add_tools(
            [Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")]
            + [Tool(t, t) for t in FATAL]
        )
        sc.report_many([good_session(n) for n in range(20)])
        with TestClient(create_app(sc, OPERATOR), base_url="http://127.0.0.1") as client:
            yield sc, client


def _sequence(sc: Sidecar) -> str:
    (view,) = [v for v in sc.constraints(include_lifted=True) if v.kind == "sequence"]
    return view.chain_id


def _as_bob(client: TestClient, rule: str) -> dict[str, object]:
    bob = {"Authorization": f"Bearer {TOKENS['bob']}"}
    found: dict[str, object] = client.get(f"/v1/constraints/{rule}", headers=bob).json()
    return found


def test_a_confirmed_sequence_from_one_agent_blocks_and_lifting_takes_it_back(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    for n in range(2):
        body = {"reports": [abandoned(FATAL, "HTTP 413", session_id=f"a{n}")]}
        assert post(client, TOKENS["alice"], "/v1/reports", body).status_code == 200
    assert sc.check(FATAL).safe  # one untrusted source: it warns
    rule = _sequence(sc)
    assert _as_bob(client, rule)["expected_failure"] == ""  # alice's words, not bob's
    refused = post(client, TOKENS["bob"], f"/v1/constraints/{rule}/confirm", {"reason": "x"})
    assert refused.status_code == 403  # an agent may not vouch
    answer = post(client, OPERATOR, f"/v1/constraints/{rule}/confirm", {"reason": "seen it"})
    assert answer.status_code == 200 and answer.json()["status"] == "active"
    assert not sc.check(FATAL).safe
    view = sc.constraint(rule)
    assert (view.judged, view.independent) == ("confirmed", True)
    assert view.judged_by  # the operator token's name
    # another agent now reads the failure text (a person vouched for it)
    as_bob = _as_bob(client, rule)
    assert as_bob["expected_failure"] == "HTTP 413" and as_bob["judged_by"] is None
    (event, *_) = sc.constraint_history(rule)
    assert event.action == "confirmed" and "seen it (by " in event.reason
    sc.lift(rule, "wrong after all", by="ops")
    sc.reinstate(rule, "back, unconfirmed", by="ops")
    assert sc.constraint(rule).judged is None
    assert sc.check(FATAL).safe  # its standing is the sources' again


def test_a_confirmed_call_condition_from_one_agent_blocks(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    body = {"reports": [fabricated(n, "alice") for n in range(4)]}
    assert post(client, TOKENS["alice"], "/v1/reports", body).status_code == 200
    assert verdict(sc) == "warn"
    check = sc.check_call([lookup("#C3000", "pending")], "exchange_items", {"order_id": "#C3000"})
    rules = sorted({r.constraint_id for r in check.reasons})
    assert rules and not any(sc.constraint(r).independent for r in rules)
    sc.confirm(rules[0], "the shop refuses pending exchanges", by="ops")
    assert verdict(sc) == "block"
    assert sc.constraint(rules[0]).judged == "confirmed"
    for rule in rules:
        sc.retire(rule, "the shop changed its policy", by="ops")
    assert verdict(sc) == "allow"
    retired = sc.constraint(rules[0])
    assert (retired.status, retired.judged) == ("retired", "retired")
    assert retired.invalid_at is not None
    sc.reinstate(rules[0], "it refuses again", by="ops")
    assert verdict(sc) == "warn"  # enforced again, on its sources' standing


def test_retiring_a_blocking_sequence_stops_it_alone(served: tuple[Sidecar, TestClient]) -> None:
    sc, client = served
    sc.report(abandoned(FATAL, "HTTP 413"))  # the operator's own evidence
    rule = _sequence(sc)
    assert not sc.check(FATAL).safe
    answer = post(client, OPERATOR, f"/v1/constraints/{rule}/retire", {"reason": "fixed"})
    assert answer.json() == {"chain_id": rule, "status": "retired"}
    assert sc.check(FATAL).safe and not sc.check(FATAL).warnings
    assert rule not in {v.chain_id for v in sc.constraints()}
    assert sc.constraint(rule).status == "retired"
    sc.reinstate(rule, "broken again")
    assert not sc.check(FATAL).safe


def test_judging_needs_a_rule_and_a_reason(served: tuple[Sidecar, TestClient]) -> None:
    sc, client = served
    with pytest.raises(NotFound):
        sc.confirm("0" * 32, "x")
    with pytest.raises(NotFound):
        sc.retire("0" * 16, "x")
    with pytest.raises(InvalidInput):
        sc.confirm("not-an-id", "x")
    sc.report(abandoned(FATAL, "HTTP 413"))
    with pytest.raises(InvalidInput):
        sc.retire(_sequence(sc), "  ")
    missing = post(client, OPERATOR, f"/v1/constraints/{'0' * 32}/confirm", {"reason": "x"})
    assert missing.status_code == 404


def test_confirming_a_contested_sequence_sets_its_contradictions_aside(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, _client = served
    rule = sc.report({**abandoned(FATAL, "HTTP 413"), "session_id": "bad"}).chain_id
    assert rule is not None
    sc.report({"topology": FATAL, "outcome": "completed", "session_id": "ran"})
    assert sc.constraint(rule).status == "contested" and sc.check(FATAL).safe
    sc.confirm(rule, "it fails in production", by="ops")
    assert sc.constraint(rule).status == "active"
    assert not sc.check(FATAL).safe


def test_an_agent_reads_a_confirmed_condition_in_its_view_as_in_its_checks(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    body = {"reports": [fabricated(n, "alice") for n in range(4)]}
    assert post(client, TOKENS["alice"], "/v1/reports", body).status_code == 200
    check = sc.check_call([lookup("#C3000", "pending")], "exchange_items", {"order_id": "#C3000"})
    rule = sorted(r.constraint_id for r in check.reasons)[0]
    assert _as_bob(client, rule)["expected_failure"] == ""  # alice's words
    sc.confirm(rule, "the shop refuses pending exchanges", by="ops")
    as_bob = sc.check_call(
        [lookup("#C3000", "pending")], "exchange_items", {"order_id": "#C3000"}, viewer="bob"
    )
    quoted = {r.constraint_id: r.quoted for r in as_bob.reasons}[rule]
    shown = _as_bob(client, rule)
    assert shown["expected_failure"] and shown["expected_failure"] in quoted.values()
    assert shown["judged"] == "confirmed" and shown["judged_by"] is None


def test_a_confirmation_holds_only_while_the_condition_says_what_was_confirmed(
    served: tuple[Sidecar, TestClient],
) -> None:
    """A condition's predicate values grow with new evidence under one id; what other
    agents contributed after a person looked is not confirmed by that look."""
    sc, client = served
    body = {"reports": [fabricated(n, "alice") for n in range(4)]}
    assert post(client, TOKENS["alice"], "/v1/reports", body).status_code == 200
    check = sc.check_call([lookup("#C3000", "pending")], "exchange_items", {"order_id": "#C3000"})
    rules = sorted(r.constraint_id for r in check.reasons)
    for rule in rules:
        sc.confirm(rule, "seen it", by="ops")
    assert verdict(sc) == "block"
    with sc.state.tx() as tx:  # as if the predicate had changed since
        for judged in sc.state.judgements.all(tx).values():
            sc.state.judgements.set(tx, replace(judged, subject="0" * 64))
        sc.state.conditions.bump_conditions(tx)
    assert verdict(sc) == "warn"
    assert all(sc.constraint(r).judged is None for r in rules)


def test_lifting_a_rules_family_takes_back_its_members_confirmations(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, _client = served
    first = sc.report(abandoned(FATAL, "HTTP 413 payload too large")).chain_id
    other = sc.report(abandoned(FATAL, "HTTP 413 payload too large!")).chain_id
    assert first and other and first != other
    sc.confirm(other, "seen it", by="ops")
    sc.lift(first, "the extractor was fixed", by="ops")  # its family: the other too
    assert sc.constraint(other).status == "lifted"
    sc.reinstate(first, "broken again", by="ops")
    assert sc.constraint(other).status == "active" and sc.constraint(other).judged is None
