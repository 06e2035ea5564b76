"""Trust: named tokens with roles, evidence attributed to its source, no single untrusted
source able to make the memory block a call for everyone, and forgetting a source."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import ConfigError, RateLimited
from sidecar.settings import Settings
from sidecar.shells.api import create_app
from sidecar.trust.principals import Principals
from sidecar.trust.quota import RateLimit
from tests.sidecar.test_call_memory import REFUSAL, exchange, good_session, lookup

OPERATOR = "operator-token-0123456789"
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}


def fabricated(n: int, who: str) -> dict[str, Any]:
    """A failing exchange of a pending order, as a poisoner would write it."""
    order = f"#{who[0].upper()}{5000 + n}"
    return {
        "steps": [lookup(order, "pending"), exchange(order, REFUSAL)],
        "outcome": "abandoned",
        "session_id": f"{who}-{n}",
    }


def tokens_file(path: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "tokens": [
                    {"name": "alice", "role": "agent", "token": TOKENS["alice"]},
                    {
                        "name": "bob",
                        "role": "agent",
                        "token_sha256": hashlib.sha256(TOKENS["bob"].encode()).hexdigest(),
                    },
                ]
            }
        )
    )
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Sidecar, TestClient]]:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
        sc.report_many([good_session(n) for n in range(20)])  # the operator's own evidence
        with TestClient(create_app(sc, OPERATOR), base_url="http://127.0.0.1") as client:
            yield sc, client


def post(client: TestClient, token: str, path: str, body: Any) -> Any:
    return client.post(path, json=body, headers={"Authorization": f"Bearer {token}"})


def verdict(sc: Sidecar) -> str:
    steps = [lookup("#C3000", "pending")]
    return sc.check_call(steps, "exchange_items", {"order_id": "#C3000"}).decision


def test_one_source_alone_never_blocks_two_do_and_forgetting_one_undoes_it(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    reports = [fabricated(n, "alice") for n in range(4)]
    answer = post(client, TOKENS["alice"], "/v1/reports", {"reports": reports})
    assert answer.status_code == 200
    assert verdict(sc) == "warn"  # four situations, but from one untrusted source
    views = [v for v in sc.constraints() if v.kind == "call" and "pending" in v.rule]
    assert views and all(v.sources == ("alice",) for v in views)
    post(client, TOKENS["bob"], "/v1/reports", {"reports": [fabricated(0, "bob")]})
    assert verdict(sc) == "block"  # two sources now
    # an agent may not forget; the operator may
    refused = post(client, TOKENS["alice"], "/v1/sources/bob/forget", {})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    gone = post(client, OPERATOR, "/v1/sources/alice/forget", {})
    assert gone.status_code == 200 and gone.json()["sessions"] == 4
    assert verdict(sc) == "warn"  # what rested on alice is gone; bob alone warns
    sc.forget("bob")
    assert verdict(sc) == "allow"


def test_a_success_from_one_other_source_does_not_contest_a_rule(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    sc.report_many([fabricated(n, "ops") for n in range(3)])  # the operator's evidence
    assert verdict(sc) == "block"
    pending_ok = {
        "steps": [lookup("#M1", "pending"), exchange("#M1")],
        "outcome": "completed",
        "session_id": "mallory-1",
    }
    post(client, TOKENS["alice"], "/v1/reports", {"reports": [pending_ok]})
    assert verdict(sc) == "block"
    (view,) = [v for v in sc.constraints() if v.kind == "call" and "has status 'pending'" in v.rule]
    assert view.status == "active"
    assert view.condition is not None and view.condition["contradiction_sources"] == ["alice"]


def test_hand_written_conditions_need_the_operator_and_a_failure(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    condition = {
        "tool": "get_order",
        "signature": "Error: anything",
        "predicate": {"feature": "value:*", "op": "==", "value": '{"order_id":"#Q1"}'},
    }
    poisoned = {**fabricated(0, "alice"), "constraint": {"conditions": [condition]}}
    (result,) = post(client, TOKENS["alice"], "/v1/reports", {"reports": [poisoned]}).json()[
        "results"
    ]
    assert result["status"] == "rejected" and "operator role" in result["reason"]
    completed = {**good_session(99), "constraint": {"conditions": [condition]}}
    (result,) = post(client, OPERATOR, "/v1/reports", {"reports": [completed]}).json()["results"]
    assert result["status"] == "rejected" and "completed session" in result["reason"]
    check = sc.check_call([], "get_order", {"order_id": "#Q1"})
    assert check.decision == "allow"


def test_agents_may_not_move_tools_or_lift(served: tuple[Sidecar, TestClient]) -> None:
    _sc, client = served
    for path, body in (
        ("/v1/evictions", {}),
        ("/v1/tools", {"tools": [{"name": "x", "description": "y"}]}),
        ("/v1/tools/get_order/restore", {"reason": "r"}),
        ("/v1/constraints/0123456789abcdef/lift", {"reason": "r"}),
        ("/v1/revocations/run", {}),
    ):
        answer = post(client, TOKENS["bob"], path, body)
        assert answer.status_code == 403, path


def test_a_lift_covers_the_signature_family(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        sc.report_many([good_session(n) for n in range(20)])
        sc.report_many([fabricated(n, "ops") for n in range(3)])
        steps = [lookup("#C3000", "pending")]
        blocking = sc.check_call(steps, "exchange_items", {"order_id": "#C3000"}).reasons
        rules = sorted({r.constraint_id for r in blocking if r.level == "block"})
        assert rules
        for rule in rules:
            sc.lift(rule, "a false positive")
        assert verdict(sc) != "block"
        # the same failure, one character changed: the lift still holds
        variant = [
            {**fabricated(n, "var"), "steps": [lookup(f"#V{n}", "pending"),
                                               exchange(f"#V{n}", REFUSAL + "!")]}
            for n in range(3)
        ]  # fmt: skip
        sc.report_many(variant)
        assert verdict(sc) != "block"
        sc.reinstate(rules[0], "it was real")
        assert verdict(sc) == "block"


def test_the_report_rate_of_an_untrusted_source(tmp_path: Path) -> None:
    rate = RateLimit({"reports": 60})
    rate.take("alice", {"reports": 60}, now=0.0)
    with pytest.raises(RateLimited) as caught:
        rate.take("alice", {"reports": 1}, now=0.0)
    assert caught.value.retry_after == pytest.approx(1.0)
    assert "SIDECAR_REPORT_RATE" in str(caught.value)
    rate.take("alice", {"reports": 1}, now=1.0)  # one a second comes back
    rate.take("bob", {"reports": 60}, now=0.0)  # each source has its own
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, report_rate=2) as sc:
        sc.report_many([good_session(n) for n in range(5)])  # the process itself: no limit
        sc.report_many([fabricated(n, "eve") for n in range(2)], source="eve", role="agent")
        with pytest.raises(RateLimited):
            sc.report(fabricated(3, "eve"), source="eve", role="agent")


def test_a_tokens_file_is_checked_when_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    for bad in (
        {"tokens": [{"name": "a/b", "role": "agent", "token": "x" * 20}]},
        {"tokens": [{"name": "local", "role": "agent", "token": "x" * 20}]},
        {"tokens": [{"name": "a", "role": "root", "token": "x" * 20}]},
        {"tokens": [{"name": "a", "role": "agent", "token": "short"}]},
        {"tokens": [{"name": "a", "token": "x" * 20}, {"name": "a", "token": "y" * 20}]},
        {"no": "tokens"},
        # checked once stripped, as it is compared
        {"tokens": [{"name": "a", "role": "agent", "token": " " * 16}]},
        {"tokens": [{"name": "a", "role": "agent", "token": "\t short \n" + " " * 10}]},
        {"tokens": [{"name": "a", "token": "x" * 20}, {"name": "b", "token": f" {'x' * 20} "}]},
        {"tokens": [{"name": "a", "token": "x" * 20},
                    {"name": "b", "role": "operator",
                     "token_sha256": hashlib.sha256(b"x" * 20).hexdigest().upper()}]},
        {"tokens": [{"name": "a", "token_sha256": hashlib.sha256(b"").hexdigest()}]},
        {"tokens": [{"name": "a", "token": OPERATOR}]},  # the operator's own token
    ):  # fmt: skip
        path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError):
            Principals.load(path, OPERATOR)
    principals = Principals.load(tokens_file(path), OPERATOR)
    alice = principals.authenticate(TOKENS["alice"].encode())
    assert alice is not None and (alice.role, alice.trusted) == ("agent", False)
    operator = principals.authenticate(OPERATOR.encode())
    assert operator is not None and operator.operator and operator.trusted
    assert principals.authenticate(b"nobody") is None
    for empty in (b"", b"   ", b"\t"):
        assert principals.authenticate(empty) is None
    for blank in ("", " " * 16, "short"):
        with pytest.raises(ConfigError):
            Principals.load(None, blank)
    with pytest.raises(ConfigError, match="tokens_file"):
        Settings.load(env={"SIDECAR_TOKENS_FILE": str(tmp_path / "missing.json")})
    # the refusal says which name is taken twice
    path.write_text(json.dumps({"tokens": [_named("ci"), _named("ci", "y")]}))
    with pytest.raises(ConfigError, match="'ci' names two"):
        Principals.load(path, None)
    # the operator's token is compared as it was checked: stripped of any whitespace
    padded = Principals.load(None, "\u00a0" + OPERATOR + "\u2003")
    assert padded.authenticate(OPERATOR.encode()) is not None


def _named(name: str, fill: str = "x") -> dict[str, str]:
    return {"name": name, "role": "agent", "token": fill * 20}


def test_a_source_over_its_rate_is_told_when_to_come_back(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=home, report_rate=1) as sc,
        TestClient(create_app(sc, OPERATOR), base_url="http://127.0.0.1") as client,
    ):
        first = post(client, TOKENS["alice"], "/v1/reports", {"reports": [fabricated(0, "alice")]})
        assert first.status_code == 200
        again = post(client, TOKENS["alice"], "/v1/reports", {"reports": [fabricated(1, "alice")]})
        assert again.status_code == 429 and again.json()["error"]["code"] == "rate_limited"
        assert int(again.headers["Retry-After"]) >= 1
        # the operator is trusted: no limit
        assert (
            post(client, OPERATOR, "/v1/reports", {"reports": [good_session(1)]}).status_code == 200
        )
