"""The gateway end to end: a real MCP client, the gateway over streamable HTTP, the shop
server as a real subprocess, and the in-memory backend learning from what it sees."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.gateway import build_gateway
from tests.agents.gateway.conftest import (
    TOKEN,
    eventually,
    mcp_session,
    serving,
    shop_stdio,
    text_of,
)

# real servers and subprocesses: the slow suite, not `make test-fast`
pytestmark = pytest.mark.integration


async def _failing_exchange(url: str, order: str) -> tuple[Any, Any]:
    async with mcp_session(url) as s:
        looked = await s.call_tool("get_order", {"order_id": order})
        tried = await s.call_tool("exchange", {"order_id": order, "item": "blue shirt"})
        return looked, tried


def test_a_failure_seen_in_enough_sessions_is_warned_then_blocked() -> None:
    backend = StandaloneBackend(block_after=3)
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, idle_s=60)

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with serving(gateway) as url:
            out["first"] = await _failing_exchange(url, "#W1")
            await eventually(lambda: len(backend.reports) == 1)
            out["second"] = await _failing_exchange(url, "#W2")  # another order: no match
            await eventually(lambda: len(backend.reports) == 2)
            out["third"] = await _failing_exchange(url, "#W1")  # warned, still forwarded
            await eventually(lambda: len(backend.reports) == 3)
            forwarded = gateway.stats.forwarded
            out["fourth"] = await _failing_exchange(url, "#W2")  # blocked
            out["forwarded_by_fourth"] = gateway.stats.forwarded - forwarded
            async with mcp_session(url) as s:  # a delivered order is not concerned
                await s.call_tool("get_order", {"order_id": "#W3"})
                out["delivered"] = await s.call_tool(
                    "exchange", {"order_id": "#W3", "item": "blue shirt"}
                )
            await eventually(lambda: gateway.book.stats.unreported == 2)
        return out

    out = anyio.run(main)
    looked, failed = out["first"]
    assert looked.structured_content == {"order_id": "#W1", "status": "pending"}
    assert failed.is_error and "Non-delivered order cannot be exchanged" in text_of(failed)
    assert (failed.meta or {}).get("sidecar/warnings") is None  # nothing known yet
    assert (out["second"][1].meta or {}).get("sidecar/warnings") is None

    _, warned = out["third"]
    assert warned.is_error  # forwarded: the upstream's own error came back
    [warning] = warned.meta["sidecar/warnings"]
    assert warning["rule"] == (
        "exchange fails when arg.item = blue shirt and get_order.status = pending"
    )
    assert warning["evidence"].endswith("Non-delivered order cannot be exchanged")
    assert warning["pointer"].startswith("memory://failures/exchange/")

    looked, blocked = out["fourth"]
    assert looked.structured_content["status"] == "pending"
    assert blocked.is_error
    refusal = text_of(blocked)
    assert "Refused: exchange was not run" in refusal
    assert "get_order.status = pending" in refusal  # the rule names the condition
    assert "Non-delivered order cannot be exchanged" in refusal  # its evidence
    assert "memory://failures/exchange/" in refusal  # its pointer
    assert out["forwarded_by_fourth"] == 1  # get_order only: the exchange never left

    assert not out["delivered"].is_error
    assert out["delivered"].structured_content["exchanged"] == "blue shirt"

    first, _second, third = backend.reports
    assert first.outcome == "abandoned" and third.outcome == "abandoned"
    assert [s.tool for s in first.steps] == ["get_order", "exchange"]
    assert first.steps[0].output == {"order_id": "#W1", "status": "pending"}
    assert "Non-delivered order cannot be exchanged" in (first.steps[1].error or "")
    # the blocked call is not evidence: that session held one clean step, unreported
    assert gateway.stats.blocked == 1 and gateway.stats.warned == 1
    assert gateway.book.stats.unreported == 2


def test_clean_sessions_are_not_reported_but_declared_ones_are() -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN)

    async def main() -> dict[str, Any]:
        async with serving(gateway) as url:
            async with mcp_session(url) as s:
                await s.list_tools()  # a client that keeps its session: it ends with it
                await s.call_tool("get_order", {"order_id": "#W3"})
            await eventually(lambda: gateway.book.stats.unreported == 1)
            async with mcp_session(url) as s:
                await s.call_tool("get_order", {"order_id": "#W4"})
                declared = await s.call_tool(
                    "report_outcome", {"outcome": "completed", "task": "check order #W4"}
                )
                bad = await s.call_tool("report_outcome", {"outcome": "fine"})
                empty = await s.call_tool("report_outcome", {"outcome": "completed"})
            return {"declared": declared, "bad": bad, "empty": empty}

    out = anyio.run(main)
    assert out["declared"].structured_content == {
        "reported": True,
        "outcome": "completed",
        "steps": 1,
    }
    assert out["bad"].is_error
    assert out["empty"].structured_content["reported"] is False  # nothing since the last
    [report] = backend.reports
    assert report.outcome == "completed" and report.task_input == "check order #W4"
    assert [s.tool for s in report.steps] == ["get_order"]


def test_recovered_failure_is_reported_unknown_and_secrets_are_redacted() -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN)
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"

    async def main() -> None:
        async with serving(gateway) as url:
            async with mcp_session(url) as s:
                await s.call_tool("get_order", {"order_id": f"#X9 {secret}"})  # fails
                await s.call_tool("get_order", {"order_id": "#W3"})  # same tool succeeds
            await eventually(lambda: len(backend.reports) == 1)

    anyio.run(main)
    [report] = backend.reports
    assert report.outcome == "unknown"
    failed, ok = report.steps
    assert "Order not found" in (failed.error or "")
    assert secret not in repr(report) and "[REDACTED]" in failed.arguments["order_id"]
    assert ok.error is None


def test_idle_sessions_are_reported_while_still_open() -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, idle_s=0.3)

    async def main() -> int:
        async with serving(gateway) as url, mcp_session(url) as s:
            await s.call_tool("get_order", {"order_id": "#W1"})
            await s.call_tool("exchange", {"order_id": "#W1", "item": "hat"})
            # reported as the exchange failed, then again, idle, with its outcome
            await eventually(lambda: [r.outcome for r in backend.reports] == ["abandoned"])
            # the session lives on: its next steps start a new segment
            await s.call_tool("get_order", {"order_id": "#W2"})
            gateway.learning.settle_all()  # its step is taken after the call returns
            return len(gateway.book)

    open_after = anyio.run(main)
    [report] = backend.reports
    assert report.outcome == "abandoned"
    assert [s.tool for s in report.steps] == ["get_order", "exchange"]
    assert gateway.book.stats.ended.get("idle") == 1
    assert open_after == 1


def test_hidden_tools_are_never_listed_nor_forwarded() -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN)

    async def main() -> dict[str, Any]:
        async with serving(gateway) as url, mcp_session(url) as s:
            before = [t.name for t in (await s.list_tools()).tools]
            backend.hide("exchange")
            after = [t.name for t in (await s.list_tools()).tools]
            forwarded = gateway.stats.forwarded
            refused = await s.call_tool("exchange", {"order_id": "#W3", "item": "hat"})
            unknown = await s.call_tool("no_such_tool", {})
            return {
                "before": before,
                "after": after,
                "refused": refused,
                "unknown": unknown,
                "forwarded": gateway.stats.forwarded - forwarded,
            }

    out = anyio.run(main)
    assert "exchange" in out["before"] and "report_outcome" in out["before"]
    assert "exchange" not in out["after"] and "get_order" in out["after"]
    assert out["refused"].is_error and text_of(out["refused"]) == "tool not available: exchange"
    assert text_of(out["unknown"]) == "tool not available: no_such_tool"
    assert out["forwarded"] == 0


def test_an_upstream_schema_change_is_synced_and_announced() -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, refresh_s=3600)
    announced: list[str] = []

    async def on_message(message: Any) -> None:
        announced.append(getattr(message, "method", type(message).__name__))

    async def main() -> dict[str, Any]:
        async with serving(gateway) as url, mcp_session(url, on_message=on_message) as s:
            await s.list_tools()
            await s.call_tool("upgrade", {})
            await eventually(lambda: len(backend.syncs) == 2)
            tools = {t.name: t for t in (await s.list_tools()).tools}
            return {"tools": tools}

    out = anyio.run(main)
    (_, first), (source, second) = backend.syncs
    assert source == "shop"
    assert set(first.added) == {
        "get_order",
        "exchange",
        "slow",
        "trace_context",
        "crash",
        "upgrade",
    }
    assert second.added == ("return_item",)
    assert second.updated == ("exchange",)
    assert second.gone == ("slow",)
    assert backend.gone == {"slow"}
    tools = out["tools"]
    assert "slow" not in tools and "return_item" in tools
    assert "reason" in tools["exchange"].input_schema["required"]
    assert backend.tools["exchange"]["inputSchema"]["required"] == ["order_id", "item", "reason"]
    assert "notifications/tools/list_changed" in announced


def test_search_mode_lists_two_tools_and_pins_and_guards_call_tool() -> None:
    backend = StandaloneBackend(block_after=1)
    gateway = build_gateway(
        backend, [shop_stdio()], token=TOKEN, expose="search", pins=["get_order"]
    )

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with serving(gateway) as url:
            async with mcp_session(url) as s:
                out["listed"] = [t.name for t in (await s.list_tools()).tools]
                found = await s.call_tool("search_tools", {"query": "exchange an item", "k": 2})
                out["found"] = found.structured_content["tools"]
                await s.call_tool("get_order", {"order_id": "#W1"})
                out["failed"] = await s.call_tool(
                    "call_tool", {"name": "exchange", "arguments": {"order_id": "#W1", "item": "x"}}
                )
            await eventually(lambda: len(backend.reports) == 1)
            async with mcp_session(url) as s:
                # one sighting: its condition is the whole context, this very order
                await s.call_tool(
                    "call_tool", {"name": "get_order", "arguments": {"order_id": "#W1"}}
                )
                out["blocked"] = await s.call_tool(
                    "call_tool", {"name": "exchange", "arguments": {"order_id": "#W1", "item": "x"}}
                )
                backend.hide("exchange")
                again = await s.call_tool("search_tools", {"query": "exchange an item", "k": 5})
                out["after_hide"] = [t["name"] for t in again.structured_content["tools"]]
                out["bad"] = await s.call_tool("search_tools", {"query": ""})
        return out

    out = anyio.run(main)
    assert out["listed"] == ["search_tools", "call_tool", "report_outcome", "get_order"]
    assert out["found"][0]["name"] == "exchange"
    assert out["found"][0]["inputSchema"]["required"] == ["order_id", "item"]
    assert "Non-delivered" in text_of(out["failed"])
    assert [s.tool for s in backend.reports[0].steps] == ["get_order", "exchange"]
    assert out["blocked"].is_error and "Refused: exchange" in text_of(out["blocked"])
    assert "exchange" not in out["after_hide"]
    assert out["bad"].is_error


def test_two_upstreams_with_clashing_names_are_prefixed(shop_http: str) -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio("local"), f"remote={shop_http}"], token=TOKEN)

    async def main() -> dict[str, Any]:
        async with serving(gateway) as url, mcp_session(url) as s:
            names = [t.name for t in (await s.list_tools()).tools]
            remote = await s.call_tool("remote_get_order", {"order_id": "#W3"})
            local = await s.call_tool("local_get_order", {"order_id": "#W1"})
            return {"names": names, "remote": remote, "local": local}

    out = anyio.run(main)
    assert "remote_get_order" in out["names"] and "local_get_order" in out["names"]
    assert "get_order" not in out["names"]
    assert out["remote"].structured_content["status"] == "delivered"
    assert out["local"].structured_content["status"] == "pending"
    assert {s for s, _ in backend.syncs} == {"local", "remote"}
    assert "remote_exchange" in backend.tools


def test_http_needs_the_token_and_a_loopback_host() -> None:
    gateway = build_gateway(StandaloneBackend(), [shop_stdio()], token=TOKEN)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}

    async def main() -> dict[str, int]:
        async with serving(gateway) as url, httpx.AsyncClient() as http:
            bearer = {"Authorization": f"Bearer {TOKEN}", **accept}
            return {
                "none": (await http.post(url, json=body, headers=accept)).status_code,
                "wrong": (
                    await http.post(
                        url, json=body, headers={"Authorization": "Bearer nope", **accept}
                    )
                ).status_code,
                "evil_host": (
                    await http.post(url, json=body, headers={**bearer, "Host": "evil.example"})
                ).status_code,
                "evil_origin": (
                    await http.post(
                        url, json=body, headers={**bearer, "Origin": "http://evil.example"}
                    )
                ).status_code,
            }

    codes = anyio.run(main)
    assert codes["none"] == 401 and codes["wrong"] == 401
    assert codes["evil_host"] in (400, 403, 421)
    assert codes["evil_origin"] in (400, 403)


def test_stateless_era_calls_are_grouped_by_the_session_the_client_names() -> None:
    """A 2026-07-28 client has no MCP session: calls that name one in
    ``_meta["sidecar/session"]`` are one session, ended by the idle timeout."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN, idle_s=0.3, inline_checks=True)
    named = {"sidecar/session": "run-42"}

    async def main() -> str:
        async with serving(gateway) as url:
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                await client.call_tool("get_order", {"order_id": "#W2"}, meta=named)
                await client.call_tool("exchange", {"order_id": "#W2", "item": "x"}, meta=named)
                await client.call_tool("get_order", {"order_id": "#W3"})  # on its own
                version = client.protocol_version
            await eventually(lambda: len(backend.reports) == 1)
            return version

    version = anyio.run(main)
    assert version == "2026-07-28"
    [report] = backend.reports
    assert [s.tool for s in report.steps] == ["get_order", "exchange"]
    assert report.outcome == "abandoned"


