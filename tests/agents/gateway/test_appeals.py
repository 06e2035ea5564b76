"""Appeals at the gateway: an agent whose call was refused contests the block with the
gateway's own ``appeal_block`` (the sidecar MCP server's tool, the same schema), on the
connection that was refused; the appeal is filed for that agent's token, through the
library in this process or a sidecar over HTTP, and waits for an operator."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from indexes import HashingEmbedder
from sidecar import RemoteSidecar, Sidecar
from sidecar.agents.gateway import Upstream, build_gateway
from sidecar.agents.gateway.guard.library import LibraryBackend
from sidecar.review.appeals import MAX_OPEN
from sidecar.trust.principals import Principals
from tests.agents.gateway.conftest import TOKEN, mcp_session, serving, text_of
from tests.serving import serving as serving_sidecar
from tests.support.tokens import TOKENS, tokens_file

pytestmark = pytest.mark.integration  # the bank runs as a real subprocess

BANK = str(Path(__file__).with_name("bank_server.py"))
ALICE = {"customer": "alice", "amount": 40}
REASON = "the account was reopened this morning"


def _failed(n: int) -> dict[str, Any]:
    refund = {"tool": "refund", "arguments": ALICE, "error": "Error: the account is closed"}
    return {"steps": [refund], "outcome": "abandoned", "session_id": f"closed-{n}"}


@contextlib.contextmanager
def _gateway(tmp_path: Path, through: str) -> Iterator[tuple[Sidecar, Any]]:
    """A gateway in front of the bank whose memory blocks ``refund(ALICE)``: the library
    in this process, or the same home served over HTTP (``remote``)."""
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        sc.report_many([_failed(0), _failed(1)])
        assert sc.check_call([], "refund", ALICE).decision == "block"
        principals = Principals.load(tokens_file(tmp_path / "tokens.json"), None)
        with contextlib.ExitStack() as stack:
            memory: Any = sc
            if through == "remote":
                url = stack.enter_context(serving_sidecar(sc, TOKEN))
                memory = stack.enter_context(RemoteSidecar(url, TOKEN))
            bank = Upstream("bank", command=(sys.executable, BANK))
            backend = LibraryBackend(memory)
            yield sc, build_gateway(backend, [bank], token=TOKEN, principals=principals)


@pytest.mark.parametrize("through", ["library", "remote"])
def test_a_refused_agent_appeals_through_the_gateway(tmp_path: Path, through: str) -> None:
    with _gateway(tmp_path, through) as (sc, gateway):

        async def main() -> dict[str, Any]:
            async with serving(gateway) as url, mcp_session(url, token=TOKENS["alice"]) as s:
                listed = {t.name: t for t in (await s.list_tools()).tools}
                refused = await s.call_tool("refund", ALICE)
                ids = json.loads(text_of(refused).split("constraint_ids ", 1)[1].split(" and")[0])
                appeal = {"tool": "refund", "arguments": json.dumps(ALICE), "reason": REASON}
                filed = await s.call_tool("appeal_block", {**appeal, "constraint_ids": ids})
                return {"listed": listed, "refused": refused, "ids": ids, "filed": filed}

        out = anyio.run(main)
        appeals = sc.appeals("open")
    refused = text_of(out["refused"])
    assert out["refused"].is_error and refused.startswith("Refused: refund was not run")
    assert "If this block is wrong, call appeal_block with this tool" in refused
    assert out["ids"] and all(i in refused for i in out["ids"])
    assert not out["filed"].is_error, text_of(out["filed"])
    filed = out["filed"].structured_content
    [appeal] = appeals
    assert filed["appeal_id"] == appeal.appeal_id and filed["status"] == "open"
    assert (appeal.source, appeal.tool, appeal.arguments) == ("gateway:alice", "refund", ALICE)
    assert appeal.reason == REASON and list(appeal.constraint_ids) == out["ids"]
    # the sidecar's own MCP tool, as its server lists it
    from sidecar.shells.mcp_server import appeal_tool

    tool = out["listed"]["appeal_block"]
    assert tool.input_schema == appeal_tool().parameters
    assert tool.description == appeal_tool().description


def test_a_bad_appeal_and_one_past_the_cap_are_tool_errors(tmp_path: Path) -> None:
    with _gateway(tmp_path, "library") as (sc, gateway):

        async def main() -> dict[str, Any]:
            async with serving(gateway) as url, mcp_session(url, token=TOKENS["alice"]) as s:
                no_reason = await s.call_tool("appeal_block", {"tool": "refund"})
                not_json = await s.call_tool(
                    "appeal_block", {"tool": "refund", "reason": "r", "arguments": "{oops"}
                )
                blank = await s.call_tool("appeal_block", {"tool": "refund", "reason": "  "})
                for n in range(MAX_OPEN):
                    sc.appeal("refund", {"n": n}, "filed before", source="gateway:alice")
                capped = await s.call_tool("appeal_block", {"tool": "refund", "reason": REASON})
                # the cap is alice's: the home's token still appeals
                async with mcp_session(url) as home:
                    other = await home.call_tool("appeal_block", {"tool": "refund", "reason": "r"})
                return {
                    "no_reason": no_reason,
                    "not_json": not_json,
                    "blank": blank,
                    "capped": capped,
                    "other": other,
                }

        out = anyio.run(main)
        sources = sorted({a.source for a in sc.appeals("open", 1_000)})
    assert out["no_reason"].is_error
    assert text_of(out["no_reason"]) == "invalid_input: appeal_block `reason`: Field required"
    assert out["not_json"].is_error and "`arguments`" in text_of(out["not_json"])
    assert "not a JSON object" in text_of(out["not_json"])
    assert out["blank"].is_error and text_of(out["blank"]).startswith("invalid_input: ")
    assert out["capped"].is_error
    assert text_of(out["capped"]).startswith(f"rate_limited: 'gateway:alice' has {MAX_OPEN}")
    assert not out["other"].is_error and sources == ["gateway", "gateway:alice"]
