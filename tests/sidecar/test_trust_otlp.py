"""Trust, round two, item 1: what a token exports as OTLP traces is its own source,
``otlp:<name>``.  It is trusted only when that source or the token is; it speaks for the
token (the same token's reports and traces are one source of evidence, never two);
the token's report rate covers it; and forgetting ``otlp:<name>`` removes that evidence
alone.  Each test runs over the HTTP API of a real sidecar holding named tokens."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import ConfigError
from sidecar.trust.principals import Principals, check_source
from tests.support.otlp import post_traces, settle, traces
from tests.support.shop import good_session
from tests.support.tokens import OPERATOR, TOKENS, fabricated, post, tokens_file, verdict

CAROL = "carol-token-0123456789"
"""A token marked trusted in the tokens file."""


def _tokens(path: Path) -> None:
    tokens_file(path)
    data = json.loads(path.read_text())
    data["tokens"].append({"name": "carol", "role": "agent", "token": CAROL, "trusted": True})
    path.write_text(json.dumps(data))


@contextlib.contextmanager
def _serve(tmp_path: Path, **settings: Any) -> Iterator[tuple[Sidecar, TestClient]]:
    home = tmp_path / "home"
    home.mkdir()
    _tokens(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home, **settings) as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
        sc.report_many([good_session(n) for n in range(20)])  # the operator's own evidence
        with TestClient(create_app(sc), base_url="http://127.0.0.1") as client:
            yield sc, client


def create_app(sc: Sidecar) -> Any:
    from sidecar.shells.api import create_app as app_of

    return app_of(sc, OPERATOR)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Sidecar, TestClient]]:
    with _serve(tmp_path, report_rate=1000) as pair:
        yield pair


def _sources(sc: Sidecar) -> set[tuple[str, ...]]:
    return {v.sources for v in sc.constraints() if v.kind == "call" and "pending" in v.rule}


def test_one_tokens_traces_warn_where_a_trusted_tokens_block(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    for n in range(4):
        assert post_traces(client, TOKENS["alice"], traces("alice", n)) == 200
    settle(sc, client)
    assert _sources(sc) == {("otlp:alice",)}
    assert verdict(sc) == "warn"  # one untrusted token: never a block for the others
    # the same token's reports are the same witness: two routes are not two sources
    post(client, TOKENS["alice"], "/v1/reports", {"reports": [fabricated(0, "alice")]})
    assert verdict(sc) == "warn"
    # the same traces from a token marked trusted block
    for n in range(4):
        assert post_traces(client, CAROL, traces("carol", n)) == 200
    settle(sc, client)
    assert verdict(sc) == "block"


def test_an_otlp_source_named_trusted_blocks_its_token_alone_does_not(tmp_path: Path) -> None:
    with _serve(tmp_path, report_rate=1000, trusted_sources="gateway,otlp:bob") as (sc, client):
        reports = [fabricated(n, "bob") for n in range(4)]
        assert post(client, TOKENS["bob"], "/v1/reports", {"reports": reports}).status_code == 200
        assert verdict(sc) == "warn"  # bob's own reports are not trusted
        for n in range(4):
            assert post_traces(client, TOKENS["bob"], traces("bob", n)) == 200
        settle(sc, client)
        assert verdict(sc) == "block"  # bob's traces are: the operator said so


def test_otlp_sessions_over_the_tokens_rate_are_refused_and_counted(tmp_path: Path) -> None:
    with _serve(tmp_path, report_rate=5) as (sc, client):
        for n in range(24):  # each session delivered alone, as a sweep would
            assert post_traces(client, TOKENS["alice"], traces("alice", n)) == 200
            settle(sc, client)
        assembler = client.app.api.state.traces  # type: ignore[attr-defined]
        assert assembler.stats.refused_reports >= 24 - 6
        # the limit is the token's, whatever the route: its reports wait too
        again = post(client, TOKENS["alice"], "/v1/reports", {"reports": [fabricated(0, "alice")]})
        assert again.status_code == 429
        # another token's budget is its own
        other = post(client, TOKENS["bob"], "/v1/reports", {"reports": [fabricated(0, "bob")]})
        assert other.status_code == 200
        kept = sc.forget("otlp:alice").sessions
        assert 5 <= kept <= 6


def test_forgetting_a_tokens_otlp_source_removes_that_evidence_only(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    for n in range(4):
        assert post_traces(client, TOKENS["alice"], traces("alice", n)) == 200
    settle(sc, client)
    reports = [fabricated(n, "alice") for n in range(3)]
    assert post(client, TOKENS["alice"], "/v1/reports", {"reports": reports}).status_code == 200
    post(client, TOKENS["bob"], "/v1/reports", {"reports": [fabricated(0, "bob")]})
    assert verdict(sc) == "block"  # alice and bob: two tokens
    gone = post(client, OPERATOR, "/v1/sources/otlp:alice/forget", {})
    assert gone.status_code == 200 and gone.json()["sessions"] == 4
    assert _sources(sc) == {("alice", "bob")}  # alice's reports and bob's stay
    assert verdict(sc) == "block"
    # forgetting the token reaches what is left of it, whatever the route
    assert sc.forget("alice").sessions == 3
    assert verdict(sc) == "warn"


def test_source_names_and_trust() -> None:
    from sidecar.rules.standing import Standing
    from sidecar.trust.sources import is_trusted, token_of, witness

    trusted = frozenset({"local", "carol", "otlp:bob", "gateway:"})
    assert is_trusted("otlp:carol", trusted)  # the token is
    assert is_trusted("otlp:bob", trusted) and not is_trusted("bob", trusted)
    assert is_trusted("otlp:local", trusted)  # the home's own token
    assert not is_trusted("otlp:alice", trusted)
    assert not is_trusted("otlp", trusted)
    assert is_trusted("gateway:alice", trusted)  # "gateway:" named: every token's
    assert witness("otlp:alice") == "alice" and witness("alice") == "alice"
    # the agent chose the calls its gateway sessions show: its own witness
    assert witness("gateway:alice") == "alice"
    assert token_of("otlp:alice") == token_of("gateway:alice") == "alice"
    by_default = frozenset({"local", "carol", "gateway"})
    assert is_trusted("gateway", by_default) and is_trusted("gateway:carol", by_default)
    assert not is_trusted("gateway:alice", by_default)
    standing = Standing(trusted)
    assert not standing.independent({"alice", "otlp:alice"})  # one token, two routes
    assert not Standing(by_default).independent({"alice", "gateway:alice"})
    assert standing.independent({"alice", "otlp:bob"})
    # a contradiction from one other token by two routes does not count; by its
    # traces from a token that backs the rule, it does
    assert standing.against(["dave"], [("eve", 1.0), ("otlp:eve", 2.0)]).counted == ()
    assert standing.against(["dave"], [("otlp:dave", 1.0)]).counted == (1.0,)


def test_a_counted_contradiction_is_never_also_ignored() -> None:
    """Against a rule a trusted source backs, a trusted contradiction counts and is not
    among the ignored (nor are its sources); an untrusted one is ignored alone."""
    from sidecar.rules.standing import Standing

    standing = Standing(frozenset({"local", "ops"}))
    judged = standing.against(["local"], [("local", 1.0), ("alice", 2.0), ("ops", 3.0)])
    assert judged.counted == (1.0, 3.0)
    assert judged.ignored == 1 and judged.ignored_sources == ("alice",)
    judged = standing.against(["dave"], [("alice", 1.0), ("bob", 2.0)])
    assert judged.counted == (1.0, 2.0) and judged.ignored == 0


def test_a_token_may_not_be_named_as_another_tokens_route(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    for name in ("otlp:alice", "gateway:alice"):
        path.write_text(json.dumps({"tokens": [{"name": name, "token": "x" * 20}]}))
        with pytest.raises(ConfigError):
            Principals.load(path, OPERATOR)
    path.write_text(json.dumps({"tokens": [{"name": "a" * 64, "token": "x" * 20}]}))
    assert len(Principals.load(path, OPERATOR)) == 2
    # the longest token name's routes are source names too
    assert check_source(f"otlp:{'a' * 64}") and check_source(f"gateway:{'a' * 64}")
