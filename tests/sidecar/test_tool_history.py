"""One tool's history (:meth:`Sidecar.tool_history`): where it is, every move and restore
of it newest first, its mandates, the usage sessions brought it and the rules naming it,
on both state backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import InvalidInput, NotFound, Sidecar, Tool
from sidecar.model import CredentialRef
from sidecar.shells.api import create_app
from sidecar.wire import dump
from tests.sidecar.helpers import abandoned
from tests.support.tokens import OPERATOR, TOKENS, tokens_file

FATAL = ["search_api", "html_parser", "llm_extractor"]


def tool(tool_id: str, *refs: str) -> Tool:
    creds = tuple(CredentialRef(r, ("scope",)) for r in refs)
    return Tool(tool_id, f"{tool_id.replace('_', ' ')} tool", credentials=creds)


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(),
        home=tmp_path / "home",
        evict_min_chains=1,
        database_url=state_url,
    ) as sidecar:
        sidecar.add_tools(
            [
                tool("search_api", "env:SEARCH"),
                tool("html_parser", "env:PARSER"),
                tool("llm_extractor"),
                tool("summarizer"),
            ]
        )
        yield sidecar


def served(n: int, tools: list[str], outcome: str = "completed") -> dict[str, Any]:
    """A finished session that states its request: usage for the tools it speaks for."""
    steps: list[dict[str, Any]] = [
        {"tool": t, "arguments": {"n": n}, "output": "ok"} for t in tools
    ]
    if outcome == "abandoned":
        steps[-1] = {"tool": tools[-1], "arguments": {"n": n}, "error": "HTTP 400: bad input"}
    return {
        "steps": steps,
        "outcome": outcome,
        "task_input": f"parse the page number {n % 2}",
        "session_id": f"u{n}",
    }


def test_a_tool_evicted_restored_and_evicted_again_shows_every_move_newest_first(
    sc: Sidecar,
) -> None:
    first = sc.report(abandoned(FATAL, "HTTP 413"))
    pointer = sc.evict().pointers["html_parser"]
    sc.restore("html_parser", "parser fixed upstream")
    second = sc.report(abandoned(["html_parser", "summarizer"], "HTTP 400"))
    again = sc.evict().pointers["html_parser"]
    history = sc.tool_history("html_parser")
    assert history.state == "cold" and history.pointer == again != pointer
    # the second move rests on both chains (the first is still enforced), the first on one
    assert [set(m.chain_ids) for m in history.moves] == [
        {first.chain_id, second.chain_id},
        {first.chain_id},
    ]
    assert [m.status for m in history.moves] == ["done", "done"]
    assert history.moves[0].created_at >= history.moves[1].updated_at
    assert history.move_id == history.moves[0].move_id
    assert history.evicted_at is not None and history.evicted_at >= history.moves[0].created_at
    (restore,) = history.restores
    assert restore.move_id == history.moves[1].move_id
    assert restore.reason == "parser fixed upstream" and restore.lifted == ()
    assert history.moves[1].updated_at <= restore.restored_at <= history.moves[0].created_at
    # the definition the latest move captured, its credential reference with it
    assert history.tool is not None and history.tool.description == "html parser tool"
    assert [c.ref for c in history.tool.credentials] == ["env:PARSER"]
    assert {m.ref for m in history.mandates} == {"env:PARSER"}
    assert {r.chain_id for r in history.rules} == {first.chain_id, second.chain_id}


def test_a_restored_tool_is_hot_with_its_restore_and_the_chains_it_lifted(sc: Sidecar) -> None:
    chain = sc.report(abandoned(FATAL, "HTTP 413"))
    sc.evict()
    sc.restore("search_api", "fixed", lift_constraints=True)
    history = sc.tool_history("search_api")
    assert history.state == "hot" and history.pointer is None and history.move_id is None
    assert [(r.reason, r.lifted) for r in history.restores] == [("fixed", (chain.chain_id,))]
    assert [m.move_id for m in history.moves] == [history.restores[0].move_id]
    # a lifted rule still names it
    assert [(r.chain_id, r.status) for r in history.rules] == [(chain.chain_id, "lifted")]


def test_a_hot_tool_never_moved_has_no_moves_and_counts_its_usage(sc: Sidecar) -> None:
    sc.report_many([served(n, ["search_api", "html_parser"]) for n in range(5)], source="alice")
    sc.report_many([served(n, ["html_parser"], "abandoned") for n in range(5, 8)], source="bob")
    history = sc.tool_history("html_parser")
    assert history.state == "hot" and history.moves == () and history.restores == ()
    assert history.tool is not None and history.tool.tool_id == "html_parser"
    assert history.sessions_by_outcome() == {"completed": 5, "abandoned": 3}
    assert history.sessions_by_source() == {"alice": 5, "bob": 3}
    assert [(u.source, u.outcome, u.requests) for u in history.usage] == [
        ("alice", "completed", 2),
        ("bob", "abandoned", 2),
    ]
    assert history.completed_chains == 1
    assert sc.tool_history("summarizer").usage == ()


def test_an_unknown_tool_is_not_found_and_a_bad_id_is_refused(sc: Sidecar) -> None:
    with pytest.raises(NotFound):
        sc.tool_history("never_seen")
    with pytest.raises(InvalidInput):
        sc.tool_history("no/slashes")


def test_over_http_an_operator_reads_it_an_agent_is_refused_and_unknown_is_404(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        sc.add_tools([tool("search_api", "env:SEARCH"), tool("html_parser"), tool("llm_extractor")])
        sc.report(abandoned(FATAL, "HTTP 413"))
        sc.evict()
        app = create_app(sc, OPERATOR, with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1") as client:

            def ask(tool_id: str, token: str) -> Any:
                path = f"/v1/tools/{tool_id}/history"
                return client.get(path, headers={"Authorization": f"Bearer {token}"})

            answer = ask("search_api", OPERATOR)
            assert answer.status_code == 200, answer.text
            assert answer.json() == dump(sc.tool_history("search_api"))
            assert answer.json()["state"] == "cold" and len(answer.json()["moves"]) == 1
            refused = ask("search_api", TOKENS["alice"])
            assert refused.status_code == 403 and "moves" not in refused.text
            assert ask("never_seen", OPERATOR).status_code == 404
            assert ask("never_seen", TOKENS["alice"]).status_code == 403
