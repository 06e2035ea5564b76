"""A rule follows its tool across renames: when a second upstream with the same tool
names joins (``exchange`` becomes ``a_exchange``) or leaves again, a call the memory
knows to fail is still refused, never forwarded (real gateways, real shop processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from benchmarks.standalone_backend import StandaloneBackend
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

pytestmark = pytest.mark.integration


async def _exchange(url: str, order: str, prefix: str = "") -> Any:
    async with mcp_session(url) as s:
        await s.call_tool(f"{prefix}get_order", {"order_id": order})
        return await s.call_tool(f"{prefix}exchange", {"order_id": order, "item": "hat"})


def _blocked_on_the_library(sc: Sidecar) -> bool:
    steps = [
        {
            "tool": "get_order",
            "arguments": {"order_id": "#W9"},
            "output": {"order_id": "#W9", "status": "pending"},
        }
    ]
    return sc.check_call(steps, "exchange", {"order_id": "#W9", "item": "x"}).decision == "block"


def test_a_block_learned_under_the_plain_name_holds_once_the_tool_is_prefixed(
    tmp_path: Path,
) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        backend = LibraryBackend(sc)
        # every session is evidence, the successful ones too (as `sidecar gateway` runs)
        alone = build_gateway(backend, [shop_stdio("a")], token=TOKEN, report_clean=True)

        async def learn() -> None:
            async with serving(alone) as url:
                for n in (3, 4, *range(6, 14)):  # exchanges that go through
                    await _exchange(url, f"#W{n}")
                await _exchange(url, "#W1")
                await eventually(lambda: any(v.kind == "call" for v in sc.constraints()))
                await _exchange(url, "#W2")
                await eventually(lambda: _blocked_on_the_library(sc))

        anyio.run(learn)
        both = build_gateway(backend, [shop_stdio("a"), shop_stdio("b")], token=TOKEN)

        async def retry() -> dict[str, Any]:
            async with serving(both) as url:
                forwarded = both.stats.forwarded
                first = await _exchange(url, "#W1", "a_")
                other = await _exchange(url, "#W2", "b_")
                return {
                    "first": first,
                    "other": other,
                    "forwarded": both.stats.forwarded - forwarded,
                    "names": {t.name for t in both.catalog.tools()},
                }

        out = anyio.run(retry)
        assert {"a_exchange", "b_exchange"} <= out["names"] and "exchange" not in out["names"]
        assert out["first"].is_error and text_of(out["first"]).startswith("Refused: a_exchange")
        # the other upstream's tool of the same name is held to the rule too (the memory
        # cannot tell which of them it was learned from: stricter, never open)
        assert text_of(out["other"]).startswith("Refused: b_exchange")
        assert out["forwarded"] == 2  # the two get_order calls only


def test_a_block_learned_under_the_prefixed_name_holds_once_the_clash_is_gone() -> None:
    backend = StandaloneBackend(block_after=1)
    both = build_gateway(backend, [shop_stdio("a"), shop_stdio("b")], token=TOKEN)

    async def learn() -> None:
        async with serving(both) as url:
            await _exchange(url, "#W1", "a_")
            await eventually(lambda: len(backend.reports) == 1)

    anyio.run(learn)
    assert [s.tool for s in backend.reports[0].steps] == ["a_get_order", "a_exchange"]
    alone = build_gateway(backend, [shop_stdio("a")], token=TOKEN)

    async def retry() -> Any:
        async with serving(alone) as url:
            return await _exchange(url, "#W1")

    blocked = anyio.run(retry)
    assert blocked.is_error and text_of(blocked).startswith("Refused: exchange")
    assert "a_exchange fails when" in text_of(blocked)
