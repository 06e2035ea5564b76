"""One upstream must not freeze the gateway: a misbehaving upstream (a real subprocess,
``rogue_server.py``) in front of a real gateway and a real MCP client.  Ordering, never
time, decides: a timeout is the behaviour under test, not a measurement."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.gateway import Upstream, build_gateway
from sidecar.agents.gateway.guard import calls as gateway_server
from sidecar.agents.gateway.proxy.catalog import valid_name
from tests.agents.gateway.conftest import TOKEN, eventually, mcp_session, serving, text_of

pytestmark = pytest.mark.integration

ROGUE = str(Path(__file__).with_name("rogue_server.py"))
SECRET = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0P9o8"


def rogue(name: str = "rogue", *flags: str) -> Upstream:
    return Upstream(name, command=(sys.executable, ROGUE, *flags))


def test_another_sessions_call_completes_while_a_huge_result_is_still_being_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A's 3 MB result is held in the middle of becoming evidence (on its worker
    thread); B's call, in another session, must go through meanwhile.  Were the evidence
    built on the event loop, B could never complete before A is released."""
    entered, release = threading.Event(), threading.Event()
    build = gateway_server.step_from_result

    def held(*args: Any, **kwargs: Any) -> Any:
        if sum(len(getattr(c, "text", "")) for c in kwargs["content"]) > 1_000_000:
            entered.set()
            release.wait(60)
        return build(*args, **kwargs)

    monkeypatch.setattr(gateway_server, "step_from_result", held)
    gateway = build_gateway(StandaloneBackend(), [rogue()], token=TOKEN)
    order: list[str] = []

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with (
            serving(gateway) as url,
            mcp_session(url, max_event=None) as a,
            mcp_session(url) as b,
        ):

            async def big() -> None:
                out["a"] = await a.call_tool("flood", {"mb": 3})
                order.append("a done")

            async with anyio.create_task_group() as tg:
                tg.start_soon(big)
                with anyio.fail_after(60):  # a deadlock guard, not a measurement
                    while not entered.is_set():
                        await anyio.sleep(0.01)
                    out["b"] = await b.call_tool("echo", {"x": 7})
                order.append("b done")
                release.set()
            out["steps"] = {k: gateway.book.steps(k) for k in list(gateway.book._sessions)}
        return out

    out = anyio.run(main)
    assert order == ["b done", "a done"]
    assert text_of(out["b"]) == "7"
    assert len(text_of(out["a"])) == 3_000_000  # the agent gets its result whole
    [flood_step] = [s for steps in out["steps"].values() for s in steps if s.tool == "flood"]
    # the evidence is capped, redacted, and says how much it left out
    assert isinstance(flood_step.output, str) and len(flood_step.output) < 5_000
    assert SECRET not in flood_step.output and "[REDACTED]" in flood_step.output
    assert "truncated" in flood_step.output


def test_a_call_the_upstream_does_not_answer_in_time_is_a_clear_error() -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [rogue()], token=TOKEN, call_timeout_s=0.5)

    async def main() -> dict[str, Any]:
        async with serving(gateway) as url, mcp_session(url) as s:
            slow = await s.call_tool("sleepy", {"seconds": 30})
            after = await s.call_tool("echo", {"x": 1})  # the link is still up
            steps = gateway.book.steps(next(iter(gateway.book._sessions)))
        return {"slow": slow, "after": after, "steps": steps}

    out = anyio.run(main)
    assert out["slow"].is_error
    assert text_of(out["slow"]) == (
        "upstream rogue: sleepy did not answer within 0.5 s (the gateway's call timeout, "
        "SIDECAR_GATEWAY_CALL_TIMEOUT); the call was cancelled upstream"
    )
    assert text_of(out["after"]) == "1"
    assert out["steps"][0].error == "timed out after 0.5 s"  # evidence, like any failure
    assert gateway.links["rogue"].connects == 1
    assert gateway.stats.timeouts == 1


def test_tool_names_outside_the_grammar_are_mapped_at_start_and_at_run_time() -> None:
    backend = StandaloneBackend()
    gateway = build_gateway(backend, [rogue()], token=TOKEN, refresh_s=3600)
    slash, space = valid_name("files/read"), valid_name("read file")

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with serving(gateway) as url, mcp_session(url) as s:
            out["before"] = {t.name for t in (await s.list_tools()).tools}
            await s.call_tool("rename", {})  # the upstream now lists the two bad names
            await eventually(lambda: slash in {t.name for t in gateway.catalog.tools()})
            out["after"] = {t.name for t in (await s.list_tools()).tools}
            out["read"] = await s.call_tool(slash, {"path": "/etc/hosts"})
            out["read_too"] = await s.call_tool(space, {"path": "a b"})
        return out

    out = anyio.run(main)
    assert slash not in out["before"] and "echo" in out["before"]
    assert {slash, space} <= out["after"]
    assert slash.startswith("files_read_") and space.startswith("read_file_") and slash != space
    # forwarded under the upstream's own name
    assert text_of(out["read"]) == "contents of /etc/hosts"
    assert text_of(out["read_too"]) == "contents of a b"
    assert {slash, space} <= set(backend.tools)  # synced under the valid names


def test_an_upstream_with_bad_names_from_the_start_serves_on_the_library(tmp_path: Path) -> None:
    from indexes import HashingEmbedder
    from sidecar import Sidecar
    from sidecar.agents.gateway.guard.library import LibraryBackend

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        gateway = build_gateway(LibraryBackend(sc), [rogue("rogue", "--bad-names")], token=TOKEN)

        async def main() -> Any:
            async with serving(gateway) as url, mcp_session(url) as s:
                return await s.call_tool(valid_name("files/read"), {"path": "x"})

        result = anyio.run(main)
        assert text_of(result) == "contents of x"
        assert valid_name("files/read") in {t.tool_id for t in sc.list_tools()}


def test_a_result_nested_past_the_parsers_limit_reaches_the_agent_as_text() -> None:
    gateway = build_gateway(StandaloneBackend(), [rogue()], token=TOKEN)

    async def main() -> tuple[Any, Any]:
        async with serving(gateway) as url, mcp_session(url) as s:
            result = await s.call_tool("deep", {"levels": 1_800})
            [key] = list(gateway.book._sessions)
            return result, gateway.book.steps(key)

    result, steps = anyio.run(main)
    assert not result.is_error and text_of(result) == "[" * 1_800 + "]" * 1_800
    assert steps[0].error is None and isinstance(steps[0].output, str)  # kept as text
