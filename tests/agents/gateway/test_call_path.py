"""The forwarded call's path kept short: the renamed views of a session kept as it grows
(not rebuilt on every call), and the evidence work done after the call returns, yet
settled before anything reads the session and drained on shutdown."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.gateway import Step, build_gateway
from sidecar.agents.gateway.guard.learning import Learning
from sidecar.agents.gateway.guard.linking import Link
from sidecar.agents.gateway.guard.session_views import SessionViews
from sidecar.agents.gateway.guard.workers import GatewayStats
from sidecar.agents.gateway.proxy.catalog import Catalog
from sidecar.agents.sessions import SessionBook, SessionLimits
from tests.agents.gateway.conftest import TOKEN, mcp_session, serving, shop_stdio, text_of


def _tool(name: str) -> Any:
    from mcp.types import Tool

    return Tool(name=name, description=name, input_schema={"type": "object"})


def _names(views: list[tuple[list[Step], str]]) -> list[tuple[tuple[str, ...], str]]:
    return [(tuple(s.tool for s in steps), tool) for steps, tool in views]


# ---- the views, kept per session ------------------------------------------------------
def test_kept_views_ask_what_the_catalog_asks_as_sessions_grow_and_names_change() -> None:
    catalog = Catalog()
    catalog.update("a", [_tool("get"), _tool("put"), _tool("files/read")])
    book = SessionBook(SessionLimits(max_steps=5))
    kept = SessionViews(catalog, capacity=2)
    rng = random.Random(3)
    for round_no in range(300):
        if round_no == 120:
            catalog.update("b", [_tool("get")])  # `get` becomes a_get and b_get
        if round_no == 200:
            book.declare("s1", "completed", None)  # the same key, another session
        key = rng.choice(["s1", "s2", "s3"])
        exposed = rng.choice([t.name for t in catalog.tools()])
        stamp, steps = book.stamped_steps(key)
        assert _names(kept.views(key, stamp, steps, exposed)) == _names(
            catalog.views(steps, exposed)
        )
        for _ in range(rng.choice([0, 1, 1, 2, 7])):
            tool = rng.choice([t.name for t in catalog.tools()] + ["gone"])
            book.record(key, Step(tool, {"n": round_no}, {"ok": True}))


def test_a_call_renames_only_the_steps_recorded_since_the_last_one() -> None:
    catalog = Catalog()
    catalog.update("a", [_tool("get")])
    book = SessionBook(SessionLimits(max_steps=256))
    kept = SessionViews(catalog, capacity=8)
    renamed: list[Step] = []
    rename = catalog.renamed

    def counting(step: Step, plain: bool) -> Step:
        renamed.append(step)
        return rename(step, plain)

    catalog.renamed = counting  # type: ignore[method-assign]
    for n in range(300):
        stamp, steps = book.stamped_steps("s")
        views = kept.views("s", stamp, steps, "get")
        held = n if n <= 256 else n - 256  # the 257th step starts the session afresh
        assert [len(v) for v, _ in views] == [held] * 2  # as named now; prefixed
        book.record("s", Step("get", {"n": n}, {"ok": True}))
    # two namings of each step once, not of every step on every call (~88,000)
    assert len(renamed) == 2 * 299


# ---- the evidence, off the path -------------------------------------------------------
def test_queued_work_is_done_in_order_and_settled_per_principal() -> None:
    stats = GatewayStats()
    learning = Learning(stats, delay_s=3600)
    done: list[str] = []

    def build(name: str) -> Any:
        def make() -> Step:
            if name == "broken":
                raise ValueError("not evidence")
            return Step(name, {})

        return make

    def finish(step: Step) -> None:
        done.append(step.tool)

    for principal, name in [("p", "one"), ("q", "other"), ("p", "broken"), ("p", "three")]:
        learning.defer(principal, build(name), finish)
    assert learning.pending() == 4 and not done  # nothing done on the call's path
    learning.settle("p")
    assert done == ["one", "three"]  # in order; q's is not p's to do
    assert stats.evidence_failures == 1  # a step that cannot be built loses only itself
    learning.settle_all()
    assert done == ["one", "three", "other"] and learning.pending() == 0


@pytest.mark.integration  # the shop runs as a subprocess
def test_a_step_learned_after_its_call_is_in_the_next_calls_check_and_blocks_it() -> None:
    """Session 1 teaches the rule; in session 2 the order's status (the rule's condition)
    comes from a call whose evidence is still queued when the exchange is made: the
    exchange is checked with it, refused, and never reaches the upstream."""
    backend = StandaloneBackend(block_after=1)
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, idle_s=60)
    gateway.learning.delay_s = 3600  # no timer: only what reads a session settles it
    # nor the idle sweep, which settles every queue twice a second: a sweep landing
    # between the call's return and the count below emptied the queue (seen once in a
    # whole run of the suite on a loaded machine)
    gateway.reporter._settle = None

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with serving(gateway) as url:
            async with mcp_session(url) as s:
                await s.call_tool("get_order", {"order_id": "#W1"})
                await s.call_tool("exchange", {"order_id": "#W1", "item": "blue shirt"})
            with anyio.fail_after(20):
                while not backend.reports:
                    await anyio.sleep(0.02)
            async with mcp_session(url) as s:
                await s.call_tool("get_order", {"order_id": "#W1"})
                out["queued"] = gateway.learning.pending()
                forwarded = gateway.stats.forwarded
                out["exchange"] = await s.call_tool(
                    "exchange", {"order_id": "#W1", "item": "blue shirt"}
                )
                out["forwarded"] = gateway.stats.forwarded - forwarded
        return out

    out = anyio.run(main)
    assert out["queued"] == 1  # the call returned before its evidence was taken
    assert out["exchange"].is_error
    assert "Refused: exchange was not run" in text_of(out["exchange"])
    assert out["forwarded"] == 0  # blocked before forwarding
    assert gateway.stats.blocked == 1


@pytest.mark.integration  # the shop runs as a subprocess
@pytest.mark.parametrize("tool", ["exchange", "get_order"])
def test_what_is_still_queued_at_shutdown_is_learned_and_reported(tool: str) -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], report_clean=True)
    gateway.learning.delay_s = 3600
    link = Link("named:task", "declared", "principal")

    async def main() -> int:
        async with gateway.running():
            await gateway.calls.call(link, "get_order", {"order_id": "#W2"})
            arguments = {"order_id": "#W2"} | ({"item": "hat"} if tool == "exchange" else {})
            await gateway.calls.call(link, tool, arguments)
            return gateway.learning.pending()

    queued = anyio.run(main)
    assert queued == 1  # the second call's step was not in the book when it shut down
    [report] = backend.reports
    assert [s.tool for s in report.steps] == ["get_order", tool]
    assert report.steps[0].output == {"order_id": "#W2", "status": "pending"}
    assert gateway.learning.pending() == 0
