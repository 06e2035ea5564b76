"""The gateway stands in for its upstream: resources, templates, subscriptions, prompts,
completion, logging, progress, and the upstream's sampling and elicitation requests all
reach the client through it (a real gateway, the relay server as a real subprocess, a
real ``mcp`` client with real callbacks)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.gateway import Upstream, build_gateway
from tests.agents.gateway.conftest import (
    TOKEN,
    eventually,
    mcp_session,
    serving,
    shop_stdio,
    text_of,
)

pytestmark = pytest.mark.integration

RELAY = str(Path(__file__).with_name("relay_server.py"))


def relay_upstream(name: str = "notes") -> Upstream:
    return Upstream(name, command=(sys.executable, RELAY))


async def _empty(session: Any, request: Any) -> Any:
    return await session.send_request(request, types.EmptyResult)


def test_resources_templates_subscriptions_prompts_and_completion_are_relayed() -> None:
    gateway = build_gateway(StandaloneBackend(), [relay_upstream()], token=TOKEN)
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with serving(gateway) as url, mcp_session(url, on_message=on_message) as s:
            caps = s.server_capabilities
            out["caps"] = caps
            out["resources"] = [str(r.uri) for r in (await s.list_resources()).resources]
            templates = (await s.list_resource_templates()).resource_templates
            out["templates"] = [t.uri_template for t in templates]
            out["hello"] = (await s.read_resource("note://hello")).contents[0].text
            out["item"] = (await s.read_resource("note://items/42")).contents[0].text
            try:
                await s.read_resource("note://nothing")
            except Exception as exc:  # the upstream's own error, as it came
                out["missing"] = str(exc)
            uri = types.SubscribeRequestParams(uri="note://hello")
            await _empty(s, types.SubscribeRequest(params=uri))
            await s.call_tool("touch", {"uri": "note://hello"})
            await eventually(lambda: updates == ["note://hello"])
            await _empty(
                s,
                types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri="note://hello")),
            )
            await s.call_tool("touch", {"uri": "note://hello"})  # not subscribed any more
            out["prompts"] = [p.name for p in (await s.list_prompts()).prompts]
            prompt = await s.get_prompt("greet", {"name": "Ada"})
            out["prompt"] = prompt.messages[0].content.text
            completed = await s.complete(
                types.PromptReference(type="ref/prompt", name="greet"),
                {"name": "name", "value": "A"},
            )
            out["completed"] = completed.completion.values
            out["relayed"] = gateway.relay.snapshot()
        return out

    out = anyio.run(main)
    caps = out["caps"]
    assert caps.resources is not None and caps.resources.subscribe
    assert caps.prompts is not None and caps.completions is not None and caps.logging is not None
    assert out["resources"] == ["note://hello"] and out["templates"] == ["note://items/{id}"]
    assert out["hello"] == "hello, world" and out["item"] == "item 42"
    assert "Resource note://nothing not found" in out["missing"]
    assert updates == ["note://hello"]  # once: the second touch came after unsubscribing
    assert out["prompts"] == ["greet"] and out["prompt"] == "Say hello to Ada."
    assert out["completed"] == ["Ada", "Alan"]
    assert out["relayed"]["relayed"]["resources/subscribe"] == 1


def test_logging_progress_sampling_and_elicitation_reach_the_client_during_the_call() -> None:
    gateway = build_gateway(StandaloneBackend(), [relay_upstream()], token=TOKEN)
    logs: list[str] = []
    progress: list[tuple[float, float | None, str | None]] = []
    asked: list[str] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(f"{params.level}: {params.data}")

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def on_sampling(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        asked.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="forty-two"),
            model="scripted",
        )

    async def on_elicitation(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with (
            serving(gateway) as url,
            mcp_session(
                url,
                logging_callback=on_log,
                sampling_callback=on_sampling,
                elicitation_callback=on_elicitation,
            ) as s,
        ):
            level = types.SetLevelRequest(params=types.SetLevelRequestParams(level="info"))
            await _empty(s, level)
            out["chatty"] = await s.call_tool("chatty", {})
            out["count"] = await s.call_tool("count", {"n": 3}, progress_callback=on_progress)
            out["llm"] = await s.call_tool("ask_llm", {"question": "the answer?"})
            out["user"] = await s.call_tool("ask_user", {"question": "your name?"})
            out["snapshot"] = gateway.relay.snapshot()
        return out

    out = anyio.run(main)
    # the level the client set reached the upstream: no debug line
    assert logs == ["info: a info line", "warning: a warning line"]
    assert text_of(out["count"]) == "counted 3"
    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert text_of(out["llm"]) == "the model said: forty-two"
    assert text_of(out["user"]) == "the user accept: Grace"
    assert asked == ["the answer?", "your name?"]
    assert out["snapshot"]["client_requests"] == 2


def test_an_upstream_request_no_client_can_take_is_refused_not_misrouted() -> None:
    """A client that declared no sampling is not asked; the upstream gets an error."""
    gateway = build_gateway(StandaloneBackend(), [relay_upstream()], token=TOKEN)

    async def main() -> str:
        from mcp.shared.exceptions import MCPError

        async with serving(gateway) as url, mcp_session(url) as s:
            try:
                await s.call_tool("ask_llm", {"question": "anyone?"})
            except MCPError as exc:  # the upstream's tool failed on the refusal
                return exc.error.message
        return "answered"

    assert anyio.run(main) == "the client does not take sampling requests"
    assert gateway.relay.stats.client_requests_refused == 1


def test_the_gateway_offers_what_its_upstreams_offer() -> None:
    gateway = build_gateway(StandaloneBackend(), [shop_stdio()], token=TOKEN)

    async def main() -> tuple[Any, Any]:
        async with serving(gateway) as url, mcp_session(url) as s:
            return s.server_capabilities, gateway.links["shop"].capabilities

    caps, upstream = anyio.run(main)
    assert caps.tools is not None
    for kind in ("resources", "prompts", "logging", "completions"):
        assert (getattr(caps, kind) is None) == (getattr(upstream, kind) is None), kind
    assert upstream.logging is None and caps.logging is None  # the shop logs nothing
