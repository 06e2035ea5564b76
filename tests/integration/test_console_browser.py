"""The operator's console in a real browser with no network: headless Chromium
(Debian's ``chromium``, installed with apt when missing) driven by Playwright, which
launches that binary and downloads nothing, against a real ``sidecar serve`` with the
demo data, every host but the loopback unresolvable.  Each page is saved as a PNG under
the test's temporary folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.demo import ABANDONED
from tests.support.browser import OFFLINE, chromium
from tests.support.console import OPS, console_home
from tests.support.live import Server
from tests.support.shop import good_session
from tests.support.tokens import TOKENS, fabricated

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
PAGES = ["overview", "rules", "tools", "sources", "sessions", "review"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server on the demo catalog, with the demo's abandoned chain and what two agents
    and the operator reported through the API."""
    home = console_home(tmp_path_factory.mktemp("console"))
    Sidecar.open(embedder=HashingEmbedder(), home=home).close()
    srv = Server(home, "--demo-if-empty")
    tools = [
        {"tool_id": "get_order", "description": "look up an order"},
        {"tool_id": "exchange_items", "description": "exchange items"},
    ]
    reports = [
        (srv.token, {"tools": tools}, "/v1/tools"),
        (srv.token, {"reports": [ABANDONED, *(good_session(n) for n in range(20))]}, None),
        (TOKENS["alice"], {"reports": [fabricated(n, "alice") for n in range(4)]}, None),
        (TOKENS["bob"], {"reports": [fabricated(0, "bob")]}, None),
    ]
    for token, body, route in reports:
        answer = httpx.post(
            f"{srv.url}{route or '/v1/reports'}",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    binary = chromium()
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(
            executable_path=binary,
            args=["--no-sandbox", "--disable-gpu", f"--host-resolver-rules={OFFLINE}"],
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    opened = context.new_page()
    yield opened
    context.close()


def api(srv: Server, path: str) -> Any:
    answer = httpx.get(f"{srv.url}{path}", headers=srv.headers, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def sign_in(page: Any, srv: Server, token: str) -> None:
    page.goto(f"{srv.url}/console/sign-in")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def test_an_operator_signs_in_and_every_page_renders_offline(
    page: Any, served: Server, tmp_path: Path
) -> None:
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(request.url))
    sign_in(page, served, OPS)
    assert page.url.endswith("/console/overview")
    assert page.inner_text("#operator") == "ops"
    for name in PAGES:
        page.goto(f"{served.url}/console/{name}")
        assert page.locator("main h1").count() == 1, name
        page.screenshot(path=str(tmp_path / f"console-{name}.png"), full_page=True)
    assert failed == []  # the stylesheet and everything else came from the server
    color = page.evaluate("getComputedStyle(document.querySelector('header')).backgroundColor")
    assert color == "rgb(255, 255, 255)"  # the stylesheet applied
    assert (tmp_path / "console-overview.png").stat().st_size > 0


def test_the_rules_page_shows_the_ids_the_api_returns(
    page: Any, served: Server, tmp_path: Path
) -> None:
    sign_in(page, served, OPS)
    page.goto(f"{served.url}/console/rules")
    shown = page.eval_on_selector_all("tr[data-rule]", "rows => rows.map(r => r.dataset.rule)")
    listed = api(served, "/v1/constraints?include_lifted=true")["constraints"]
    assert shown == [c["chain_id"] for c in listed][:50] and shown
    page.goto(f"{served.url}/console/overview")
    assert int(page.inner_text("#rules-total")) == len(listed)
    rule = shown[0]
    page.goto(f"{served.url}/console/rules/{rule}")
    page.screenshot(path=str(tmp_path / "console-rule.png"), full_page=True)
    assert page.inner_text("#rule-id") == rule


def test_a_rule_lifted_in_the_console_is_lifted_in_the_api(page: Any, served: Server) -> None:
    sign_in(page, served, OPS)
    rule = next(c for c in api(served, "/v1/constraints")["constraints"] if c["kind"] == "sequence")
    page.goto(f"{served.url}/console/rules/{rule['chain_id']}")
    page.fill("#lift input[name=reason]", "the extractor's timeout was raised")
    page.click("#lift button")
    page.wait_for_load_state()
    assert page.inner_text("#rule-status") == "lifted"
    assert api(served, f"/v1/constraints/{rule['chain_id']}")["status"] == "lifted"
    assert "(by ops)" in page.inner_text("#history")
    page.fill("#reinstate input[name=reason]", "it timed out again")
    page.click("#reinstate button")
    page.wait_for_load_state()
    assert api(served, f"/v1/constraints/{rule['chain_id']}")["status"] == "active"


def _figures(page: Any, block: str) -> dict[str, str]:
    names = ("sessions", "conditions", "constraints", "tools", "restored")
    return {n: page.inner_text(f"#{block} dd.{n}") for n in names}


def test_a_forget_previewed_then_confirmed_does_what_the_preview_said(
    page: Any, served: Server, tmp_path: Path
) -> None:
    sign_in(page, served, OPS)
    page.goto(f"{served.url}/console/sources/alice")
    page.click("#preview button")
    page.wait_for_load_state()
    page.screenshot(path=str(tmp_path / "console-forget-preview.png"), full_page=True)
    previewed = _figures(page, "previewed")
    assert int(previewed["sessions"]) >= 4
    page.click("#confirm button")
    page.wait_for_load_state()
    assert _figures(page, "result") == previewed
    assert "changed what the preview said" in page.inner_text("#same")
    page.goto(f"{served.url}/console/sources/alice")
    page.click("#preview button")  # nothing of alice's is left to forget
    page.wait_for_load_state()
    assert _figures(page, "previewed")["sessions"] == "0"


def test_an_agent_token_is_refused_and_sees_no_operator_data(page: Any, served: Server) -> None:
    sign_in(page, served, TOKENS["alice"])
    assert page.inner_text("main h1") == "The console is for operators"
    for name in ("rules", "sources/bob"):
        page.goto(f"{served.url}/console/{name}")
        assert page.url.endswith("/console/sign-in")
        assert page.locator("tr[data-rule]").count() == 0


def test_a_held_destructive_call_approved_in_the_console_runs_once_with_its_arguments(
    page: Any, served: Server
) -> None:
    """``sidecar gateway`` beside the server, holding destructive calls: the agent's
    refund is held; an operator approves it in the console; the agent's retry is
    forwarded once, with exactly the approved arguments, and the next one is held."""
    import subprocess
    import sys
    import threading

    import anyio

    from tests.agents.gateway.conftest import mcp_session, text_of

    bank = str(Path(__file__).parents[1] / "agents" / "gateway" / "bank_server.py")
    env = {**served.env, "SIDECAR_TOKEN": served.token, "SIDECAR_GATEWAY_APPROVAL": "destructive"}
    gateway = subprocess.Popen(
        [str(Path(sys.executable).with_name("sidecar")), "gateway", "--port", "0",
         f"bank={sys.executable} {bank}"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert gateway.stderr is not None
    said = gateway.stderr.readline()
    assert said.startswith("sidecar gateway serving "), said
    url = said.split()[3]

    def refund(amount: int) -> Any:
        """One call of the agent, from a thread of its own (Playwright drives this one)."""
        out: list[Any] = []

        async def call() -> None:
            async with mcp_session(url, served.token) as s:
                out.append(await s.call_tool("refund", {"customer": "alice", "amount": amount}))

        worker = threading.Thread(target=anyio.run, args=(call,))
        worker.start()
        worker.join(120)
        return out[0]

    try:
        held = refund(40)
        assert held.is_error and "Held for approval" in text_of(held)
        sign_in(page, served, OPS)
        page.goto(f"{served.url}/console/review")
        row = page.locator("#approvals tr[data-approval]")
        assert row.count() == 1 and '"amount": 40' in row.inner_text()
        approval = row.get_attribute("data-approval")
        row.locator("button", has_text="Approve").click()
        page.wait_for_load_state()
        assert f"{approval} approved" in page.inner_text("#done")
        other = refund(4000)  # other arguments: another approval, not run
        ran = refund(40)
        once = refund(40)
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)
        gateway.stderr.close()
    assert other.is_error and "Held for approval" in text_of(other)
    assert not ran.is_error
    assert ran.structured_content["refunds_so_far"] == [{"customer": "alice", "amount": 40}]
    assert once.is_error and "Held for approval" in text_of(once)
    statuses = {a["approval_id"]: a["status"] for a in api(served, "/v1/approvals")["approvals"]}
    assert statuses[approval] == "used"
    [used] = [a for a in api(served, "/v1/approvals")["approvals"] if a["approval_id"] == approval]
    assert used["decided_by"] == "ops"


def _post(srv: Server, token: str, path: str, body: Any) -> Any:
    answer = httpx.post(
        f"{srv.url}{path}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def _chain(topology: list[str], failure: str, session: str) -> dict[str, Any]:
    rule = {"rule": f"after {topology[0]}, {topology[-1]} fails", "when": [], "gapped": False}
    return {"topology": topology, "outcome": "abandoned", "failure": {"signature": failure},
            "constraint": rule, "session_id": session}  # fmt: skip


def _report(srv: Server, who: str, chain: dict[str, Any]) -> None:
    (result,) = _post(srv, TOKENS[who], "/v1/reports", {"reports": [chain]})["results"]
    assert result["status"] == "archived", result


def test_why_a_call_was_refused_who_taught_it_and_what_forgetting_would_change(
    page: Any, served: Server, tmp_path: Path
) -> None:
    """From the console alone: the overview's newest refusal leads to its session, the
    session to the rule that refused the call, the rule to the agents that taught it,
    and an agent's page to what forgetting it would change (previewed, nothing done)."""
    topology = ["csv_parser", "table_extractor"]
    failure = "table_extractor: HTTP 400 bad request, no header row"
    for who in ("alice", "bob"):  # two agents: the rule may block
        _report(served, who, _chain(topology, failure, "t1"))
    steps = [{"tool": "csv_parser", "arguments": {"path": "q3.csv"}, "output": {"rows": 9}}]
    check = {"steps": steps, "next": {"tool": "table_extractor", "arguments": {"rows": 9}},
             "session_id": "why-1"}  # fmt: skip
    verdict = _post(served, TOKENS["bob"], "/v1/check", check)
    assert verdict["decision"] == "block"
    (rule,) = {r["constraint_id"] for r in verdict["reasons"]}
    sign_in(page, served, OPS)
    page.goto(f"{served.url}/console/overview")
    page.screenshot(path=str(tmp_path / "console-overview.png"), full_page=True)
    refusal = page.locator("#refusals tr[data-refusal]").first
    assert "table_extractor" in refusal.inner_text()
    refusal.locator("a", has_text="its session").click()
    page.wait_for_load_state()
    assert page.inner_text("#session-key") == "src:bob/session:why-1"
    page.screenshot(path=str(tmp_path / "console-session.png"), full_page=True)
    blocked = page.locator("#decisions tr[data-verdict=block]")
    assert "table_extractor" in blocked.inner_text()
    blocked.locator(f"a[href='/console/rules/{rule}']").click()
    page.wait_for_load_state()
    assert page.inner_text("#rule-id") == rule
    sources = page.eval_on_selector_all(
        "dd a[href^='/console/sources/']", "l => l.map(a => a.textContent)"
    )
    assert (
        sorted(sources)
        == ["alice", "bob"]
        == sorted(api(served, f"/v1/constraints/{rule}")["sources"])
    )
    page.click("dd a[href='/console/sources/alice']")
    page.wait_for_load_state()
    page.click("#preview button")
    page.wait_for_load_state()
    assert int(page.inner_text("#previewed dd.sessions")) >= 1  # what forgetting would remove
    assert api(served, f"/v1/constraints/{rule}")["status"] == "active"  # nothing was done


def test_a_rule_one_agent_taught_waits_in_review_until_confirmed_there(
    page: Any, served: Server, tmp_path: Path
) -> None:
    topology = ["pdf_text_extractor", "entity_recognizer"]
    _report(served, "alice", _chain(topology, "entity_recognizer: 413 payload too large", "c1"))
    plan = {"plan": topology}
    assert _post(served, TOKENS["bob"], "/v1/check", plan)["safe"]  # one agent: it warns
    sign_in(page, served, OPS)
    page.goto(f"{served.url}/console/review")
    page.screenshot(path=str(tmp_path / "console-review.png"), full_page=True)
    waiting = {c["chain_id"] for c in api(served, "/v1/constraints")["constraints"]
               if not c["independent"] and c["judged"] is None}  # fmt: skip
    shown = page.eval_on_selector_all(
        "#unconfirmed tr[data-rule]", "r => r.map(x => x.dataset.rule)"
    )
    assert set(shown) == waiting and shown
    (rule,) = [c for c in waiting if api(served, f"/v1/constraints/{c}")["sequence"] == topology]
    row = page.locator(f"#unconfirmed tr[data-rule='{rule}']")
    row.locator("form", has_text="Confirm").locator("input[name=reason]").fill("seen in production")
    row.locator("button", has_text="Confirm").click()
    page.wait_for_load_state()
    assert page.inner_text("#rule-judged") == "confirmed by ops"
    assert api(served, f"/v1/constraints/{rule}")["judged"] == "confirmed"
    assert not _post(served, TOKENS["bob"], "/v1/check", plan)["safe"]  # now it blocks
