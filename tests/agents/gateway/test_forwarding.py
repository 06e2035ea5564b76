"""``tools/call`` forwarded as a raw JSON-RPC body (:mod:`sidecar.agents.gateway.proxy.forwarding`):
its ids, errors, cancellation, progress and large results, on a fake wire and on both
transports against a real upstream (``wire_server.py``); and the checks of a backend
that answers from memory, taken on the event loop."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.gateway import Upstream, build_gateway
from sidecar.agents.gateway.proxy.forwarding import ID_PREFIX, NOT_OURS, RawCalls, route_value
from sidecar.agents.gateway.proxy.upstream import CallTimedOut, UpstreamLink, is_link_failure
from tests.agents.gateway.conftest import (
    TOKEN,
    eventually,
    serving,
    serving_script,
    text_of,
)

WIRE = str(Path(__file__).with_name("wire_server.py"))


class Wire:
    """A fake transport: what was sent, and a way to answer."""

    def __init__(self) -> None:
        self.raw = RawCalls()
        self.sent: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []
        self.raw.attach(self.send, self.notify)
        self.raw.enabled = True

    async def send(self, rid: str, body: bytes) -> None:
        self.sent.append(json.loads(body))

    async def notify(self, body: bytes) -> None:
        self.notes.append(json.loads(body))


async def _answer_when_sent(wire: Wire, answer: dict[str, Any]) -> None:
    while not wire.sent:
        await anyio.sleep(0)
    assert wire.raw.take({"jsonrpc": "2.0", "id": wire.sent[-1]["id"], **answer})


def test_a_raw_call_carries_an_id_of_its_own_and_returns_the_result() -> None:
    wire = Wire()

    async def main() -> dict[str, Any]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_answer_when_sent, wire, {"result": {"content": []}})
            return await wire.raw.call("echo", {"x": 1}, {"traceparent": "00-a-b-01"})

    assert anyio.run(main) == {"content": []}
    (request,) = wire.sent
    assert isinstance(request["id"], str) and request["id"].startswith(ID_PREFIX)
    assert request["method"] == "tools/call"
    assert request["params"] == {
        "name": "echo",
        "arguments": {"x": 1},
        "_meta": {"traceparent": "00-a-b-01"},
    }
    assert wire.raw.in_flight == 0 and not wire.notes


def test_an_upstream_error_comes_back_with_its_code_message_and_data() -> None:
    wire = Wire()
    error = {"error": {"code": -32042, "message": "refused", "data": {"why": 1}}}

    async def main() -> MCPError:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_answer_when_sent, wire, error)
            try:
                await wire.raw.call("echo", {})
            except MCPError as exc:
                return exc
        raise AssertionError("no error")

    caught = anyio.run(main)
    assert (caught.code, caught.message, caught.data) == (-32042, "refused", {"why": 1})
    assert not is_link_failure(caught)


def test_a_call_given_up_is_cancelled_upstream_and_its_late_answer_dropped() -> None:
    wire = Wire()

    async def main() -> None:
        with anyio.move_on_after(0.05):
            await wire.raw.call("hang", {})

    anyio.run(main)
    (request,) = wire.sent
    (note,) = wire.notes
    assert note["method"] == "notifications/cancelled"
    assert note["params"]["requestId"] == request["id"]
    late = {"jsonrpc": "2.0", "id": request["id"], "result": {"content": []}}
    assert not wire.raw.take(late)  # the session's to drop, not a call's answer


def test_a_broken_link_fails_the_calls_in_flight_as_a_closed_connection() -> None:
    wire = Wire()

    async def main() -> MCPError:
        async with anyio.create_task_group() as tg:

            async def breaks() -> None:
                while not wire.sent:
                    await anyio.sleep(0)
                wire.raw.detach("gone")

            tg.start_soon(breaks)
            try:
                await wire.raw.call("echo", {})
            except MCPError as exc:
                return exc
        raise AssertionError("no error")

    caught = anyio.run(main)
    assert caught.code == CONNECTION_CLOSED and is_link_failure(caught)
    assert not wire.raw.ready


def test_progress_of_a_raw_call_reaches_its_callback_and_only_its_own() -> None:
    wire = Wire()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def main() -> None:
        async with anyio.create_task_group() as tg:

            async def upstream() -> None:
                while not wire.sent:
                    await anyio.sleep(0)
                token = wire.sent[0]["params"]["_meta"]["progressToken"]
                assert token == wire.sent[0]["id"]
                other = {"progressToken": 7, "progress": 1}
                assert not wire.raw.take({"method": "notifications/progress", "params": other})
                mine = {"progressToken": token, "progress": 1, "total": 2, "message": "half"}
                line = json.dumps({"jsonrpc": "2.0", "method": "notifications/progress"})
                assert await route_value(wire.raw, line.encode()) is NOT_OURS
                progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": mine}
                assert await route_value(wire.raw, json.dumps(progress).encode()) is None
                await anyio.sleep(0.01)
                wire.raw.take({"id": token, "result": {"content": []}})

            tg.start_soon(upstream)
            await wire.raw.call("count", {}, on_progress=on_progress)

    anyio.run(main)
    assert seen == [(1.0, 2.0, "half")]


# ---- against a real upstream, over both transports ---------------------------------
@pytest.fixture(scope="module")
def wire_http() -> Iterator[str]:
    yield from serving_script(WIRE)


class _Events:
    def tools_changed(self, upstream: str) -> None:
        pass

    async def notification(self, upstream: str, message: Any) -> None:
        pass

    async def server_request(self, upstream: str, method: str, params: Any) -> Any:
        raise AssertionError("no upstream request expected")


def _upstream(transport: str, url: str) -> Upstream:
    if transport == "http":
        return Upstream("wire", url=url)
    return Upstream("wire", command=(sys.executable, WIRE))


@pytest.mark.integration
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_raw_calls_against_a_real_upstream(transport: str, wire_http: str) -> None:
    link = UpstreamLink(_upstream(transport, wire_http), _Events())
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            await tg.start(link.run)
            assert link.raw is not None and link.raw.ready
            seen = await link.call_tool("request_id", {}, {"traceparent": "00-ab-cd-01"})
            out["seen"] = json.loads(text_of(seen))
            try:
                await link.call_tool("fail", {})
            except MCPError as exc:
                out["error"] = (exc.code, exc.message, exc.data)
            with pytest.raises(CallTimedOut):
                await link.call_tool("hang", {}, timeout=0.3)
            cancelled: list[str] = []

            async def has_cancelled() -> None:
                while not cancelled:
                    cancelled.extend(json.loads(text_of(await link.call_tool("cancelled", {}))))
                    await anyio.sleep(0.05)

            with anyio.fail_after(10):
                await has_cancelled()
            out["cancelled"] = cancelled
            out["counted"] = text_of(
                await link.call_tool("count", {"n": 3}, on_progress=on_progress)
            )
            out["big"] = len(text_of(await link.call_tool("big", {"chars": 2_000_000})))
            out["sent"] = link.raw.sent
            link.stop()
        return out

    out = anyio.run(main)
    assert str(out["seen"]["id"]).startswith(ID_PREFIX)
    assert out["seen"]["meta"] == ["traceparent"]
    assert out["error"] == (-32042, "refused by the upstream", {"why": "a test"})
    assert len(out["cancelled"]) == 1 and str(out["cancelled"][0]).startswith(ID_PREFIX)
    assert out["counted"] == "counted 3"
    anyio.run(eventually, lambda: len(progress) == 3)
    assert out["big"] == 2_000_000
    assert out["sent"] >= 6


@pytest.mark.integration
def test_a_stateless_era_link_keeps_the_sessions_path() -> None:
    link = UpstreamLink(Upstream("wire", command=(sys.executable, WIRE), mode="auto"), _Events())

    async def main() -> tuple[str, int, bool]:
        async with anyio.create_task_group() as tg:
            await tg.start(link.run)
            assert link.raw is not None
            seen = json.loads(text_of(await link.call_tool("request_id", {})))
            link.stop()
            return str(seen["id"]), link.raw.sent, link.raw.enabled

    rid, sent, enabled = anyio.run(main)
    assert not rid.startswith(ID_PREFIX) and sent == 0 and not enabled


# ---- checks from memory -------------------------------------------------------------
def test_a_backend_that_checks_from_memory_is_asked_on_the_event_loop() -> None:
    class Threads(StandaloneBackend):
        def __init__(self, in_memory: bool) -> None:
            super().__init__()
            self.checks_in_memory = in_memory
            self.threads: list[int] = []

        def hidden_tools(self) -> set[str]:
            self.threads.append(threading.get_ident())
            return super().hidden_tools()

    loop_threads: list[int] = []
    for in_memory in (True, False):
        backend = Threads(in_memory)
        gateway = build_gateway(backend, [Upstream("wire", command=(sys.executable, WIRE))])

        async def main(gateway: Any = gateway) -> None:
            loop_threads.append(threading.get_ident())
            await gateway.workers.checked(gateway.backend.hidden_tools)

        anyio.run(main)
        on_loop = backend.threads == [loop_threads[-1]]
        assert on_loop is in_memory


# ---- the gateway's answer: a JSON body when nothing else can reach the client -------
def _post(client: httpx.AsyncClient, url: str, message: dict[str, Any], sid: str | None) -> Any:
    headers = {
        "authorization": f"Bearer {TOKEN}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-11-25",
    }
    if sid:
        headers["mcp-session-id"] = sid
    return client.post(url, json=message, headers=headers)


async def _open(client: httpx.AsyncClient, url: str, capabilities: dict[str, Any]) -> str:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": capabilities,
        "clientInfo": {"name": "wire-test", "version": "1"},
    }
    opened = await _post(
        client, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}, None
    )
    sid = str(opened.headers["mcp-session-id"])
    await _post(client, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    await _post(client, url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)
    return sid


def _answer(response: Any) -> tuple[str, dict[str, Any]]:
    kind = response.headers["content-type"].split(";")[0]
    if kind == "application/json":
        return kind, json.loads(response.text)
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return kind, json.loads([d for d in data if d][-1])


@pytest.mark.integration
def test_a_call_nothing_else_can_reach_is_answered_with_a_json_body() -> None:
    gateway = build_gateway(StandaloneBackend(), [_upstream("stdio", "")], token=TOKEN)

    async def call(client: httpx.AsyncClient, url: str, sid: str, rid: Any, meta: Any) -> Any:
        params: dict[str, Any] = {"name": "request_id", "arguments": {}}
        if meta:
            params["_meta"] = meta
        message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
        return _answer(await _post(client, url, message, sid))

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as client:
            quiet = await _open(client, url, {})
            out["plain"] = await call(client, url, quiet, "call-7", None)
            out["progress"] = await call(client, url, quiet, 8, {"progressToken": "p"})
            asking = await _open(client, url, {"sampling": {}})
            out["sampling"] = await call(client, url, asking, 9, None)
            failing = {"name": "fail", "arguments": {}}
            message = {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": failing}
            out["error"] = _answer(await _post(client, url, message, quiet))
        return out

    out = anyio.run(main)
    kind, answer = out["plain"]
    assert kind == "application/json" and answer["id"] == "call-7"
    assert json.loads(answer["result"]["content"][0]["text"])["id"].startswith(ID_PREFIX)
    assert out["progress"][0] == "text/event-stream" and out["progress"][1]["id"] == 8
    assert out["sampling"][0] == "text/event-stream" and out["sampling"][1]["id"] == 9
    kind, error = out["error"]
    assert kind == "application/json" and error["id"] == 10
    assert error["error"]["code"] == -32042 and error["error"]["data"] == {"why": "a test"}
