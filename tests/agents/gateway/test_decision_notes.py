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
