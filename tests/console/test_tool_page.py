"""The console's page per tool (``/console/tools/{tool_id}``): linked from the Tools page's
rows and its cold list, it shows what ``GET /v1/tools/{tool_id}/history`` answers (the
state, the moves and restores newest first, the mandates, the usage by source and
outcome, the rules naming it), escapes what a catalog wrote, and says when there is no
such tool."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.shells.api import create_app
from tests.sidecar.helpers import abandoned
from tests.support.console import console_home, fill, rows, sign_in, text_of
from tests.support.tokens import TOKENS

HOME_TOKEN = "home-token-0123456789abcdef"
SCRIPT = "<script>alert('x')</script>"


def asked(n: int, tools: list[str]) -> dict[str, Any]:
    """A completed session that states its request (usage for each of its tools)."""
    steps = [{"tool": t, "arguments": {"n": n}, "output": {"ok": True}} for t in tools]
    return {"steps": steps, "outcome": "completed", "task_input": f"look up order {n % 3}",
            "session_id": f"asked-{n}"}  # fmt: skip


@pytest.fixture
def moved(tmp_path: Path) -> Iterator[tuple[Sidecar, TestClient]]:
    """The demo data, then ``html_parser`` evicted, restored and evicted again; usage
    for ``get_order`` from two sources; a tool whose description holds a script."""
    with Sidecar.open(
        embedder=HashingEmbedder(), home=console_home(tmp_path), evict_min_chains=1
    ) as sc:
        fill(sc)
        sc.add_tools([Tool("evil.tool", f"does things {SCRIPT}")])
        sc.evict()
        sc.restore("html_parser", "parser fixed upstream")
        sc.report(abandoned(["html_parser", "text_summarizer"], "HTTP 400"))
        sc.evict()
        sc.report_many([asked(n, ["get_order"]) for n in range(4)])
        sc.report_many([asked(n, ["get_order"]) for n in range(4, 6)], source="alice")
        app = create_app(sc, HOME_TOKEN, with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield sc, client


def _history(client: TestClient, tool_id: str) -> Any:
    answer = client.get(
        f"/v1/tools/{tool_id}/history", headers={"Authorization": f"Bearer {HOME_TOKEN}"}
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_moved_tools_page_shows_what_the_api_answers(
    moved: tuple[Sidecar, TestClient],
) -> None:
    _sc, client = moved
    sign_in(client, HOME_TOKEN)
    api = _history(client, "html_parser")
    page = client.get("/console/tools/html_parser")
    assert page.status_code == 200, page.text[:500]
    shown = page.text
    assert text_of(shown, "tool-id") == "html_parser"
    assert text_of(shown, "tool-state") == api["state"] == "cold"
    assert (
        text_of(shown, "move-id") == api["move_id"] and text_of(shown, "pointer") == api["pointer"]
    )
    assert rows(shown, "move") == [m["move_id"] for m in api["moves"]]
    assert len(api["moves"]) == 2 and api["moves"][0]["created_at"] > api["moves"][1]["created_at"]
    assert rows(shown, "restore") == [r["move_id"] for r in api["restores"]] != []
    assert "parser fixed upstream" in shown
    assert rows(shown, "mandate") == [m["idempotency_key"] for m in api["mandates"]]
    assert rows(shown, "rule") == [v["chain_id"] for v in api["rules"]] != []
    for v in api["rules"]:
        assert f'href="/console/rules/{v["chain_id"]}"' in shown


def test_a_tools_usage_is_counted_as_the_api_counts_it(moved: tuple[Sidecar, TestClient]) -> None:
    sc, client = moved
    sign_in(client, HOME_TOKEN)
    api = _history(client, "get_order")
    shown = client.get("/console/tools/get_order").text
    assert text_of(shown, "tool-state") == "hot"
    assert rows(shown, "usage") == [f"{u['source']}/{u['outcome']}" for u in api["usage"]]
    by_source = {u["source"]: u["sessions"] for u in api["usage"] if u["outcome"] == "completed"}
    assert by_source == {"alice": 2, "local": 4}
    completed = sum(u["sessions"] for u in api["usage"] if u["outcome"] == "completed")
    assert int(text_of(shown, "sessions-completed")) == completed == 6
    assert int(text_of(shown, "sessions-abandoned")) == 0
    assert int(text_of(shown, "completed-chains")) == api["completed_chains"]
    assert api["completed_chains"] == sc.tool_history("get_order").completed_chains > 0


def test_the_tools_page_links_every_hot_row_and_cold_tool_to_its_page(
    moved: tuple[Sidecar, TestClient],
) -> None:
    sc, client = moved
    sign_in(client, HOME_TOKEN)
    listing = client.get("/console/tools").text
    for tool_id in rows(listing, "tool"):
        assert f'<a href="/console/tools/{tool_id}"><code>{tool_id}</code></a>' in listing
    cold = rows(listing, "cold")
    assert cold == sorted(sc.hidden_tools()) and "html_parser" in cold
    for tool_id in cold:
        assert f'<a href="/console/tools/{tool_id}" data-cold="{tool_id}">' in listing
        assert client.get(f"/console/tools/{tool_id}").status_code == 200


def test_what_a_catalog_wrote_is_escaped(moved: tuple[Sidecar, TestClient]) -> None:
    _sc, client = moved
    sign_in(client, HOME_TOKEN)
    shown = client.get("/console/tools/evil.tool").text
    assert SCRIPT not in shown and "<script" not in shown
    assert html.unescape(text_of(shown, "description")) == f"does things {SCRIPT}"


def test_no_such_tool_is_a_404_page_and_signed_out_goes_to_sign_in(
    moved: tuple[Sidecar, TestClient],
) -> None:
    _sc, client = moved
    signed_out = client.get("/console/tools/html_parser", follow_redirects=False)
    assert signed_out.status_code == 303 and signed_out.headers["location"] == "/console/sign-in"
    assert sign_in(client, TOKENS["alice"]).status_code == 403  # an agent gets no page
    assert client.get("/console/tools/html_parser", follow_redirects=False).status_code == 303
    sign_in(client, HOME_TOKEN)
    for missing in ("never_seen", "not%20a%20name"):
        page = client.get(f"/console/tools/{missing}")
        assert page.status_code == 404 and "No such tool" in page.text