def test_a_non_loopback_bind_needs_a_token() -> None:
    import pytest

    from sidecar.agents.gateway import GatewayError

    gateway = build_gateway(StandaloneBackend(), [shop_stdio()])
    with pytest.raises(GatewayError, match="not loopback"):
        gateway.serve_http(host="0.0.0.0")


def test_the_gateway_asks_the_servers_loopback_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule for what is loopback, the sidecar server's: the gateway has no copy."""
    import importlib

    from sidecar.agents.gateway import GatewayError

    # the module, not the ``serve`` function its package exports under the same name
    serving = importlib.import_module("sidecar.shells.api.serve")
    monkeypatch.setattr(serving, "is_loopback", lambda host: False)

    def bind(host: str, port: int) -> None:
        raise AssertionError(f"bound {host}:{port}, taken for loopback")

    monkeypatch.setattr(serving, "bind", bind)  # a regression fails, never serves
    gateway = build_gateway(StandaloneBackend(), [shop_stdio()])
    with pytest.raises(GatewayError, match="not loopback"):
        gateway.serve_http(host="127.0.0.1")


def test_a_crashed_upstream_is_restarted_and_the_failure_recorded() -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN)

    async def main() -> dict[str, Any]:
        async with serving(gateway) as url, mcp_session(url) as s:
            crashed = await s.call_tool("crash", {})
            with anyio.fail_after(30):
                while True:  # the link comes back on its own, with a new process
                    again = await s.call_tool("get_order", {"order_id": "#W3"})
                    if not again.is_error:
                        break
                    await anyio.sleep(0.1)
            return {"crashed": crashed, "again": again, "steps": gateway.book.steps(_only(gateway))}

    out = anyio.run(main)
    assert out["crashed"].is_error
    assert text_of(out["crashed"]).startswith("upstream shop failed:")
    assert out["again"].structured_content["status"] == "delivered"
    assert gateway.links["shop"].connects == 2
    assert out["steps"][0].tool == "crash" and out["steps"][0].error
    assert out["steps"][-1].tool == "get_order" and out["steps"][-1].error is None


