"""The operator's console over HTTP: signing in (operators only, a session cookie that
is not the token), forms refused without their CSRF token, every page for an empty home
and for the demo data, each page's ids and counts equal to the API's, server-side
pages, and the actions round-tripping through the library."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.demo import ABANDONED
from sidecar.shells.api import create_app
from tests.sidecar.helpers import abandoned, completed
from tests.support.console import (
    OPS,
    console_home,
    cookie_headers,
    csrf,
    fill,
    rows,
    sign_in,
    text_of,
)
from tests.support.shop import failing_session, good_session, lookup
from tests.support.tokens import TOKENS, verdict

HOME_TOKEN = "home-token-0123456789abcdef"
PAGES = ["overview", "rules", "tools", "sources", "sources/local", "sessions", "review"]


@pytest.fixture
def empty(tmp_path: Path) -> Iterator[tuple[Sidecar, TestClient]]:
    with Sidecar.open(embedder=HashingEmbedder(), home=console_home(tmp_path)) as sc:
        app = create_app(sc, HOME_TOKEN, with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield sc, client


@pytest.fixture
def demo(empty: tuple[Sidecar, TestClient]) -> tuple[Sidecar, TestClient]:
    fill(empty[0])
    return empty


def _api(client: TestClient, path: str) -> Any:
    answer = client.get(path, headers={"Authorization": f"Bearer {HOME_TOKEN}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


# ---- signing in ------------------------------------------------------------------------


def test_signing_in_keeps_a_session_cookie_that_is_not_the_token(
    empty: tuple[Sidecar, TestClient],
) -> None:
    _sc, client = empty
    answer = sign_in(client, HOME_TOKEN)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/overview"
    (session,) = [c for c in cookie_headers(answer) if c.startswith("sidecar_console=")]
    flags = [f.strip().lower() for f in session.split(";")]
    assert "httponly" in flags and "samesite=strict" in flags and "path=/console" in flags
    assert "max-age=28800" in flags  # it expires (8 h)
    assert "secure" not in flags  # served over http here
    assert HOME_TOKEN not in session
    page = client.get("/console/overview")
    assert page.status_code == 200 and text_of(page.text, "operator") == "local"
    for header in ("content-security-policy", "x-frame-options"):
        assert header in page.headers


def test_the_cookie_is_secure_over_https(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=console_home(tmp_path)) as sc:
        app = create_app(sc, HOME_TOKEN, with_mcp=False)
        with TestClient(app, base_url="https://127.0.0.1") as client:
            answer = sign_in(client, OPS)
    (session,) = [c for c in cookie_headers(answer) if c.startswith("sidecar_console=")]
    assert "secure" in [f.strip().lower() for f in session.split(";")]


def test_a_named_operator_token_signs_in_under_its_name(
    empty: tuple[Sidecar, TestClient],
) -> None:
    _sc, client = empty
    assert sign_in(client, OPS).status_code == 303
    assert text_of(client.get("/console/rules").text, "operator") == "ops"


def test_a_wrong_token_or_a_form_without_its_nonce_is_refused(
    empty: tuple[Sidecar, TestClient],
) -> None:
    _sc, client = empty
    wrong = sign_in(client, "not-a-token-of-this-sidecar")
    assert wrong.status_code == 401 and "matches none" in wrong.text
    client.get("/console/sign-in")
    forged = client.post("/console/sign-in", data={"token": HOME_TOKEN}, follow_redirects=False)
    assert forged.status_code == 403
    assert not any(c.startswith("sidecar_console=") for c in cookie_headers(forged))
    assert client.get("/console/overview", follow_redirects=False).status_code == 303


def test_an_agent_token_is_refused_with_a_page_and_no_session(
    demo: tuple[Sidecar, TestClient],
) -> None:
    _sc, client = demo
    answer = sign_in(client, TOKENS["alice"])
    assert answer.status_code == 403
    shown = html.unescape(answer.text)
    assert "The console is for operators" in shown and "'alice' is an agent's token" in shown
    assert not any(c.startswith("sidecar_console=") for c in cookie_headers(answer))
    for page in PAGES:
        shown = client.get(f"/console/{page}", follow_redirects=False)
        assert shown.status_code == 303 and shown.headers["location"] == "/console/sign-in"


def test_a_bearer_token_opens_no_page(demo: tuple[Sidecar, TestClient]) -> None:
    """The console takes its session cookie, not the API's header."""
    _sc, client = demo
    shown = client.get(
        "/console/rules",
        headers={"Authorization": f"Bearer {HOME_TOKEN}"},
        follow_redirects=False,
    )
    assert shown.status_code == 303


