"""Clients that open a new MCP session for every call (``langchain-mcp-adapters``'
default), end to end: a real MCP client, the gateway over streamable HTTP, the shop as a
real subprocess, and a real :class:`~sidecar.Sidecar` learning from what the gateway saw.

The gateway ties such calls into agent sessions (by the values an output showed and a
later call used, by trace context, or by a declared id), checks each call in the state
of its session, and never reports a call it could not tie to anything."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

from benchmarks.standalone_backend import StandaloneBackend
from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.agents.gateway import build_gateway
from sidecar.agents.gateway.guard.answers import WARNING_PREFIX, WARNINGS_META_KEY
from sidecar.agents.gateway.guard.library import LibraryBackend
from tests.agents.gateway.conftest import TOKEN, eventually, serving, shop_stdio, text_of
from tests.agents.gateway.stateless_client import call, root_span

pytestmark = pytest.mark.integration

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


Traced = Literal["no", "task", "call"]
"""What trace context a client's calls carry: none; one trace per task (an agent span
around it); a trace of its own for each call (OpenTelemetry set up, no span around the
task: the ``mcp`` client's span of each request is a root)."""


async def task(
    url: str, order: str, outcome: bool = True, traced: Traced = "no"
) -> tuple[Any, Any, Any]:
    """Look the order up, exchange its shirt, say how it ended: three sessions."""
    with root_span("invoke_agent shop") if traced == "task" else contextlib.nullcontext():
        looked = await call(url, "get_order", {"order_id": order}, traced=traced)
        tried = await call(
            url, "exchange", {"order_id": order, "item": "blue shirt"}, traced=traced
        )
        ended = "abandoned" if tried.is_error else "completed"
        declared = (
            await call(url, "report_outcome", {"outcome": ended}, traced=traced)
            if outcome
            else None
        )
    return looked, tried, declared


def _contradictions(sc: Sidecar) -> dict[str, int]:
    return {v.chain_id: v.contradictions for v in sc.constraints() if v.kind == "call"}


def _check(sc: Sidecar, status: str) -> str:
    steps = [
        {
            "tool": "get_order",
            "arguments": {"order_id": "#W9"},
            "output": {"order_id": "#W9", "status": status},
        }
    ]
    return sc.check_call(steps, "exchange", {"order_id": "#W9", "item": "x"}).decision


@pytest.mark.parametrize(
    ("traced", "linked"),
    [
        ("no", {"mcp": 0, "declared": 0, "trace": 0, "linked": 14, "new": 20}),
        # each task's calls share its trace: linked by it, not by values (the six
        # exchanges made alone carry none)
        ("task", {"mcp": 0, "declared": 0, "trace": 28, "linked": 0, "new": 6}),
        # a trace for each call says nothing: linked by values, as with none
        ("call", {"mcp": 0, "declared": 0, "trace": 20, "linked": 14, "new": 0}),
    ],
)
def test_a_known_failing_call_is_refused_though_every_call_has_a_session_of_its_own(
    tmp_path: Path, traced: Traced, linked: dict[str, int]
) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        # every session is evidence, the successful ones too (as `sidecar gateway` runs)
        backend = LibraryBackend(sc)
        gateway = build_gateway(
            backend,
            [shop_stdio()],
            token=TOKEN,
            report_clean=True,
            link_window_s=5.0,
            idle_s=5.0,
        )

        async def main() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with serving(gateway) as url:
                for n in (4, *range(6, 15)):
                    await task(url, f"#W{n}", traced=traced)
                out["first"] = await task(url, "#W1", traced=traced)
                out["second"] = await task(url, "#W2", traced=traced)
                await eventually(lambda: _check(sc, "pending") == "block")
                forwarded = gateway.stats.forwarded
                out["third"] = await task(url, "#W1", outcome=False, traced=traced)
                out["forwarded"] = gateway.stats.forwarded - forwarded
                out["before"] = _contradictions(sc)
                # six successes the gateway cannot tie to any earlier output: an
                # exchange made with no lookup before it, each in a session of its own
                for n in range(15, 21):
                    arguments = {"order_id": f"#W{n}", "item": "hat"}
                    alone = await call(url, "exchange", arguments, traced=traced)
                    assert not alone.is_error
                await eventually(lambda: gateway.book.stats.unlinked >= 6)
                out["after"] = _contradictions(sc)
                out["delivered"] = await task(url, "#W3", traced=traced)
            return out

        out = anyio.run(main)
        _, failed, declared = out["first"]
        assert failed.is_error and "Non-delivered" in text_of(failed)
        # the lookup and the exchange were one session, declared by a third client
        assert declared.structured_content == {
            "reported": True,
            "outcome": "abandoned",
            "steps": 2,
        }
        _, warned, _ = out["second"]  # one situation so far: forwarded with a warning
        assert warned.is_error and WARNINGS_META_KEY in (warned.meta or {})
        assert WARNING_PREFIX in text_of(warned)
        _, refused, _ = out["third"]
        assert refused.is_error and text_of(refused).startswith("Refused: exchange was not run")
        assert "status" in text_of(refused) and "cold://chains/" in text_of(refused)
        assert out["forwarded"] == 1  # the lookup went through, the exchange did not
        # the six unlinked successes were not reported: the rule still blocks, uncontested
        assert _check(sc, "pending") == "block"
        assert out["after"] == out["before"] and out["before"]
        assert not out["delivered"][1].is_error  # a delivered order's exchange goes through
        assert _check(sc, "delivered") == "allow"
        # each task's exchange joined its lookup's session; the six stood alone
        assert gateway.linker.stats == linked


def test_calls_sharing_trace_context_or_a_declared_session_are_one_session() -> None:
    # (a memory that never blocks: each failure is evidence as it comes back, and the
    # third exchange of a pending order would be refused)
    backend = StandaloneBackend(block_after=100)
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, idle_s=3.0)
    traceparent = f"00-{TRACE}-00f067aa0ba902b7-01"

    async def main() -> None:
        async with serving(gateway) as url:
            # nothing links these two calls but the trace they share (in _meta) ...
            await call(url, "get_order", {"order_id": "#W3"}, meta={"traceparent": traceparent})
            await call(url, "exchange", {"order_id": "#W1", "item": "hat"},
                       headers={"traceparent": traceparent})  # fmt: skip
            # ... or the session the client declares (baggage, or the sidecar's header)
            baggage = {"baggage": "gen_ai.conversation.id=conv-7"}
            await call(url, "get_order", {"order_id": "#W4"}, headers=baggage)
            await call(url, "exchange", {"order_id": "#W2", "item": "hat"}, headers=baggage)
            named = {"Sidecar-Session": "run-42"}
            await call(url, "get_order", {"order_id": "#W6"}, headers=named)
            await call(url, "exchange", {"order_id": "#W5", "item": "hat"}, headers=named)
            # a declared id wins over the trace of each request
            named = {"Sidecar-Session": "run-43"}
            await call(url, "get_order", {"order_id": "#W7"}, headers=named, traced="call")
            await call(url, "get_order", {"order_id": "#W99"}, headers=named, traced="call")
            await eventually(lambda: len(backend.reports) == 4)

    anyio.run(main)
    shapes = sorted([(s.tool, s.arguments["order_id"]) for s in r.steps] for r in backend.reports)
    assert shapes == [
        [("get_order", "#W3"), ("exchange", "#W1")],
        [("get_order", "#W4"), ("exchange", "#W2")],
        [("get_order", "#W6"), ("exchange", "#W5")],
        [("get_order", "#W7"), ("get_order", "#W99")],  # an unknown order: it failed
    ]
    assert (gateway.linker.stats["trace"], gateway.linker.stats["declared"]) == (2, 6)


