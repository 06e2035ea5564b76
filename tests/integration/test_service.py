"""The HTTP API in-process: every route's success and error shapes, auth, 413, Origin."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import InvalidInput, Sidecar
from sidecar.demo import demo_tools
from sidecar.errors import ConfigError
from sidecar.shells.api import create_app, serve, token_for
from tests.sidecar.helpers import abandoned

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FATAL = ["web_search", "html_parser", "llm_extractor"]


@pytest.fixture
def sc(tmp_path: Path) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "home", evict_min_chains=1
    ) as sidecar:
        sidecar.add_tools(demo_tools())
        yield sidecar


@pytest.fixture
def client(sc: Sidecar) -> Iterator[TestClient]:
    with TestClient(create_app(sc, TOKEN, max_body_bytes=64_000), base_url="http://127.0.0.1") as c:
        yield c


def assert_envelope(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    if code:
        assert body["error"]["code"] == code
    return body["error"]


ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/version", None),
    ("GET", "/metrics", None),
    ("GET", "/v1/tools", None),
    ("POST", "/v1/tools", {"tools": [{"name": "new_tool", "inputSchema": {}}]}),
    ("POST", "/v1/search", {"query": "weather", "k": 2}),
    ("POST", "/v1/check", {"plan": ["a", "b"]}),
    ("POST", "/v1/reports", {"reports": [{"topology": ["a", "b"], "outcome": "completed"}]}),
    ("GET", "/v1/constraints", None),
    ("GET", "/v1/archive/status", None),
    ("GET", "/v1/evictions/decision", None),
    ("POST", "/v1/evictions", {"dry_run": True}),
    ("POST", "/v1/evictions/recover", None),
    ("GET", "/v1/revocations", None),
    ("POST", "/v1/revocations/run", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_every_route_needs_the_token(
    client: TestClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    assert_envelope(client.request(method, path, json=body), 401, "unauthorized")
    wrong = {"Authorization": "Bearer nope"}
    assert_envelope(client.request(method, path, json=body, headers=wrong), 401)
    ok = client.request(method, path, json=body, headers=AUTH)
    assert ok.status_code == 200, ok.text


def test_liveness_needs_no_token(client: TestClient) -> None:
    assert client.get("/livez").json() == {"status": "ok"}


def test_readiness_answers_a_probe_and_shows_its_checks_to_a_token(
    client: TestClient, sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Kubernetes probe sends no token: it gets the status and ``ready`` alone; the
    checks (which name stores and their errors) only with a valid token."""
    assert (r := client.get("/readyz")).status_code == 200 and r.json() == {"ready": True}
    wrong = client.get("/readyz", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 200 and wrong.json() == {"ready": True}
    full = client.get("/readyz", headers=AUTH).json()
    assert full["ready"] is True and full["checks"]["hot_index"] == "ok"
    monkeypatch.setattr(sc.cold, "health", lambda: "not writable: disk full (/srv/cold)")
    down = client.get("/readyz")
    assert down.status_code == 503 and down.json() == {"ready": False}
    assert "/srv/cold" in client.get("/readyz", headers=AUTH).json()["checks"]["cold_store"]


def test_search_check_report_audit_shapes(client: TestClient) -> None:
    report = abandoned(FATAL, "HTTP 413", rule="R")
    out = client.post("/v1/reports", json={"reports": [report]}, headers=AUTH).json()
    [result] = out["results"]
    assert result["status"] == "archived"
    found = client.post(
        "/v1/search",
        json={"query": "extract prices from text", "k": 3, "after": FATAL[:2]},
        headers=AUTH,
    ).json()
    assert set(found) == {"hits", "withheld", "abstained"} and len(found["hits"]) == 3
    assert "llm_extractor" not in [h["tool_id"] for h in found["hits"]]
    checked = client.post("/v1/check", json={"plan": FATAL}, headers=AUTH).json()
    assert checked["safe"] is False
    assert checked["collisions"][0]["pointer"] == result["pointer"]
    record = client.get("/v1/audit", params={"pointer": result["pointer"]}, headers=AUTH).json()
    assert record["topology"] == FATAL
    digest = client.get("/v1/archive/digest", headers=AUTH).json()
    assert len(digest["digest"]) == 64 and digest["chains"] == 1
    evicted = client.post("/v1/evictions", json={}, headers=AUTH).json()
    assert {d["tool_id"] for d in evicted["evicted"]} == {"web_search", "html_parser"}
    restored = client.post(
        "/v1/tools/html_parser/restore", json={"reason": "fixed"}, headers=AUTH
    ).json()
    assert restored["tool_id"] == "html_parser"
    lifted = client.post(
        f"/v1/constraints/{result['chain_id']}/lift", json={"reason": "x"}, headers=AUTH
    ).json()
    assert lifted == {"chain_id": result["chain_id"], "status": "lifted"}
    metrics = client.get("/metrics", headers=AUTH).text
    assert 'sidecar_http_requests_total{method="POST",route="/v1/search",status="200"} 1' in metrics
    assert "sidecar_lookups_total 1" in metrics
    assert 'sidecar_revocation_mandates{status="pending"}' in metrics


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/v1/search", {"query": ""}, 422, "invalid_request"),
        ("POST", "/v1/search", {"query": "x", "k": 0}, 422, "invalid_request"),
        ("POST", "/v1/search", {"query": "x", "after": ["bad id"]}, 400, "invalid_input"),
        ("POST", "/v1/search", {"query": "x", "context": {"a": [1]}}, 422, "invalid_request"),
        ("POST", "/v1/search", {"query": "x", "filter": {"$nin": []}}, 422, "invalid_request"),
        ("POST", "/v1/search", [1, 2], 422, "invalid_request"),
        ("POST", "/v1/check", {"plan": ["a"], "mode": "fuzzy"}, 422, "invalid_request"),
        ("POST", "/v1/check", {"plan": ["a"] * 257}, 422, "invalid_request"),
        ("POST", "/v1/tools", {"tools": [{"nonsense": 1}]}, 400, "tool_format"),
        ("POST", "/v1/tools", {"tools": []}, 422, "invalid_request"),
        (
            "POST",
            "/v1/tools",
            {"tools": [{"tool_id": "t", "credentials": [{"ref": "AKIAIOSFODNN7EXAMPLE"}]}]},
            400,
            "secret_value",
        ),
        ("GET", "/v1/audit", None, 422, "invalid_request"),
        ("GET", "/v1/audit?pointer=s3://x", None, 400, "invalid_input"),
        ("GET", "/v1/audit?pointer=cold://chains/none", None, 404, "not_found"),
        ("GET", "/v1/archive/digest", None, 404, "empty_archive"),
        ("POST", "/v1/tools/nope/restore", {"reason": "r"}, 404, "not_found"),
        ("POST", f"/v1/constraints/{'0' * 32}/lift", {"reason": "r"}, 404, "not_found"),
        ("POST", "/v1/constraints/nope/lift", {"reason": "r"}, 400, "invalid_input"),
        ("GET", "/v1/revocations?status=weird", None, 422, "invalid_request"),
        ("GET", "/v1/nowhere", None, 404, "not_found"),
        ("DELETE", "/v1/search", None, 405, "method_not_allowed"),
    ],
)
def test_bad_requests_get_4xx_in_one_envelope(
    client: TestClient, method: str, path: str, body: Any, status: int, code: str
) -> None:
    assert_envelope(client.request(method, path, json=body, headers=AUTH), status, code)