def test_signing_out_ends_the_session(empty: tuple[Sidecar, TestClient]) -> None:
    _sc, client = empty
    sign_in(client, HOME_TOKEN)
    token = csrf(client.get("/console/overview").text)
    assert client.post("/console/sign-out", data={}, follow_redirects=False).status_code == 403
    out = client.post("/console/sign-out", data={"csrf": token}, follow_redirects=False)
    assert out.status_code == 303
    assert any(c.startswith('sidecar_console=""') for c in cookie_headers(out))
    assert client.get("/console/overview", follow_redirects=False).status_code == 303


def test_a_home_without_tokens_lets_no_one_in_and_says_so(tmp_path: Path) -> None:
    """As the API does: with no token configured every request is refused."""
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        app = create_app(sc, None, with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            page = client.get("/console/sign-in")
            assert "no tokens" in text_of(page.text, "no-tokens")
            assert client.get("/v1/tools").status_code == 401
            refused = sign_in(client, "any-token-0123456789abcdef")
    assert refused.status_code == 403 and "no tokens" in refused.text


# ---- forms --------------------------------------------------------------------------------


def _rule(sc: Sidecar) -> str:
    return next(v.chain_id for v in sc.constraints() if v.kind == "sequence")


def test_a_form_without_its_csrf_token_or_from_another_site_is_refused(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    rule = _rule(sc)
    sign_in(client, OPS)
    token = csrf(client.get(f"/console/rules/{rule}").text)
    missing = client.post(f"/console/rules/{rule}/lift", data={"reason": "x"})
    wrong = client.post(f"/console/rules/{rule}/lift", data={"reason": "x", "csrf": "guess"})
    other_site = client.post(
        f"/console/rules/{rule}/lift",
        data={"reason": "x", "csrf": token},
        headers={"Origin": "https://attacker.example"},
    )
    assert [r.status_code for r in (missing, wrong, other_site)] == [403, 403, 403]
    assert sc.constraint(rule).status == "active"
    signed_out = TestClient(client.app, base_url="http://127.0.0.1")
    anonymous = signed_out.post(
        f"/console/rules/{rule}/lift", data={"reason": "x", "csrf": token}, follow_redirects=False
    )
    assert anonymous.status_code == 303 and sc.constraint(rule).status == "active"


def test_lift_and_reinstate_round_trip_and_name_the_operator(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    rule = _rule(sc)
    sign_in(client, OPS)
    token = csrf(client.get(f"/console/rules/{rule}").text)
    lifted = client.post(f"/console/rules/{rule}/lift", data={"reason": "fixed", "csrf": token})
    assert lifted.status_code == 200 and text_of(lifted.text, "rule-status") == "lifted"
    assert _api(client, f"/v1/constraints/{rule}")["status"] == "lifted"
    back = client.post(f"/console/rules/{rule}/reinstate", data={"reason": "again", "csrf": token})
    assert text_of(back.text, "rule-status") == "active"
    assert [(e.action, e.reason) for e in sc.constraint_history(rule)] == [
        ("active", "again (by ops)"),
        ("lifted", "fixed (by ops)"),
    ]
    assert "fixed (by ops)" in back.text  # the rule's page shows its history
    empty = client.post(f"/console/rules/{rule}/lift", data={"reason": " ", "csrf": token})
    assert empty.status_code == 400 and sc.constraint(rule).status == "active"


def test_forget_previews_then_confirms_and_does_what_the_preview_said(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    sign_in(client, OPS)
    token = csrf(client.get("/console/sources/alice").text)
    assert verdict(sc) == "block"  # two agents taught it
    before = [(v.chain_id, v.status, v.sources) for v in sc.constraints(include_lifted=True)]
    preview = client.post("/console/sources/alice/preview", data={"csrf": token, "since": ""})
    assert preview.status_code == 200 and 'id="confirm"' in preview.text
    assert [(v.chain_id, v.status, v.sources) for v in sc.constraints(True)] == before
    expected = sc.forget("alice", dry_run=True)
    assert f'<dd class="sessions">{expected.sessions}<' in preview.text
    done = client.post("/console/sources/alice/forget", data={"csrf": token, "since": ""})
    assert done.status_code == 200
    assert "changed what the preview said" in text_of(done.text, "same")
    assert f'<dd class="sessions">{expected.sessions}<' in done.text
    assert verdict(sc) == "warn"  # what rested on alice is gone: bob alone warns


# ---- pages --------------------------------------------------------------------------------


@pytest.mark.parametrize("data", ["empty", "demo"])
def test_every_page_renders(data: str, request: pytest.FixtureRequest) -> None:
    sc, client = request.getfixturevalue(data)
    sign_in(client, HOME_TOKEN)
    pages = [*PAGES, *(f"rules/{v.chain_id}" for v in sc.constraints(include_lifted=True))]
    for page in pages:
        shown = client.get(f"/console/{page}")
        assert shown.status_code == 200, (page, shown.text[:500])
        assert "<main>" in shown.text and 'href="/console/static/console.css"' in shown.text
        assert "http://" not in shown.text and "https://" not in shown.text  # nothing fetched
    css = client.get("/console/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")


def test_the_review_page_says_what_waits(empty: tuple[Sidecar, TestClient]) -> None:
    _sc, client = empty
    sign_in(client, HOME_TOKEN)
    review = client.get("/console/review").text
    assert "No call waits for approval" in review and "No open appeal" in review
    assert "No rule waits for a person" in review


def test_rules_on_one_untrusted_source_wait_in_review_until_confirmed_or_retired(
    empty: tuple[Sidecar, TestClient],
) -> None:
    sc, client = empty
    fatal = ["search_api", "html_parser", "llm_extractor"]
    sc.add_tools([Tool(t, t) for t in (*fatal, "a", "b")])  # an agent teaches of these only
    sc.report_many([abandoned(fatal, "HTTP 413", session_id=f"a{n}") for n in range(2)],
                   source="alice", role="agent")  # fmt: skip
    sc.report_many([abandoned(["a", "b"], "HTTP 400", session_id=f"b{n}") for n in range(2)],
                   source="alice", role="agent")  # fmt: skip
    waiting = sorted(v.chain_id for v in sc.constraints() if not v.independent)
    assert len(waiting) == 2 and sc.check(fatal).safe  # they warn only
    sign_in(client, OPS)
    review = client.get("/console/review").text
    assert sorted(rows(review, "rule")) == waiting
    token = csrf(review)
    first, second = (
        next(v for v in sc.constraints() if v.sequence == s) for s in (tuple(fatal), ("a", "b"))
    )
    done = client.post(
        f"/console/rules/{first.chain_id}/confirm", data={"reason": "seen it", "csrf": token}
    )
    assert done.status_code == 200 and text_of(done.text, "rule-judged") == "confirmed by ops"
    assert not sc.check(fatal).safe  # a person vouched: it blocks
    assert _api(client, f"/v1/constraints/{first.chain_id}")["judged"] == "confirmed"
    client.post(f"/console/rules/{second.chain_id}/retire", data={"reason": "no", "csrf": token})
    assert sc.constraint(second.chain_id).status == "retired"
    assert rows(client.get("/console/review").text, "rule") == []
    assert [(e.action, e.reason) for e in sc.constraint_history(first.chain_id)] == [
        ("confirmed", "seen it (by ops)")
    ]


def test_the_sessions_page_lists_the_librarys_sessions_page_by_page(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    sc.report_many([good_session(n) for n in range(20, 60)])
    sign_in(client, HOME_TOKEN)
    first = client.get("/console/sessions").text
    page = sc.sessions_page(limit=50)
    assert rows(first, "session") == [s.session_key for s in page.sessions]
    assert int(text_of(first, "sessions-total")) == page.total > 50
    assert page.next_cursor is not None and 'rel="next"' in first
    second = client.get(f"/console/sessions?cursor={page.next_cursor}").text
    rest = sc.sessions_page(page.next_cursor, 50)
    assert rows(second, "session") == [s.session_key for s in rest.sessions] != []
    assert client.get("/console/sessions?cursor=%%%").status_code == 400


def test_the_rules_page_shows_the_apis_ids_page_by_page(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    sc.report_many([abandoned([f"t{n}", f"u{n}"], session_id=f"s{n}") for n in range(55)])
    sign_in(client, HOME_TOKEN)
    listed = _api(client, "/v1/constraints?include_lifted=true")["constraints"]
    api = [c["chain_id"] for c in listed]
    first = client.get("/console/rules").text
    second = client.get("/console/rules?page=2").text
    assert len(rows(first, "rule")) == 50 and 'rel="next"' in first
    assert rows(first, "rule") + rows(second, "rule") == api
    assert "page 2 of 2" in second
    active = client.get("/console/rules?status=active").text
    active_ids = [c["chain_id"] for c in _api(client, "/v1/constraints")["constraints"]]
    expected = [i for i in active_ids if sc.constraint(i).status == "active"][:50]
    assert rows(active, "rule") == expected


def test_the_tools_page_follows_the_apis_cursor(demo: tuple[Sidecar, TestClient]) -> None:
    sc, client = demo
    sign_in(client, HOME_TOKEN)
    first = _api(client, "/v1/tools?limit=50")
    shown = client.get("/console/tools").text
    assert rows(shown, "tool") == [t["tool_id"] for t in first["tools"]]
    second = client.get(f"/console/tools?cursor={first['next_cursor']}").text
    rest = _api(client, f"/v1/tools?limit=50&cursor={first['next_cursor']}")
    assert rows(second, "tool") == [t["tool_id"] for t in rest["tools"]]
    assert len(rows(shown, "tool")) + len(rows(second, "tool")) == len(sc.list_tools())


def test_the_overview_counts_what_the_library_counts(demo: tuple[Sidecar, TestClient]) -> None:
    sc, client = demo
    sign_in(client, HOME_TOKEN)
    page = client.get("/console/overview").text
    status = sc.status()
    views = _api(client, "/v1/constraints?include_lifted=true")["constraints"]
    assert int(text_of(page, "hot-tools")) == status.active_tools
    assert int(text_of(page, "cold-tools")) == status.evicted_tools
    assert int(text_of(page, "rules-total")) == len(views)
    for s in ("active", "contested", "retired", "lifted"):
        assert int(text_of(page, f"rules-{s}")) == sum(v["status"] == s for v in views)
    assert int(text_of(page, "chains")) == status.chains
    assert int(text_of(page, "sessions")) == sc.sessions_page().total > 0
    assert '<svg class="plot"' in page and "rules learned per hour" in page


def test_the_sources_page_lists_every_token_and_what_it_taught(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    sign_in(client, HOME_TOKEN)
    listed = rows(client.get("/console/sources").text, "source")
    assert {"local", "alice", "bob", "ops"} <= set(listed)
    alice = client.get("/console/sources/alice").text
    taught = [v.chain_id for v in sc.constraints(include_lifted=True) if "alice" in v.sources]
    assert taught and all(rule in alice for rule in taught)


def test_a_rule_that_does_not_exist_is_a_page_that_says_so(
    demo: tuple[Sidecar, TestClient],
) -> None:
    _sc, client = demo
    sign_in(client, HOME_TOKEN)
    assert client.get("/console/rules/nope").status_code == 404


def test_the_demo_chain_is_one_of_the_rules(demo: tuple[Sidecar, TestClient]) -> None:
    sc, client = demo
    sign_in(client, HOME_TOKEN)
    rule = _rule(sc)
    page = client.get(f"/console/rules/{rule}").text
    assert "calling llm_extractor fails" in page
    assert ABANDONED["failure"]["signature"] in page.replace("&#39;", "'")


def test_a_rules_page_links_the_sessions_behind_it_and_against_it(
    empty: tuple[Sidecar, TestClient],
) -> None:
    sc, client = empty
    rule = sc.report({**abandoned(["a", "b"], "HTTP 400 bad"), "session_id": "failed"}).chain_id
    assert rule is not None
    sign_in(client, HOME_TOKEN)

    def linked(field: str) -> list[str]:
        page = client.get(f"/console/rules/{rule}").text
        found = re.search(rf'id="{field}">(.*?)</dd>', page, re.S)
        assert found is not None, field
        return rows(found.group(1), "session")

    assert linked("supporting") == ["session:failed"] and linked("contradicting") == []
    sc.report({**completed(["a", "b"]), "session_id": "ran-fine"})
    assert linked("contradicting") == ["session:ran-fine"]
    assert sc.rule_sessions(rule).contradicting == ("session:ran-fine",)
    assert client.get("/console/session", params={"key": "session:failed"}).status_code == 200


def test_a_rules_page_says_how_many_more_situations_it_needs_to_block(
    empty: tuple[Sidecar, TestClient],
) -> None:
    sc, client = empty
    sc.report_many([good_session(n) for n in range(20)])
    sc.report(failing_session(0))
    (rule,) = [v for v in sc.constraints() if v.kind == "call" and "'pending'" in v.rule]
    needed = sc.constraint(rule.chain_id).to_block
    assert needed is not None and needed >= 1
    assert rule.to_block is None  # the lists leave it out: one rule's page computes it
    sign_in(client, HOME_TOKEN)
    page = client.get(f"/console/rules/{rule.chain_id}").text
    found = re.search(r'id="to-block">(.*?)</dd>', page, re.S)
    assert found is not None and found.group(1).startswith(f"{needed} more independent")
    sc.report_many([failing_session(n) for n in range(1, 1 + needed)])
    assert sc.constraint(rule.chain_id).to_block == 0
    page = client.get(f"/console/rules/{rule.chain_id}").text
    assert 'id="to-block">blocks when it holds<' in page


def test_forget_takes_a_date_and_refuses_one_that_is_not(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    sign_in(client, OPS)
    token = csrf(client.get("/console/sources/alice").text)
    later = client.post(
        "/console/sources/alice/preview", data={"csrf": token, "since": "2999-01-01T00:00"}
    )
    assert later.status_code == 200 and '<dd class="sessions">0<' in later.text
    bad = client.post("/console/sources/alice/preview", data={"csrf": token, "since": "soon"})
    assert bad.status_code == 400
    assert verdict(sc) == "block"  # nothing was forgotten


def test_the_sources_page_shows_trust_and_the_evidence_each_token_stored(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    sign_in(client, HOME_TOKEN)
    page = client.get("/console/sources").text
    quotas = sc.quotas()
    assert quotas.evidence_bytes.get("alice", 0) > 0
    alice = page.split('data-source="alice"', 1)[1].split("</tr>", 1)[0]
    assert f"<td>{quotas.evidence_bytes['alice']}</td>" in alice and "<td>no</td>" in alice
    ops = page.split('data-source="ops"', 1)[1].split("</tr>", 1)[0]
    assert "<td>operator</td><td>yes</td>" in ops


def test_the_tools_page_shows_what_an_eviction_would_do(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    sign_in(client, HOME_TOKEN)
    assert rows(client.get("/console/tools").text, "decision") == []  # asked for only
    page = client.get("/console/tools?decisions=1").text
    decided = _api(client, "/v1/evictions/decision")["decisions"]
    assert rows(page, "decision") == [d["tool_id"] for d in decided][:50]
    assert rows(page, "decision") == [d.tool_id for d in sc.decide()][:50] != []


# ---- review -------------------------------------------------------------------------------


def test_review_approves_and_denies_held_calls_and_closes_appeals_in_the_operators_name(
    empty: tuple[Sidecar, TestClient],
) -> None:
    sc, client = empty
    refund = sc.request_approval("refund", {"amount": 40}, source="alice", why="destructive")
    wipe = sc.request_approval("wipe", {}, source="bob", why="named")
    appeal = sc.appeal("exchange", {"order_id": "#W1"}, "it was delivered", ["c1"], source="bob")
    sign_in(client, OPS)
    page = client.get("/console/review")
    assert sorted(rows(page.text, "approval")) == sorted([refund.approval_id, wipe.approval_id])
    assert rows(page.text, "appeal") == [appeal.appeal_id]
    assert "it was delivered" in page.text
    token = csrf(page.text)
    refused = client.post(f"/console/approvals/{refund.approval_id}/approve", data={})
    assert refused.status_code == 403 and sc.approvals("pending")  # no CSRF token: nothing
    hour = {"csrf": token, "for_s": "3600"}
    approved = client.post(f"/console/approvals/{refund.approval_id}/approve", data=hour)
    assert approved.status_code == 200 and f"{refund.approval_id} approved" in approved.text
    denied = client.post(f"/console/approvals/{wipe.approval_id}/deny", data={"csrf": token})
    assert f"{wipe.approval_id} denied" in denied.text
    closed = client.post(f"/console/appeals/{appeal.appeal_id}/upheld", data={"csrf": token})
    assert f"{appeal.appeal_id} upheld" in closed.text
    decided = {a.approval_id: (a.status, a.decided_by) for a in sc.approvals()}
    assert decided == {refund.approval_id: ("approved", "ops"), wipe.approval_id: ("denied", "ops")}
    assert [(a.status, a.decided_by) for a in sc.appeals()] == [("upheld", "ops")]
    # what the console approved, the library lets run (for the hour)
    assert sc.request_approval("refund", {"amount": 40}, source="alice").status == "approved"
    again = client.post(f"/console/approvals/{wipe.approval_id}/approve", data={"csrf": token})
    assert again.status_code == 400 and "not pending" in again.text


@pytest.mark.parametrize(
    "path",
    [
        "/console/rules/c1/lift",
        "/console/sources/alice/forget",
        "/console/approvals/a1/approve",
        "/console/approvals/a1/deny",
        "/console/appeals/p1/granted",
        "/console/appeals/p1/upheld",
        "/console/sign-out",
    ],
)
def test_every_form_needs_a_session_and_its_csrf_token(
    empty: tuple[Sidecar, TestClient], path: str
) -> None:
    sc, client = empty
    anonymous = client.post(path, data={"reason": "x"}, follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"].endswith("/sign-in")
    sign_in(client, OPS)
    assert client.post(path, data={"reason": "x"}).status_code == 403
    assert client.post(path, data={"reason": "x", "csrf": "guess"}).status_code == 403
    assert sc.approvals() == [] and sc.appeals() == []  # nothing was made or changed


def test_a_refused_call_leads_from_the_overview_to_its_session_and_its_rule(
    demo: tuple[Sidecar, TestClient],
) -> None:
    sc, client = demo
    sc.search("exchange an order", k=3, viewer="alice", session_id="s1")
    steps = [lookup("#C3000", "pending")]
    args = {"order_id": "#C3000", "note": "<script>alert(1)</script>"}
    check = sc.check_call(steps, "exchange_items", args, viewer="alice", session_id="s1")
    assert check.decision == "block"
    sign_in(client, OPS)
    overview = client.get("/console/overview").text
    activity = _api(client, "/v1/activity?hours=2")
    assert rows(overview, "refusal") == [d["decision_id"] for d in activity["refusals"]] != []
    key = "src:alice/session:s1"
    assert f'href="/console/session?key={quote(key, safe="/")}"' in overview
    assert int(text_of(overview, "sessions-before-first-block")) == sc.sessions_page().total
    page = client.get("/console/session", params={"key": key}).text
    story = _api(client, f"/v1/sessions/activity?key={quote(key, safe='')}")
    assert rows(page, "decision") == [d["decision_id"] for d in story["decisions"]]
    assert rows(page, "verdict") == ["offered", "block"]
    for reason in check.reasons:
        assert f'href="/console/rules/{reason.constraint_id}"' in page
    assert "<script>alert" not in page  # the agent's argument is never markup
    assert "\\u003cscript\\u003e" in page  # the arguments as JSON, < and > escaped
    assert "<b>exchange_items</b>" in page  # offered by the lookup, then called
    sources = client.get("/console/sources").text
    assert '<tr data-source="alice">' in sources
    assert client.get("/console/session", params={"key": "src:nobody/session:x"}).status_code == 404
    signed_out = TestClient(client.app, base_url="http://127.0.0.1")
    assert (
        signed_out.get("/console/session", params={"key": key}, follow_redirects=False).status_code
        == 303
    )
