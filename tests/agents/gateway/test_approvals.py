"""Approvals at the gateway: a call the policy holds is not forwarded until an operator
approves exactly that call; approved once, it is forwarded once, and only with those
arguments; denied, it is refused; a blocked call is never offered for approval."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.agents.gateway import Upstream, build_gateway
from sidecar.agents.gateway.guard.approval import ApprovalPolicy, parse_triggers
from sidecar.agents.gateway.guard.backend import GuardReason, GuardVerdict
from sidecar.agents.gateway.guard.library import LibraryBackend
from tests.agents.gateway.conftest import TOKEN, mcp_session, serving, text_of

pytestmark = pytest.mark.integration  # the bank runs as a real subprocess

BANK = str(Path(__file__).with_name("bank_server.py"))
ALICE = {"customer": "alice", "amount": 40}


def _bank() -> Upstream:
    return Upstream("bank", command=(sys.executable, BANK))


def _held_id(text: str) -> str:
    return text.split("(approval ", 1)[1].split(",", 1)[0].split(")", 1)[0]


def test_a_destructive_call_waits_for_an_approval_of_exactly_its_arguments(
    tmp_path: Path,
) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        policy = ApprovalPolicy(parse_triggers("destructive"))
        gateway = build_gateway(LibraryBackend(sc), [_bank()], token=TOKEN, approval=policy)

        async def main() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with serving(gateway) as url, mcp_session(url) as s:
                out["read"] = await s.call_tool("balance", {"customer": "alice"})
                out["held"] = await s.call_tool("refund", ALICE)
                approval = _held_id(text_of(out["held"]))
                out["again"] = await s.call_tool("refund", ALICE)  # still pending
                out["approved"] = sc.approve(approval)
                out["other"] = await s.call_tool("refund", {**ALICE, "amount": 4000})
                out["ran"] = await s.call_tool("refund", ALICE)
                out["once"] = await s.call_tool("refund", ALICE)  # used up: held anew
                out["forwarded"] = gateway.stats.forwarded
            return out

        out = anyio.run(main)
        assert not out["read"].is_error  # read-only: never held
        held = text_of(out["held"])
        assert out["held"].is_error and "Held for approval: refund was not run" in held
        assert "annotated destructive" in held and '"amount": 40' in held
        assert _held_id(text_of(out["again"])) == _held_id(held)
        assert out["other"].is_error and _held_id(text_of(out["other"])) != _held_id(held)
        assert not out["ran"].is_error
        # forwarded once, with exactly the approved arguments
        assert out["ran"].structured_content["refunds_so_far"] == [ALICE]
        assert out["once"].is_error and "Held for approval" in text_of(out["once"])
        assert out["forwarded"] == 2  # balance, and the one approved refund
        statuses = {a.approval_id: a.status for a in sc.approvals()}
        assert statuses[_held_id(held)] == "used"
        assert sorted(statuses.values()) == ["pending", "pending", "used"]
        [asked] = [a for a in sc.approvals() if a.approval_id == _held_id(held)]
        assert (asked.tool, asked.arguments, asked.source) == ("refund", ALICE, "gateway")


def test_a_denied_call_is_refused_and_a_named_tool_is_held_while_waiting(
    tmp_path: Path,
) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        policy = ApprovalPolicy(tools=frozenset({"balance"}), wait_s=30)
        gateway = build_gateway(LibraryBackend(sc), [_bank()], token=TOKEN, approval=policy)

        async def decide_soon() -> None:
            while not sc.approvals("pending"):
                await anyio.sleep(0.05)
            sc.deny(sc.approvals("pending")[0].approval_id)

        async def main() -> dict[str, Any]:
            async with serving(gateway) as url, mcp_session(url) as s:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(decide_soon)
                    # waits for the decision (up to wait_s), then answers it
                    denied = await s.call_tool("balance", {"customer": "bob"})
                refund = await s.call_tool("refund", ALICE)  # not held by this policy
                return {"denied": denied, "refund": refund}

        out = anyio.run(main)
        assert out["denied"].is_error
        assert "an operator denied this call" in text_of(out["denied"])
        assert not out["refund"].is_error


def test_the_policy_holds_by_annotation_by_warning_and_by_name() -> None:
    from mcp.types import Tool, ToolAnnotations

    def tool(**hints: Any) -> Tool:
        return Tool(name="t", input_schema={"type": "object"}, annotations=ToolAnnotations(**hints))

    warn = GuardVerdict("warn", (GuardReason("r1", "e", "ev"),))
    allow = GuardVerdict.allow()
    both = ApprovalPolicy(parse_triggers("destructive, warned"))
    assert both.why({"t"}, tool(destructive_hint=True), allow) is not None
    assert both.why({"t"}, tool(), allow) is None  # no annotation: not taken as destructive
    assert both.why({"t"}, tool(destructive_hint=False), warn) is not None
    assert ApprovalPolicy(tools=frozenset({"t"})).why({"t"}, None, allow) is not None
    assert not ApprovalPolicy().active
    with pytest.raises(ValueError, match="approval triggers"):
        parse_triggers("destructive,always")


def test_a_blocked_call_the_policy_holds_is_never_forwarded_as_a_contest_sample() -> None:
    """get_order is read-only, so contest sampling would forward a blocked call of it;
    the operator holds every call of it, so none is forwarded without a person."""
    from benchmarks.standalone_backend import StandaloneBackend
    from sidecar.agents.gateway.guard.backend import Step
    from sidecar.agents.gateway.guard.contest import ContestPolicy
    from tests.agents.gateway.conftest import shop_stdio

    backend = StandaloneBackend(block_after=2)
    for session in ("forged-1", "forged-2"):
        failed = Step("get_order", {"order_id": "#W3"}, None, "Order service down")
        backend.report_session(session, [failed], "abandoned", None)
    policy = ApprovalPolicy(tools=frozenset({"get_order"}))
    gateway = build_gateway(
        backend,
        [shop_stdio()],
        token=TOKEN,
        approval=policy,
        contest=ContestPolicy(rate=1.0, budget=10),
    )

    async def main() -> Any:
        async with serving(gateway) as url, mcp_session(url) as s:
            return await s.call_tool("get_order", {"order_id": "#W3"})

    answer = anyio.run(main)
    assert answer.is_error and "Refused: get_order was not run" in text_of(answer)
    assert (gateway.stats.contest_samples, gateway.stats.forwarded) == (0, 0)
