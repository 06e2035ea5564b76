"""The poisoning probes against a real ``sidecar serve`` with named tokens: one agent's
fabricated sessions never block, a second source does, ``sidecar forget`` undoes one,
and an agent may neither write a condition by hand nor act as an operator.  Tokens that
would let anyone in (blank, short, shared by two entries, one token with two roles, a
named tokens file that is missing) stop the server at start."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.sidecar.helpers import abandoned, completed
from tests.support.live import post, serving
from tests.support.shop import exchange, good_session, lookup
from tests.support.tokens import TOKENS, fabricated, tokens_file

BIN = Path(sys.executable).parent


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    yield from serving(home)


def decision(url: str, token: str) -> str:
    body = {"steps": [lookup("#C3000", "pending")],
            "next": {"tool": "exchange_items", "arguments": {"order_id": "#C3000"}}}  # fmt: skip
    answer = post(url, token, "/v1/check", body)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["decision"])


def test_poisoning_probes_on_a_running_server(server: tuple[str, Path, dict[str, str]]) -> None:
    url, home, env = server
    operator = (home / "token").read_text().strip()
    alice, bob = TOKENS["alice"], TOKENS["bob"]
    reports = [good_session(n) for n in range(20)]
    assert post(url, operator, "/v1/reports", {"reports": reports}).status_code == 200
    post(url, alice, "/v1/reports", {"reports": [fabricated(n, "alice") for n in range(4)]})
    assert decision(url, alice) == "warn"  # one untrusted source: never a block
    post(url, bob, "/v1/reports", {"reports": [fabricated(0, "bob")]})
    assert decision(url, alice) == "block"  # two sources
    # the CLI, beside the server, forgets one source through it
    forgot = subprocess.run(
        [str(BIN / "sidecar"), "forget", "--source", "bob", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert forgot.returncode == 0, forgot.stderr
    assert json.loads(forgot.stdout)["source"] == "bob"
    assert decision(url, alice) == "warn"
    # an agent writes no condition by hand, and is no operator
    condition = {"tool": "get_order", "signature": "Error: no",
                 "predicate": {"feature": "value:*", "op": "==", "value": "{}"}}  # fmt: skip
    hand = {**fabricated(9, "alice"), "constraint": {"conditions": [condition]}}
    (result,) = post(url, alice, "/v1/reports", {"reports": [hand]}).json()["results"]
    assert result["status"] == "rejected"
    refused = post(url, alice, "/v1/evictions", {})
    assert refused.status_code == 403
    # the token's name is no secret: the refusal says whose token it was
    assert "'alice' holds an agent token" in refused.json()["error"]["message"]
    # so does the refusal to attribute reports to another source (before, the message
    # read "the token '[REDACTED]'": the redaction of errors took the name for a token)
    borrowed = {"reports": [fabricated(8, "alice")], "source": "bob"}
    refused = post(url, alice, "/v1/reports", borrowed)
    assert refused.status_code == 403
    assert "'alice' holds an agent token" in refused.json()["error"]["message"]
    assert post(url, alice, "/v1/sources/alice/forget", {}).status_code == 403
    # over MCP too: an agent may not forget; the operator's forget restores the verdict
    post(url, bob, "/v1/reports", {"reports": [fabricated(1, "bob")]})
    assert decision(url, alice) == "block"
    refused = mcp_call(url, alice, "forget_source", {"source": "bob"})
    assert refused.is_error and "forbidden" in refused.content[0].text
    assert "'alice' holds an agent token" in refused.content[0].text
    assert decision(url, alice) == "block"
    forgot = mcp_call(url, operator, "forget_source", {"source": "bob"})
    assert not forgot.is_error and forgot.structured_content["source"] == "bob"
    assert decision(url, alice) == "warn"


def mcp_call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def once() -> Any:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with (
            http,
            streamable_http_client(f"{url}/mcp", http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            return await session.call_tool(tool, arguments)

    return asyncio.run(once())


def _entry(name: str, role: str, token: str) -> dict[str, str]:
    return {"name": name, "role": role, "token": token}


REAL = "a-real-token-0123456789"
BAD_TOKENS: dict[str, tuple[dict[str, str], list[dict[str, str]] | None, str]] = {
    # (environment, tokens file entries, what the refusal says)
    "SIDECAR_TOKEN of spaces": ({"SIDECAR_TOKEN": " " * 16}, None, "SIDECAR_TOKEN is empty"),
    "SIDECAR_TOKEN short once stripped": (
        {"SIDECAR_TOKEN": "  short-token  " + " " * 8},
        None,
        "SIDECAR_TOKEN has 11 characters",
    ),
    "a tokens-file entry of spaces": (
        {"SIDECAR_TOKEN": REAL},
        [_entry("ws", "agent", " " * 16)],
        "entry 0: 'token' is empty",
    ),
    "a tokens-file entry short once stripped": (
        {"SIDECAR_TOKEN": REAL},
        [_entry("pad", "agent", "      padded-short      ")],  # 24 with its spaces
        "entry 0: 'token' has 12 characters",
    ),
    "one token, two roles": (
        {"SIDECAR_TOKEN": REAL},
        [_entry("a", "agent", "y" * 20), _entry("b", "operator", "y" * 20 + "  ")],
        "'a' and 'b' are one token with two roles",
    ),
    "one token in two entries": (
        {"SIDECAR_TOKEN": REAL},
        [_entry("a", "agent", "y" * 20), _entry("b", "agent", "y" * 20)],
        "'a' and 'b' are the same token",
    ),
    "the operator's token in the tokens file": (
        {"SIDECAR_TOKEN": REAL},
        [_entry("a", "agent", REAL)],
        "'local' and 'a' are one token with two roles",
    ),
    "a named tokens file that is missing": (
        {"SIDECAR_TOKEN": REAL, "SIDECAR_TOKENS_FILE": "/nonexistent/tokens.json"},
        None,
        "tokens_file: /nonexistent/tokens.json is not a file",
    ),
}


@pytest.mark.parametrize("case", list(BAD_TOKENS))
def test_tokens_that_would_let_anyone_in_stop_the_server_at_start(
    tmp_path: Path, case: str
) -> None:
    """Before: a blank token was stripped only once compared, so an empty ``Authorization:
    Bearer`` was the operator (or the blank entry's agent); a duplicate token was the
    first entry's, whatever role the second gave it; a named tokens file that was missing
    was ignored and the server ran with the operator's token alone."""
    extra, entries, says = BAD_TOKENS[case]
    home = tmp_path / "home"
    home.mkdir()
    if entries is not None:
        (home / "tokens.json").write_text(json.dumps({"tokens": entries}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env |= {"SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing", **extra}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(BIN / "sidecar"), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None:
            assert time.monotonic() < deadline, "neither served nor stopped"
            try:
                httpx.get(f"{url}/livez", timeout=2)
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            # it serves: show what an empty bearer gets
            empty = httpx.post(
                f"{url}/v1/evictions", json={"dry_run": True}, headers={"Authorization": "Bearer"}
            )
            pytest.fail(f"served; an empty bearer got HTTP {empty.status_code} {empty.text[:120]}")
    finally:
        if proc.poll() is None:
            proc.terminate()
        stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 2, stderr  # ConfigError's exit code
    assert says and says in stderr, stderr
    assert not (home / "server.json").exists()


# ---- rules: whose evidence makes them, and whose contests them ---------------------------
OPS = "ops-token-0123456789abcdef"
SHOP_TOOLS = ("get_order", "exchange_items")


@pytest.fixture
def with_operator(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """A server whose tokens file names two agents and an operator of its own ("ops")."""
    home = tmp_path / "home"
    home.mkdir()
    entries = [
        _entry("alice", "agent", TOKENS["alice"]),
        _entry("bob", "agent", TOKENS["bob"]),
        _entry("ops", "operator", OPS),
    ]
    (home / "tokens.json").write_text(json.dumps({"tokens": entries}))
    yield from serving(home)


def plan(url: str, token: str, tools: list[str]) -> dict[str, Any]:
    answer = post(url, token, "/v1/check", {"plan": tools})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def reported(url: str, token: str, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answer = post(url, token, "/v1/reports", {"reports": reports})
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    assert all(r["status"] != "rejected" for r in results), results
    return results


def shown(env: dict[str, str], chain_id: str) -> dict[str, Any]:
    """``sidecar constraints show`` beside the server, as an operator reads it."""
    done = subprocess.run(
        [str(BIN / "sidecar"), "constraints", "show", chain_id, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_an_agent_neither_contests_nor_retires_what_an_operator_taught(
    with_operator: tuple[str, Path, dict[str, str]],
) -> None:
    """The operator's token teaches a learned condition and a fatal sequence, both
    blocking; four successes from one agent's token matching each are recorded, shown
    and counted in /metrics, and change no verdict.  The operator's own success does."""
    url, _home, env = with_operator
    alice = TOKENS["alice"]
    reported(url, OPS, [good_session(n) for n in range(20)])
    reported(url, OPS, [fabricated(n, "ops") for n in range(3)])
    (chain,) = reported(url, OPS, [abandoned(["a", "b"], "HTTP 400 bad")])
    assert decision(url, alice) == "block" and not plan(url, alice, ["a", "b"])["safe"]
    fakes = [
        {"steps": [lookup(f"#M{n}", "pending"), exchange(f"#M{n}")],
         "outcome": "completed", "session_id": f"mallory-{n}"}
        for n in range(4)
    ]  # fmt: skip
    fakes += [{**completed(["a", "b"]), "session_id": f"mallory-chain-{n}"} for n in range(4)]
    reported(url, alice, fakes)
    assert decision(url, alice) == "block"
    checked = plan(url, alice, ["a", "b"])
    assert not checked["safe"] and not checked.get("warnings")
    sequence = shown(env, chain["chain_id"])
    assert sequence["status"] == "active" and sequence["contradictions"] == 0
    assert sequence["ignored_contradictions"] == 4 and sequence["sources"] == ["ops"]
    views = httpx.get(
        f"{url}/v1/constraints", headers={"Authorization": f"Bearer {OPS}"}, timeout=60
    ).json()["constraints"]
    (condition,) = [v for v in views if v["kind"] == "call" and "pending" in v["rule"]]
    assert condition["status"] == "active" and condition["ignored_contradictions"] >= 4
    metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {OPS}"}, timeout=60)
    (ignored,) = [
        line
        for line in metrics.text.splitlines()
        if line.startswith("sidecar_contradictions_ignored ")
    ]
    assert float(ignored.split()[1]) >= 8
    # evidence of equal standing does contest: the operator's own success
    reported(url, OPS, [{**completed(["a", "b"]), "session_id": "ops-chain"}])
    checked = plan(url, alice, ["a", "b"])
    assert checked["safe"] and checked["warnings"]
    assert shown(env, chain["chain_id"])["status"] == "contested"


def test_a_fatal_sequence_needs_two_sources_or_a_trusted_one(
    with_operator: tuple[str, Path, dict[str, str]],
) -> None:
    """One abandoned chain from one agent's token warns its own agent and blocks
    nothing (another agent is not even warned: one untrusted source's word); the same
    failure from a second token blocks; the operator's alone blocks.  Every sequence
    names its sources in ``sidecar constraints show``."""
    url, _home, env = with_operator
    alice, bob = TOKENS["alice"], TOKENS["bob"]
    fatal = ["search_api", "html_parser", "llm_extractor"]
    # an agent's chains name the catalog's tools (one naming a tool in no catalog is
    # rejected: tests/sidecar/test_quota.py)
    tools = [{"tool_id": t, "description": t.replace("_", " ")} for t in fatal]
    assert post(url, OPS, "/v1/tools", {"tools": tools}).status_code == 200
    (first,) = reported(url, alice, [abandoned(fatal, "HTTP 413", session_id="a1")])
    checked = plan(url, alice, fatal)
    assert checked["safe"] and checked["warnings"]  # warned, not blocked
    checked = plan(url, bob, fatal)
    assert checked["safe"] and not checked.get("warnings")
    view = shown(env, first["chain_id"])
    assert view["sources"] == ["alice"] and view["independent"] is False
    reported(url, bob, [abandoned(fatal, "HTTP 413", session_id="b1")])
    assert not plan(url, alice, fatal)["safe"]
    view = shown(env, first["chain_id"])
    assert view["sources"] == ["alice", "bob"] and view["independent"] is True
    other = ["fetch_page", "summarize"]
    (alone,) = reported(url, OPS, [abandoned(other, "HTTP 413")])
    assert not plan(url, alice, other)["safe"]
    assert shown(env, alone["chain_id"])["sources"] == ["ops"]


def test_an_agents_runs_of_an_operators_fatal_sequence_do_not_stop_its_eviction(
    with_operator: tuple[str, Path, dict[str, str]],
) -> None:
    """The operator's dead end drives an eviction; one agent's fabricated completed runs
    of that very sequence (as topologies and as steps) are ignored as contradictions
    and keep neither tool in the hot index."""
    url, _home, _env = with_operator
    tools = [{"tool_id": t, "description": f"the {t} step"} for t in ("fetch", "parse", "emit")]
    assert post(url, OPS, "/v1/tools", {"tools": tools}).status_code == 200
    reported(url, OPS, [abandoned(["fetch", "parse", "emit"], "HTTP 413", session_id="ops")])
    steps = [{"tool": t, "arguments": {"n": n}, "output": {"ok": n}}
             for n, t in enumerate(["fetch", "parse", "emit"])]  # fmt: skip
    fakes = [{**completed(["fetch", "parse", "emit"]), "session_id": f"m{n}"} for n in range(3)]
    fakes.append({"steps": steps, "outcome": "completed", "session_id": "m-steps"})
    reported(url, TOKENS["alice"], fakes)
    answer = post(url, OPS, "/v1/evictions", {"min_chains": 1})
    assert answer.status_code == 200, answer.text
    assert {d["tool_id"] for d in answer.json()["evicted"]} == {"fetch", "parse"}


def test_an_agent_reads_its_own_archive_and_only_verdicts_of_others(
    with_operator: tuple[str, Path, dict[str, str]],
) -> None:
    """alice's sessions hold her address and her order ids: bob's token lists her rules
    as verdicts (no values, texts, pointers or sources) and may not audit her record;
    her token and the operator's read it whole."""
    url, _home, _env = with_operator
    alice, bob = TOKENS["alice"], TOKENS["bob"]
    private = "ship to 12 Rue des Lilas"
    tools = [{"tool_id": t, "description": t.replace("_", " ")} for t in SHOP_TOOLS]
    assert post(url, OPS, "/v1/tools", {"tools": tools}).status_code == 200
    # successes to contrast her failures with: a rule never seen beside one is likely
    # by chance, and shows nothing to anyone
    reported(url, OPS, [good_session(n) for n in range(20)])
    reports = [{**fabricated(n, "alice"), "task_input": private} for n in range(2)]
    reported(url, alice, reports)

    def rules(token: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{url}/v1/constraints", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        return [r for r in answer.json()["constraints"] if r["kind"] == "call"]

    own = rules(alice)
    assert own and all(r["pointer"] and r["sources"] == ["alice"] for r in own)
    theirs = rules(bob)
    assert [r["chain_id"] for r in theirs] == [r["chain_id"] for r in own]
    assert "#A500" not in json.dumps(theirs) and "Non-delivered" not in json.dumps(theirs)
    assert all(r["pointer"] is None and r["sources"] == [] for r in theirs)

    def audit(token: str) -> httpx.Response:
        return httpx.get(
            f"{url}/v1/audit", params={"pointer": own[0]["pointer"]},
            headers={"Authorization": f"Bearer {token}"}, timeout=60,
        )  # fmt: skip

    refused = audit(bob)
    assert refused.status_code == 403 and private not in refused.text
    assert "own sessions" in refused.json()["error"]["message"]
    assert private in audit(alice).text and private in audit(OPS).text
    # bob's check of the same call: the rule as a verdict, in the sidecar's words
    body = {"steps": [lookup("#C3000", "pending")],
            "next": {"tool": "exchange_items", "arguments": {"order_id": "#C3000"}}}  # fmt: skip
    answer = post(url, bob, "/v1/check", body).json()
    assert "Non-delivered" not in json.dumps(answer)
    assert all(r["pointer"] is None and not r["quoted"] for r in answer["reasons"])
    # an agent may not ask for another's wording; an operator may
    asked = post(url, bob, "/v1/check", {**body, "viewer": "alice"})
    assert asked.status_code == 403
    as_alice = post(url, OPS, "/v1/check", {**body, "viewer": "alice"}).json()
    assert any("Non-delivered" in r["quoted"].get("failure", "") for r in as_alice["reasons"])


def test_runs_that_contradict_nothing_keep_no_tool_of_an_operators_dead_end(
    with_operator: tuple[str, Path, dict[str, str]],
) -> None:
    """alice's completed session through fetch alone, a run of unknown outcome and a
    success inside an abandoned session contradict nothing: the operator's dead end still
    evicts both prefix tools."""
    url, _home, _env = with_operator
    tools = [{"tool_id": t, "description": f"the {t} step"} for t in ("fetch", "parse", "emit")]
    assert post(url, OPS, "/v1/tools", {"tools": tools}).status_code == 200
    reported(url, OPS, [abandoned(["fetch", "parse", "emit"], "HTTP 413", session_id="ops")])

    def step(tool: str, error: str | None = None) -> dict[str, Any]:
        return {"tool": tool, "arguments": {"n": 1}, "output": None if error else {"ok": 1},
                "error": error}  # fmt: skip

    runs = [
        {"steps": [step("fetch")], "outcome": "completed", "session_id": "m1"},
        {"steps": [step("parse")], "outcome": "unknown", "session_id": "m2"},
        {"steps": [step("fetch"), step("emit", "Error: no")], "outcome": "abandoned",
         "session_id": "m3"},
    ]  # fmt: skip
    reported(url, TOKENS["alice"], runs)
    answer = post(url, OPS, "/v1/evictions", {"min_chains": 1})
    assert answer.status_code == 200, answer.text
    assert {d["tool_id"] for d in answer.json()["evicted"]} == {"fetch", "parse"}, answer.text


CREW = {f"agent{n}": f"agent{n}-token-0123456789" for n in range(4)}


@pytest.fixture
def crew(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """A server with four agent tokens and an operator."""
    home = tmp_path / "home"
    home.mkdir()
    entries = [_entry(name, "agent", token) for name, token in CREW.items()]
    (home / "tokens.json").write_text(
        json.dumps({"tokens": [*entries, _entry("ops", "operator", OPS)]})
    )
    yield from serving(home)


def test_agents_acting_together_move_a_tool_no_more_than_one_of_them(
    crew: tuple[str, Path, dict[str, str]],
) -> None:
    """Each agent token reports sessions that say an unrelated tool served an e-mail
    request (and that the e-mail tool failed it): four tokens together move the tools
    for everyone exactly as far as one alone."""
    url, _home, _env = crew
    request = "send an email to my colleague with the quarterly report"
    tools = [
        {"tool_id": f"t{n:02d}", "description": f"does task number {n} of the office"}
        for n in range(30)
    ] + [
        {"tool_id": "email_send", "description": "send an email with an attachment"},
        {"tool_id": "weather_now", "description": "the current weather for a city"},
    ]
    assert post(url, OPS, "/v1/tools", {"tools": tools}).status_code == 200

    def ranking() -> list[str]:
        answer = post(url, OPS, "/v1/search", {"query": request, "k": 32})
        assert answer.status_code == 200, answer.text
        return [h["tool_id"] for h in answer.json()["hits"]]

    def session(who: str, n: int) -> dict[str, Any]:
        steps = [{"tool": "t17", "arguments": {"city": "Oslo"}, "output": {"t": 3}}]
        return {"steps": steps, "outcome": "completed", "task_input": request,
                "session_id": f"{who}-{n}"}  # fmt: skip

    sinking = {"steps": [{"tool": "email_send", "arguments": {"to": "x@example.com"},
                          "error": "Error: recipient not allowed"}],
               "outcome": "abandoned", "task_input": request}  # fmt: skip
    before = ranking()
    names = list(CREW)
    reported(url, CREW[names[0]], [session(names[0], n) for n in range(4)])
    reported(url, CREW[names[0]], [{**sinking, "session_id": f"{names[0]}-x"}])
    one = ranking()
    assert one.index("t17") < before.index("t17")  # one agent's usage moves it, capped
    for who in names[1:]:
        reported(url, CREW[who], [session(who, n) for n in range(4)])
        reported(url, CREW[who], [{**sinking, "session_id": f"{who}-x"}])
    assert ranking() == one  # three more agents add nothing
