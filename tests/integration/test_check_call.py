"""The check before a call on every surface: HTTP (`POST /v1/check` with steps and next),
the CLI (`sidecar check --steps FILE --next TOOL --args JSON`: exit 0 allow, 4 warn,
3 block) and MCP (`check_plan` with steps and next); and lookups with steps."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.shells.api import create_app
from tests.support.shop import (
    SUCCESSES,
    exchange,
    failing_session,
    good_session,
    lookup,
    teach,
)

SCRIPT = str(Path(sys.executable).with_name("sidecar"))
TOKEN = "check-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("check") / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=path) as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
        teach(sc)
    return path


def session(status: str) -> list[dict[str, Any]]:
    # four items: no failure was met on such an order, so only its status can matter
    return [lookup("#C9000", status, items=4)]


ARGS = {"order_id": "#C9000"}


@pytest.fixture(scope="module")
def client(home: Path) -> Iterator[TestClient]:
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=home) as sc,
        TestClient(create_app(sc, TOKEN), base_url="http://127.0.0.1") as c,
    ):
        yield c


def test_http(client: TestClient) -> None:
    def check(status: str) -> dict[str, Any]:
        body = {"steps": session(status), "next": {"tool": "exchange_items", "arguments": ARGS}}
        response = client.post("/v1/check", json=body, headers=AUTH)
        assert response.status_code == 200, response.text
        return dict(response.json())

    blocked = check("pending")
    assert blocked["decision"] == "block" and blocked["safe"] is False
    reason = blocked["reasons"][0]
    assert reason["kind"] == "call" and reason["level"] == "block"
    assert reason["pointer"].startswith("cold://chains/") and "status" in reason["explanation"]
    assert check("delivered")["decision"] == "allow"
    # the plan form keeps working beside it
    plan = client.post("/v1/check", json={"plan": ["get_order"]}, headers=AUTH).json()
    assert plan == {"safe": True, "collisions": []}
    both = client.post(
        "/v1/check",
        json={"plan": ["a"], "steps": [], "next": {"tool": "b"}},
        headers=AUTH,
    )
    assert both.status_code == 400 and both.json()["error"]["code"] == "invalid_input"
    neither = client.post("/v1/check", json={}, headers=AUTH)
    assert neither.status_code == 400
    found = client.post(
        "/v1/search",
        json={"query": "exchange items", "k": 2, "steps": session("pending")},
        headers=AUTH,
    ).json()
    warned = {h["tool_id"]: h["warnings"] for h in found["hits"]}
    assert any(w.startswith("may fail:") for w in warned["exchange_items"])


def cli(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing"}
    return subprocess.run(
        [SCRIPT, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )


def test_cli_exit_codes(home: Path, tmp_path: Path) -> None:
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps(session("pending")))
    args = ("check", "--steps", str(steps), "--next", "exchange_items", "--args")
    blocked = cli(home, *args, json.dumps(ARGS))
    assert blocked.returncode == 3, blocked.stderr
    assert (
        blocked.stdout.startswith("BLOCK: exchange_items(") and "audit: cold://" in blocked.stdout
    )
    steps.write_text(json.dumps({"steps": session("delivered"), "task_input": "swap my item"}))
    allowed = cli(home, *args, json.dumps(ARGS), "--json")
    assert allowed.returncode == 0, allowed.stderr
    answer = json.loads(allowed.stdout)
    assert {k: answer[k] for k in ("decision", "safe", "reasons")} == {
        "decision": "allow",
        "safe": True,
        "reasons": [],
    } and 0 <= answer["risk"]["probability"] <= 1
    stdin = cli(home, "check", "--steps", "-", "--next", "exchange_items", "--args",
                json.dumps(ARGS), stdin=json.dumps(session("pending")))  # fmt: skip
    assert stdin.returncode == 3
    bad = cli(home, "check", "--next", "exchange_items", "--args", "[1]")
    assert bad.returncode == 2 and "JSON object" in bad.stderr
    none = cli(home, "check")
    assert none.returncode == 2 and "--steps FILE [--next TOOL]" in none.stderr
    steps.write_text(json.dumps(session("pending")))
    found = cli(home, "search", "exchange items", "-k", "2", "--steps", str(steps), "--json")
    assert found.returncode == 0, found.stderr
    hits = {h["tool_id"]: h for h in json.loads(found.stdout)["hits"]}
    assert any(w.startswith("may fail:") for w in hits["exchange_items"]["warnings"])


def test_a_warn_exits_4(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        # one session beside the successes: warn-level evidence only
        sc.report_many([good_session(n) for n in range(SUCCESSES)])
        sc.report(failing_session(0))
    steps = tmp_path / "s.json"
    steps.write_text(json.dumps(session("pending")))
    proc = cli(home, "check", "--steps", str(steps), "--next", "exchange_items", "--args",
               json.dumps(ARGS))  # fmt: skip
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stdout.startswith("WARN: ")


def test_mcp(tmp_path: Path) -> None:
    from sidecar.shells.mcp_server import build_mcp

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
        teach(sc)
        server = build_mcp(sc)

        def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = asyncio.run(server.call_tool(name, arguments))
            assert not result.is_error, result
            return dict(result.structured_content or {})

        blocked = call(
            "check_plan",
            {"steps": session("pending"), "next": {"tool": "exchange_items", "arguments": ARGS}},
        )
        assert blocked["decision"] == "block" and blocked["reasons"][0]["pointer"]
        allowed = call(
            "check_plan",
            {"steps": session("delivered"), "next": {"tool": "exchange_items", "arguments": ARGS}},
        )
        assert allowed["decision"] == "allow"
        assert call("check_plan", {"plan": ["get_order"]})["safe"] is True
        found = call(
            "search_tools", {"query": "exchange items", "k": 2, "steps": session("pending")}
        )
        hits = {h["tool_id"]: h for h in found["hits"]}
        assert any(w.startswith("may fail:") for w in hits["exchange_items"]["warnings"])
        reported = call(
            "report_chain",
            {
                "report": {
                    "steps": [lookup("#M1", "pending"), exchange("#M1")],
                    "outcome": "completed",
                }
            },
        )
        assert reported["status"] == "recorded"


def test_one_constraint_on_every_surface(home: Path, client: TestClient) -> None:
    views = client.get("/v1/constraints", headers=AUTH).json()["constraints"]
    wanted = next(v for v in views if v["kind"] == "call")
    one = client.get(f"/v1/constraints/{wanted['chain_id']}", headers=AUTH).json()
    # one rule's view adds what it needs to block (the lists leave it out)
    assert wanted["to_block"] is None and isinstance(one["to_block"], int)
    assert {**one, "to_block": None} == wanted and one["condition"]["predicate"]["feature"]
    assert client.get(f"/v1/constraints/{'0' * 16}", headers=AUTH).status_code == 404
    assert client.get("/v1/constraints/nope", headers=AUTH).status_code == 400
    shown = cli(home, "constraints", "show", wanted["chain_id"], "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout) == one
    assert cli(home, "constraints", "show", "0" * 32).returncode == 5
