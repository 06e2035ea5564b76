"""``GET /v1/tools`` a page at a time: cursor and limit, a stable order, pages that
neither repeat nor skip a tool while the catalog changes; an agent's token sees what a
lookup could show it (no evicted tool, no credentials); the client and the CLI's remote
backend follow the pages to the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import RemoteSidecar, Sidecar, Tool
from sidecar.errors import InvalidInput
from sidecar.model import CredentialRef
from sidecar.shells.api import create_app
from tests.sidecar.helpers import abandoned
from tests.support.tokens import OPERATOR, TOKENS, tokens_file

N = 230


def _tool(i: int) -> Tool:
    creds = (CredentialRef(f"vault://kv/tools/t{i:04d}#key", ("read",)),) if i % 7 == 0 else ()
    return Tool(f"t{i:04d}", f"tool number {i} fetches record {i}", credentials=creds)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Sidecar, TestClient]]:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        sc.add_tools([_tool(i) for i in range(N)])
        with TestClient(create_app(sc, OPERATOR), base_url="http://127.0.0.1") as client:
            yield sc, client


def _get(client: TestClient, token: str, **params: Any) -> Any:
    answer = client.get("/v1/tools", params=params, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _walk(client: TestClient, token: str, limit: int) -> list[list[dict[str, Any]]]:
    pages, cursor = [], None
    while True:
        page = _get(client, token, limit=limit, **({"cursor": cursor} if cursor else {}))
        pages.append(page["tools"])
        cursor = page["next_cursor"]
        if cursor is None:
            return pages


def test_pages_cover_the_catalog_once_in_id_order(served: tuple[Sidecar, TestClient]) -> None:
    sc, client = served
    first = _get(client, OPERATOR)
    assert len(first["tools"]) == 100 and first["next_cursor"] and first["view"] == "operator"
    pages = _walk(client, OPERATOR, 64)
    assert [len(p) for p in pages] == [64, 64, 64, 38]
    ids = [t["tool_id"] for p in pages for t in p]
    assert ids == sorted(ids) == [t.tool_id for t in sc.list_tools()]
    assert pages[0][0]["credentials"]  # an operator sees the references
    assert sc.list_tools_page(limit=N).next_cursor is None


def test_a_catalog_that_changes_between_pages_repeats_and_skips_nothing(
    served: tuple[Sidecar, TestClient],
) -> None:
    sc, client = served
    page = _get(client, OPERATOR, limit=50)
    seen = [t["tool_id"] for t in page["tools"]]
    # between two pages: tools before and after the cursor come and go
    sc.add_tools([Tool("t0000a", "new, before the cursor"), Tool("t0100a", "new, after it")])
    sc.sync_tools("cat", [Tool(f"t{i:04d}", f"tool number {i}") for i in range(120, 125)])
    sc.sync_tools("cat", [])  # the source drops them again: gone from the catalog
    cursor = page["next_cursor"]
    while cursor:
        page = _get(client, OPERATOR, limit=50, cursor=cursor)
        seen += [t["tool_id"] for t in page["tools"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen))
    present_throughout = {f"t{i:04d}" for i in range(N) if not 120 <= i < 125}
    assert present_throughout <= set(seen)
    assert "t0100a" in seen and "t0000a" not in seen  # after the cursor: listed


def test_an_agent_sees_what_a_lookup_could_show_it(served: tuple[Sidecar, TestClient]) -> None:
    sc, client = served
    sc.report(abandoned(["t0001", "t0002", "t0003"], "HTTP 413 payload too large"))
    evicted = {d.tool_id for d in sc.evict().evicted}
    assert evicted == {"t0001", "t0002"}
    pages = _walk(client, TOKENS["alice"], 100)
    listed = [t for p in pages for t in p]
    ids = {t["tool_id"] for t in listed}
    assert ids == {t.tool_id for t in sc.list_tools()} - sc.hidden_tools()
    assert not ids & evicted
    assert all(set(t) == {"tool_id", "tool_type", "description", "input_schema"} for t in listed)
    assert _get(client, TOKENS["alice"], limit=1)["view"] == "agent"
    page = sc.list_tools_page(limit=N, agent=True)
    assert page.view == "agent" and all("credentials" not in t for t in page.to_dict()["tools"])


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"limit": 0}, 422),
        ({"limit": 1001}, 422),
        ({"cursor": "not a cursor!"}, 400),
        ({"cursor": "Li4vZXRj"}, 400),  # base64 of "../etc": no tool id
    ],
)
def test_bad_paging_parameters_are_refused(
    served: tuple[Sidecar, TestClient], params: dict[str, Any], status: int
) -> None:
    _sc, client = served
    answer = client.get("/v1/tools", params=params, headers={"Authorization": f"Bearer {OPERATOR}"})
    assert answer.status_code == status, answer.text


def test_the_library_refuses_bad_paging_parameters(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        for bad in (0, -1, 1001, True, "10"):
            with pytest.raises(InvalidInput):
                sc.list_tools_page(limit=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            sc.list_tools_page(cursor="%%%")
        assert sc.list_tools_page().tools == () and sc.list_tools_page().next_cursor is None


@pytest.mark.parametrize("token", [OPERATOR, TOKENS["alice"]])
def test_the_client_follows_every_page(served: tuple[Sidecar, TestClient], token: str) -> None:
    sc, client = served
    remote = RemoteSidecar("http://127.0.0.1", token)
    remote._http = client  # type: ignore[assignment]
    client.headers["Authorization"] = f"Bearer {token}"
    remote.page_size = 40
    tools = remote.list_tools()
    assert [t.tool_id for t in tools] == [t.tool_id for t in sc.list_tools()]
    if token == OPERATOR:
        assert tools == sc.list_tools()
        assert remote.list_tools_page(limit=7) == sc.list_tools_page(limit=7)
    else:
        assert not any(t.credentials for t in tools)