def test_malformed_json_is_a_4xx(client: TestClient) -> None:
    response = client.post(
        "/v1/search", content=b"{not json", headers={**AUTH, "content-type": "application/json"}
    )
    assert_envelope(response, 422, "invalid_request")


def test_bodies_over_the_limit_get_413_before_being_read(client: TestClient) -> None:
    big = {"query": "x" * 70_000}
    assert_envelope(client.post("/v1/search", json=big, headers=AUTH), 413, "body_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"query": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}'

    response = client.post(
        "/v1/search", content=chunks(), headers={**AUTH, "content-type": "application/json"}
    )
    assert_envelope(response, 413, "body_too_large")


def test_an_eviction_in_progress_is_a_409(client: TestClient, sc: Sidecar) -> None:
    with sc.eviction.lock():
        assert_envelope(client.post("/v1/evictions", json={}, headers=AUTH), 409, "busy")


def test_mcp_checks_the_origin(client: TestClient) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {**AUTH, "accept": "application/json, text/event-stream"}
    evil = client.post("/mcp", json=init, headers={**headers, "origin": "http://evil.example"})
    assert evil.status_code == 403
    assert client.post("/mcp", json=init).status_code == 401  # the token guards MCP too
    good = client.post("/mcp", json=init, headers={**headers, "origin": "http://127.0.0.1:9"})
    assert good.status_code == 200, good.text


def test_openapi_describes_the_api(client: TestClient) -> None:
    spec = client.get("/openapi.json", headers=AUTH).json()
    for path in ("/v1/search", "/v1/check", "/v1/reports", "/v1/evictions", "/v1/audit"):
        assert path in spec["paths"]
    assert "SearchIn" in spec["components"]["schemas"]


def test_the_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SIDECAR_TOKEN", raising=False)
    token = token_for(tmp_path)
    path = tmp_path / "token"
    assert token and path.read_text().strip() == token
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert token_for(tmp_path) == token  # stable
    monkeypatch.setenv("SIDECAR_TOKEN", " from-env-0123456789\n")
    assert token_for(tmp_path) == "from-env-0123456789"  # as it is compared
    for blank in (" " * 16, "short"):
        monkeypatch.setenv("SIDECAR_TOKEN", blank)
        with pytest.raises(ConfigError, match="SIDECAR_TOKEN"):
            token_for(tmp_path)
    monkeypatch.delenv("SIDECAR_TOKEN")
    path.write_text("   \n")  # a token file emptied by hand: refused, not served without
    with pytest.raises(ConfigError, match="token file"):
        token_for(tmp_path)


def test_non_loopback_without_a_token_refuses_to_start(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIDECAR_TOKEN", raising=False)
    with pytest.raises(InvalidInput, match="without a token"):
        serve(sc, host="0.0.0.0", port=1)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("[::]", False),
        ("192.168.1.2", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    """What may serve without a token file made beforehand; an IPv6 address may be
    written as URLs write it (the rule the gateway has always had)."""
    from sidecar.shells.api.serve import is_loopback

    assert is_loopback(host) is loopback


def test_an_eviction_can_set_its_own_min_chains(client: TestClient, sc: Sidecar) -> None:
    sc.report({"topology": FATAL, "outcome": "abandoned", "failure": {"signature": "HTTP 413"},
               "constraint": {"rule": "too large"}})  # fmt: skip
    strict = client.post("/v1/evictions", json={"dry_run": True, "min_chains": 2}, headers=AUTH)
    assert strict.status_code == 200 and strict.json()["evicted"] == []
    reasons = {d["reason"] for d in strict.json()["kept_with_constraint"]}
    assert reasons == {"1 dead-end session(s) through it; eviction needs 2"}
    loose = client.post("/v1/evictions", json={"dry_run": True}, headers=AUTH).json()
    assert {d["tool_id"] for d in loose["evicted"]} == {"web_search", "html_parser"}
    # web_search's vault key, which no other tool holds: the real run's one mandate
    assert loose["mandates"] == 1
    for bad in (0, -3, "two", 1.5, True, "2"):
        response = client.post("/v1/evictions", json={"min_chains": bad}, headers=AUTH)
        assert_envelope(response, 422)


def test_the_decision_can_preview_another_min_chains(client: TestClient, sc: Sidecar) -> None:
    sc.report({"topology": FATAL, "outcome": "abandoned", "failure": {"signature": "HTTP 413"},
               "constraint": {"rule": "too large"}})  # fmt: skip

    def evicted(params: dict[str, Any]) -> set[str]:
        got = client.get("/v1/evictions/decision", params=params, headers=AUTH)
        assert got.status_code == 200, got.text
        return {d["tool_id"] for d in got.json()["decisions"] if d["action"] == "evict"}

    assert evicted({}) == {"web_search", "html_parser"}  # this fixture's setting: 1
    assert evicted({"min_chains": 2}) == set()
    for bad in ("0", "two", "-1"):
        response = client.get("/v1/evictions/decision", params={"min_chains": bad}, headers=AUTH)
        assert_envelope(response, 422)


def pending_exchange(n: int) -> dict[str, Any]:
    """A session whose exchange was refused on a pending order."""
    return {
        "steps": [
            {"tool": "get_order", "arguments": {"order_id": f"#W{n}"},
             "output": {"order_id": f"#W{n}", "status": "pending"}, "error": None},
            {"tool": "exchange", "arguments": {"order_id": f"#W{n}"}, "output": None,
             "error": "Error: Non-delivered order cannot be exchanged"},
        ],
        "outcome": "abandoned",
        "session_id": f"pending-{n}",
    }  # fmt: skip


def test_status_and_metrics_count_call_conditions(client: TestClient, sc: Sidecar) -> None:
    """The call conditions that checks enforce are counted beside the fatal sequences,
    as many as `constraints list` shows."""
    empty = client.get("/v1/archive/status", headers=AUTH).json()
    assert (empty["active_constraints"], empty["call_conditions"]) == (0, 0)
    sc.report_many([pending_exchange(1), pending_exchange(2)])
    sc.report(abandoned(FATAL, "HTTP 413"))
    listed = client.get("/v1/constraints", headers=AUTH).json()["constraints"]
    calls = [c for c in listed if c["kind"] == "call"]
    assert len(calls) >= 1 and len(listed) == len(calls) + 1
    status = client.get("/v1/archive/status", headers=AUTH).json()
    assert (status["active_constraints"], status["call_conditions"]) == (1, len(calls))
    metrics = client.get("/metrics", headers=AUTH).text.splitlines()
    assert f"sidecar_active_call_conditions {len(calls)}" in metrics
    assert "sidecar_active_constraints 1" in metrics
    # a lifted condition is no longer counted
    lifted = client.post(
        f"/v1/constraints/{calls[0]['chain_id']}/lift", json={"reason": "test"}, headers=AUTH
    )
    assert lifted.status_code == 200
    after = client.get("/v1/archive/status", headers=AUTH).json()
    assert after["call_conditions"] == len(calls) - 1


def test_the_docs_pages_load_nothing_from_elsewhere(client: TestClient) -> None:
    """/docs and /redoc (public, like the spec) name only this server's own assets, and
    those are served, without the token."""
    import re

    for page in ("/docs", "/redoc"):
        html = client.get(page)
        assert html.status_code == 200
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']|url: ?["']([^"']+)["']""", html.text)
        named = [u for pair in urls for u in pair if u]
        assert named and all(u.startswith("/") for u in named), named
        for url in named:
            assert client.get(url).status_code == 200, url
    from sidecar.shells.api.gate import is_public

    assert is_public("/docs/assets/swagger-ui.css") and not is_public("/docs/assets/../v1/tools")


def test_the_server_warms_up_what_a_lookup_needs_before_it_serves(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ready means ready to answer lookups: the index and the query graph, not the
    document graph that only adding tools runs (it loads on first use)."""
    asked: list[bool] = []

    class Started(Exception):
        pass

    class Embedder(HashingEmbedder):
        def warm(self, documents: bool = True) -> None:
            asked.append(documents)
            raise Started  # what the server does next is not this test's

    monkeypatch.setenv("SIDECAR_TOKEN", "serve-test-token-0123456789")
    monkeypatch.setattr(sc.hot, "_embedder", Embedder())
    with pytest.raises(Started):
        serve(sc, host="127.0.0.1", port=0)
    assert asked == [False]
