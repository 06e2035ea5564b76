"""The client has the library's surface: the same methods, parameters and answer types,
and every answer crosses the wire and comes back equal."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import RemoteSidecar, Sidecar
from sidecar.demo import demo_tools
from sidecar.shells.api import create_app
from sidecar.shells.operations import OPERATIONS
from tests.sidecar.helpers import abandoned

CLIENT_OPERATIONS = [op for op in OPERATIONS if op.client and op.name != "close"]
"""The operations declared as the client's (``tests/sidecar/test_operations.py`` holds
them to the client's methods); ``close`` is each handle's own."""
TOKEN = "surface-token-0123456789"


def test_every_client_method_is_a_library_method_with_the_same_parameters() -> None:
    """Each declared client operation has its library method's parameters and result
    (the declaration reads them from ``Sidecar``)."""
    assert len(CLIENT_OPERATIONS) >= 19
    for op in CLIENT_OPERATIONS:
        assert op.method is not None
        remote = getattr(RemoteSidecar, op.method)
        lib_params = list(op.signature().parameters.values())
        remote_params = list(inspect.signature(remote).parameters.values())
        shared = [(p.name, p.default) for p in lib_params][: len(remote_params)]
        # the client may omit a trailing library-only parameter (an injected revoker)
        assert [(p.name, p.default) for p in remote_params] == shared, op.name
        assert typing.get_type_hints(remote).get("return") == op.result(), op.name


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Sidecar, RemoteSidecar]]:
    """The library, and a client of an app serving the same library in-process."""
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home", evict_min_chains=1) as sc:
        sc.add_tools(demo_tools())
        with TestClient(create_app(sc, TOKEN), base_url="http://127.0.0.1") as client:
            remote = RemoteSidecar("http://127.0.0.1", TOKEN)
            remote._http = client  # type: ignore[assignment]
            client.headers["Authorization"] = f"Bearer {TOKEN}"
            yield sc, remote


def test_answers_cross_the_wire_unchanged(pair: tuple[Sidecar, RemoteSidecar]) -> None:
    sc, remote = pair
    report = abandoned(["web_search", "html_parser", "llm_extractor"], "HTTP 413")
    archived = remote.report(report)
    assert archived.status == "archived"
    assert remote.report(report) == sc.report(report)  # a replay, answered the same
    assert remote.search("weather", k=3) == sc.search("weather", k=3)
    checks: list[tuple[str, tuple[Any, ...]]] = [
        ("check", (["web_search", "html_parser", "llm_extractor"],)),
        ("digest", ()),
        ("constraints", (True,)),
        ("decide", (1,)),
        ("mandates", ()),
        ("audit", (archived.pointer,)),
    ]
    for name, args in checks:
        assert getattr(remote, name)(*args) == getattr(sc, name)(*args), name
    assert remote.list_tools() == sc.list_tools()
    status = remote.status()
    assert status.chains == 1 and status == sc.status()
    evicted = remote.evict(min_chains=1)
    assert {d.tool_id for d in evicted.evicted} == {"web_search", "html_parser"}
    assert evicted.pointers.keys() == {"web_search", "html_parser"}
    restored = remote.restore("html_parser", "fixed")
    assert restored.tool_id == "html_parser"
    for tool_id in ("html_parser", "web_search"):  # restored (hot), and cold
        assert remote.tool_history(tool_id) == sc.tool_history(tool_id), tool_id
    assert remote.audit("cold://tools/web_search")["tool_id"] == "web_search"
    lifted = remote.lift(archived.chain_id or "", "known false positive")
    assert (lifted.chain_id, lifted.status) == (archived.chain_id, "lifted")
    assert remote.run_revocations().revoker == "record-only"


def test_ids_in_paths_are_escaped(pair: tuple[Sidecar, RemoteSidecar]) -> None:
    """An id cannot steer the client to another route: `../../v1/revocations/run?` is one
    path segment, and the server refuses it as a tool id."""
    _sc, remote = pair
    seen: list[str] = []
    original = remote._http.request

    def spy(method: str, url: str, **kwargs: Any) -> httpx.Response:
        seen.append(url)
        return original(method, url, **kwargs)

    remote._http.request = spy  # type: ignore[method-assign]
    from sidecar.errors import InvalidInput, NotFound

    with pytest.raises(NotFound):  # the decoded path matches no route
        remote.restore("../../v1/revocations/run?", "x")
    assert seen == ["/v1/tools/..%2F..%2Fv1%2Frevocations%2Frun%3F/restore"]
    with pytest.raises(InvalidInput, match="not a valid tool name"):
        remote.restore("no spaces allowed", "x")
    with pytest.raises(InvalidInput, match="chain id"):
        remote.lift("not-a-chain", "x")
    assert remote.mandates() == []  # nothing ran