def _only(gateway: Any) -> str:
    [key] = list(gateway.book._sessions)
    return str(key)


def test_mounted_inside_another_app_with_the_parent_running_its_lifespan() -> None:
    import contextlib
    from collections.abc import AsyncIterator

    from fastapi import FastAPI

    backend = StandaloneBackend()
    gateway = build_gateway(backend, [shop_stdio()], token=TOKEN)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with gateway.lifespan():
            yield

    app = FastAPI(lifespan=lifespan)
    app.mount("/gateway", gateway.asgi_app)  # type: ignore[arg-type]

    async def main() -> Any:
        async with serving(app, "/gateway/mcp") as url, mcp_session(url) as s:
            return await s.call_tool("get_order", {"order_id": "#W4"})

    result = anyio.run(main)
    assert result.structured_content == {"order_id": "#W4", "status": "delivered"}


def test_the_callers_trace_context_reaches_the_upstream() -> None:
    """So that an upstream's own spans join the agent's trace (and the OTLP intake can
    put them in the agent's session)."""
    gateway = build_gateway(StandaloneBackend(), [shop_stdio()], token=TOKEN)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    async def main() -> Any:
        async with serving(gateway) as url, mcp_session(url) as s:
            return await s.call_tool("trace_context", {}, meta={"traceparent": traceparent})

    result = anyio.run(main)
    assert result.structured_content == {"traceparent": traceparent}
