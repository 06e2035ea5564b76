"""What the gateway decided, call by call, reaches the library's decision log filed
under the session the gateway reports: a person reads afterwards which call of which
session was refused, by which rule, and what the calls before it were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.agents.gateway import build_gateway
from sidecar.agents.gateway.guard.library import LibraryBackend
from tests.agents.gateway.conftest import TOKEN, mcp_session, serving, shop_stdio
from tests.sidecar.helpers import abandoned

pytestmark = pytest.mark.integration  # the shop runs as a subprocess


def test_each_relayed_call_is_noted_under_its_reported_session(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        refused = abandoned(["get_order", "exchange"], "HTTP 409 exchange refused")
        rule = sc.report(refused).chain_id
        # every session reported, a clean one too: its learned steps are read back below
        gateway = build_gateway(LibraryBackend(sc), [shop_stdio()], token=TOKEN, report_clean=True)

        async def main() -> Any:
            async with serving(gateway) as url, mcp_session(url) as s:
                await s.call_tool("get_order", {"order_id": "#W1"})
                return await s.call_tool("exchange", {"order_id": "#W1", "item": "blue"})

        assert anyio.run(main).is_error  # refused
        activity = sc.activity(hours=2)
        (block,) = activity.refusals
        assert (block.tool, block.decision, block.source) == ("exchange", "block", "gateway")
        assert block.arguments == {"order_id": "#W1", "item": "blue"}
        assert [r["rule_id"] for r in block.reasons] == [rule]
        assert activity.first_block == block
        assert block.session_key is not None
        story = sc.session_activity(block.session_key)
        assert [(d.tool, d.decision) for d in story.decisions] == [
            ("get_order", "allow"),
            ("exchange", "block"),
        ]
        # the very session the gateway reported: the key its learned steps are under
        assert story.learned is not None and story.source == "gateway"
        assert sum(h.blocked for h in activity.hours) == 1
        assert sum(h.allowed for h in activity.hours) == 1


class _Book:
    def report_id(self, key: str) -> str | None:
        return f"r-{key}"


class _Inline:
    async def write(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


def test_many_notes_go_in_batches_and_one_the_library_refuses_costs_itself(
    tmp_path: Path,
) -> None:
    from sidecar.agents.gateway.guard.workers import NOTES_PER_CALL, GatewayStats, Reporter

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        stats = GatewayStats()
        reporter = Reporter(LibraryBackend(sc), _Inline(), _Book(), stats)  # type: ignore[arg-type]
        calls = NOTES_PER_CALL + 5
        for n in range(calls):
            reporter.note(
                "k", "", {"tool": "get_order", "arguments": {"n": n}, "decision": "allow"}
            )
        deep: dict[str, Any] = {}
        for _ in range(100):
            deep = {"d": deep}  # nested past what the library takes
        reporter.note("k", "", {"tool": "get_order", "arguments": deep, "decision": "allow"})
        anyio.run(reporter.flush_notes)
        kept = sc.session_activity("src:gateway/session:r-k", limit=5000).decisions
        assert len(kept) == calls and stats.notes_dropped == 1


def test_a_lookup_through_the_gateway_is_noted_beside_the_calls_it_led_to(
    tmp_path: Path,
) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        gateway = build_gateway(
            LibraryBackend(sc), [shop_stdio()], token=TOKEN, expose="search", report_clean=True
        )

        async def main() -> list[str]:
            order = {"name": "get_order", "arguments": {"order_id": "#W1"}}
            async with serving(gateway) as url, mcp_session(url) as s:
                first = await s.call_tool("search_tools", {"query": "an order", "k": 3})
                assert not first.is_error  # no session known yet: counted, filed under none
                await s.call_tool("call_tool", order)
                found = await s.call_tool("search_tools", {"query": "look up an order", "k": 3})
                await s.call_tool("call_tool", order)
                return [t["name"] for t in found.structured_content["tools"]]

        offered = anyio.run(main)
        assert sum(h.lookups for h in sc.activity(1).hours) == 2
        (call, *_) = sc.state.decisions.recent(("allow",), 10)
        assert call.session_key is not None
        story = sc.session_activity(call.session_key)
        assert [(d.kind, d.decision) for d in story.decisions] == [
            ("call", "allow"),
            ("lookup", "offered"),
            ("call", "allow"),
        ]
        assert list(story.decisions[1].offered) == offered and "get_order" in offered