def test_the_warning_text_can_be_turned_off() -> None:
    backend = StandaloneBackend(block_after=3)
    quiet = build_gateway(backend, [shop_stdio()], token=TOKEN, warning_text=False)

    async def main() -> Any:
        async with serving(quiet) as url:
            await task(url, "#W1")
            await eventually(lambda: len(backend.reports) == 1)
            return (await task(url, "#W1", outcome=False))[1]

    warned = anyio.run(main)
    assert WARNINGS_META_KEY in (warned.meta or {})  # the _meta entry stays
    assert WARNING_PREFIX not in text_of(warned)


def test_an_instrumented_agents_calls_are_one_session_by_the_trace_its_client_propagates() -> None:
    """With OpenTelemetry active, the ``mcp`` client puts the current trace context in
    each request's ``_meta``: calls in sessions of their own, under one agent span, are
    one session, and the upstream sees the same trace."""
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("agent")  # no global provider: this test's own
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, idle_s=3.0)

    async def main() -> tuple[str, Any]:
        async with serving(gateway) as url:
            with tracer.start_as_current_span("invoke_agent shop") as span:
                trace = format(span.get_span_context().trace_id, "032x")
                await call(url, "get_order", {"order_id": "#W3"})
                seen = await call(url, "trace_context", {})
                await call(url, "exchange", {"order_id": "#W1", "item": "hat"})
            await eventually(lambda: len(backend.reports) == 1)
        return trace, seen

    trace, seen = anyio.run(main)
    assert trace in seen.structured_content["traceparent"]
    [report] = backend.reports
    assert [s.tool for s in report.steps] == ["get_order", "trace_context", "exchange"]
    assert gateway.linker.stats["trace"] == 3
