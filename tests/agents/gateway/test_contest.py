"""Contest sampling on a real gateway: a block nothing could ever contradict (two
fabricated failures of a read-only call) is forwarded once as a sample, its real success
reaches the memory, and the block becomes a warning; a tool with side effects is never
sampled unless the operator says so, and a rule's budget bounds the samples."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.gateway import Step, build_gateway
from sidecar.agents.gateway.guard.contest import ContestPolicy
from sidecar.agents.gateway.server import CONTEST_META_KEY, WARNINGS_META_KEY
from tests.agents.gateway.conftest import (
    TOKEN,
    eventually,
    mcp_session,
    serving,
    shop_stdio,
    text_of,
)

pytestmark = pytest.mark.integration

ALWAYS = ContestPolicy(rate=1.0, budget=1)


def _poisoned() -> StandaloneBackend:
    backend = StandaloneBackend(block_after=2)
    for session in ("forged-1", "forged-2"):
        failed = Step("get_order", {"order_id": "#W3"}, None, "Order service down")
        backend.report_session(session, [failed], "abandoned", None)
    return backend


def test_a_sample_of_a_poisoned_block_succeeds_and_contests_it() -> None:
    backend = _poisoned()
    assert backend.check_call([], "get_order", {"order_id": "#W3"}).decision == "block"
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, contest=ALWAYS)

    async def main() -> dict[str, Any]:
        async with serving(gateway) as url:
            async with mcp_session(url) as s:
                await s.list_tools()  # a client that keeps its session (its context known)
                sampled = await s.call_tool("get_order", {"order_id": "#W3"})
            await eventually(lambda: len(backend.reports) == 3)
            async with mcp_session(url) as s:
                after = await s.call_tool("get_order", {"order_id": "#W3"})
        return {"sampled": sampled, "after": after}

    out = anyio.run(main)
    sampled, after = out["sampled"], out["after"]
    assert not sampled.is_error and sampled.structured_content["status"] == "delivered"
    assert sampled.meta[CONTEST_META_KEY]["sampled"] is True
    assert sampled.meta[WARNINGS_META_KEY][0]["evidence"] == "Order service down"
    # the clean session was reported because it held a sample: its success is evidence
    report = backend.reports[2]
    assert report.outcome == "unknown" and report.steps[0].error is None
    # contested: warned and forwarded, no longer a sample
    assert not after.is_error and WARNINGS_META_KEY in after.meta
    assert CONTEST_META_KEY not in after.meta
    assert gateway.stats.contest_samples == 1 and gateway.stats.blocked == 0


async def _learned_exchange(url: str, backend: StandaloneBackend) -> None:
    async with mcp_session(url) as s:
        await s.call_tool("get_order", {"order_id": "#W1"})
        await s.call_tool("exchange", {"order_id": "#W1", "item": "x"})
    await eventually(lambda: len(backend.reports) == 1)


async def _try_exchange(url: str) -> Any:
    async with mcp_session(url) as s:
        await s.call_tool("get_order", {"order_id": "#W1"})
        return await s.call_tool("exchange", {"order_id": "#W1", "item": "x"})


def test_a_tool_with_side_effects_is_not_sampled_by_default() -> None:
    backend = StandaloneBackend(block_after=1)
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, contest=ALWAYS)

    async def main() -> Any:
        async with serving(gateway) as url:
            await _learned_exchange(url, backend)
            return await _try_exchange(url)

    blocked = anyio.run(main)
    assert text_of(blocked).startswith("Refused: exchange")  # unannotated: side effects
    assert gateway.stats.contest_samples == 0


def test_the_budget_bounds_the_samples_of_a_rule() -> None:
    backend = StandaloneBackend(block_after=1)
    policy = ContestPolicy(rate=1.0, budget=1, scope="all")
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, contest=policy)

    async def main() -> tuple[Any, Any]:
        async with serving(gateway) as url:
            await _learned_exchange(url, backend)
            first = await _try_exchange(url)
            second = await _try_exchange(url)
            return first, second

    first, second = anyio.run(main)
    # the sample went out and failed again (confirming the rule) ...
    assert first.is_error and "Non-delivered order cannot be exchanged" in text_of(first)
    assert first.meta[CONTEST_META_KEY]["sampled"] is True
    # ... and the rule's budget for the hour is spent
    assert text_of(second).startswith("Refused: exchange")
    assert gateway.stats.contest_samples == 1
