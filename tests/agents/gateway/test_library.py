"""The gateway on the real library: a real MCP client, the gateway over streamable HTTP,
the shop server as a real subprocess, and a :class:`~sidecar.Sidecar` home learning from
what the gateway saw (no code on the agent's side)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.agents.gateway import build_gateway
from sidecar.agents.gateway.guard.library import LibraryBackend
from tests.agents.gateway.conftest import (
    TOKEN,
    eventually,
    mcp_session,
    serving,
    shop_stdio,
    text_of,
)

pytestmark = pytest.mark.integration  # the shop runs as a real subprocess


async def _exchange(url: str, order: str) -> Any:
    async with mcp_session(url) as s:
        await s.call_tool("get_order", {"order_id": order})
        return await s.call_tool("exchange", {"order_id": order, "item": "blue shirt"})


def test_the_second_attempt_at_a_known_failing_call_is_stopped(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        # every session is evidence, the successful ones too (as `sidecar gateway` runs)
        gateway = build_gateway(LibraryBackend(sc), [shop_stdio()], token=TOKEN, report_clean=True)

        def reported() -> int:
            return sum(v.kind == "call" for v in sc.constraints())

        async def main() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with serving(gateway) as url:
                # agents exchange delivered orders, then three meet the failure on
                # pending orders: evidence, no code
                for n in (4, *range(6, 15)):
                    await _exchange(url, f"#W{n}")
                out["first"] = await _exchange(url, "#W1")
                await eventually(lambda: reported() > 0)
                out["second"] = await _exchange(url, "#W2")
                await _exchange(url, "#W5")
                await eventually(lambda: _check(sc) == "block")
                forwarded = gateway.stats.forwarded
                out["third"] = await _exchange(url, "#W1")  # the same call, the same state
                out["forwarded"] = gateway.stats.forwarded - forwarded
                out["delivered"] = await _exchange(url, "#W3")  # not concerned
                async with mcp_session(url) as s:
                    out["listed"] = {t.name for t in (await s.list_tools()).tools}
            return out

        out = anyio.run(main)
        assert out["first"].is_error and "Non-delivered" in text_of(out["first"])
        blocked = out["third"]
        assert blocked.is_error
        text = text_of(blocked)
        assert "exchange failed before when" in text and "status" in text
        assert "cold://chains/" in text and 'failure (quoted data): "' in text
        assert out["forwarded"] == 1  # get_order went through; the exchange did not
        assert not out["delivered"].is_error
        assert {"get_order", "exchange"} <= out["listed"]
        # the catalog was synced into the hot index
        assert {"get_order", "exchange"} <= {t.tool_id for t in sc.list_tools()}
        # and an eviction after the walk-through removes nothing that succeeded: every
        # get_order and the delivered exchanges returned without error, whatever the
        # sessions' outcomes (nobody declared them)
        evicted = {d.tool_id for d in sc.evict(min_chains=1).evicted}
        assert not evicted & {"get_order", "exchange"}
        assert {"get_order", "exchange"} <= {t.tool_id for t in sc.list_tools()}


def _check(sc: Sidecar) -> str:
    steps = [
        {
            "tool": "get_order",
            "arguments": {"order_id": "#W9"},
            "output": {"order_id": "#W9", "status": "pending"},
        }
    ]
    return sc.check_call(steps, "exchange", {"order_id": "#W9", "item": "x"}).decision


def test_an_evicted_tool_vanishes_from_tools_list(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home", evict_min_chains=1) as sc:
        gateway = build_gateway(LibraryBackend(sc), [shop_stdio()], token=TOKEN)

        async def main() -> tuple[set[str], set[str], Any]:
            async with serving(gateway) as url:
                async with mcp_session(url) as s:
                    before = {t.name for t in (await s.list_tools()).tools}
                sc.report(
                    {
                        "topology": ["slow", "exchange"],
                        "outcome": "abandoned",
                        "failure": {"signature": "HTTP 400 bad input"},
                        "constraint": {"rule": "IF slow THEN exchange fails"},
                    }
                )
                assert [d.tool_id for d in sc.evict().evicted] == ["slow"]
                async with mcp_session(url) as s:
                    after = {t.name for t in (await s.list_tools()).tools}
                    refused = await s.call_tool("slow", {"x": 1})
            return before, after, refused

        before, after, refused = anyio.run(main)
        assert "slow" in before and "slow" not in after
        assert refused.is_error and text_of(refused) == "tool not available: slow"


def test_a_schema_change_upstream_is_picked_up_by_the_hot_index(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        gateway = build_gateway(LibraryBackend(sc), [shop_stdio()], token=TOKEN, refresh_s=3600)

        async def main() -> None:
            async with serving(gateway) as url, mcp_session(url) as s:
                await s.list_tools()
                await s.call_tool("upgrade", {})
                await eventually(lambda: "return_item" in {t.tool_id for t in sc.list_tools()})

        anyio.run(main)
        tools = {t.tool_id: t for t in sc.list_tools()}
        assert "slow" not in tools  # gone upstream: gone from the hot index
        assert "reason" in tools["exchange"].input_schema["required"]


def test_a_named_tokens_sessions_are_its_own_and_forgotten_with_it(tmp_path: Path) -> None:
    """The gateway accepts the home's named tokens; what it observes of a token's calls is
    that token's evidence (``gateway:<name>``), forgotten with the token, and a token it
    does not know is refused."""
    from sidecar.trust.principals import Principals
    from tests.support.tokens import TOKENS, tokens_file

    principals = Principals.load(tokens_file(tmp_path / "tokens.json"), None)
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        gateway = build_gateway(
            LibraryBackend(sc), [shop_stdio()], token=TOKEN, principals=principals,
            report_clean=True,
        )  # fmt: skip

        def sources() -> set[str]:
            return {s for v in sc.constraints() if v.kind == "call" for s in v.sources}

        async def main() -> None:
            async with serving(gateway) as url:
                for n in (1, 2):
                    async with mcp_session(url, token=TOKENS["alice"]) as s:
                        await s.call_tool("get_order", {"order_id": f"#W{n}"})
                        await s.call_tool("exchange", {"order_id": f"#W{n}", "item": "hat"})
                await eventually(lambda: "gateway:alice" in sources())
                async with httpx.AsyncClient() as http:
                    refused = await http.post(
                        url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                        headers={"authorization": "Bearer not-a-token-0123456789"},
                    )  # fmt: skip
                assert refused.status_code == 401

        anyio.run(main)
        assert sources() == {"gateway:alice"}
        forgotten = sc.forget("alice")
        assert forgotten.sessions >= 2
        assert sources() == set()
