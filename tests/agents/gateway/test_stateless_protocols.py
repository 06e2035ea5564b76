"""A client that keeps no MCP session, protected as soon as and as well as one that does,
with the gateway's defaults: a real ``mcp`` client opening a session per call, the
gateway over streamable HTTP, the shop and a clock as real subprocesses, and a real
sidecar home learning from what the gateway saw.

- a failing call is evidence as it comes back: a second agent's identical call is judged
  with it at once (no link window to wait for);
- the very call that failed for two agents is refused from the third;
- three agents failing on three pending orders, eleven succeeding on delivered ones: a
  fourth agent's exchange of a pending order is refused, as for a client that keeps its
  session, and exchanges of delivered orders come back with no warning;
- behind an upstream whose calls share no value (nothing to link), the very call that
  failed twice is refused all the same."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.agents.gateway import Upstream, build_gateway
from sidecar.agents.gateway.guard.answers import WARNING_PREFIX, WARNINGS_META_KEY
from sidecar.agents.gateway.guard.library import LibraryBackend
from sidecar.agents.gateway.server import Gateway
from tests.agents.gateway.conftest import TOKEN, eventually, serving, shop_stdio, text_of
from tests.agents.gateway.stateless_client import call

pytestmark = pytest.mark.integration

CLOCK = str(Path(__file__).with_name("clock_server.py"))


def gateway_for(sc: Sidecar) -> Gateway:
    """The gateway as ``sidecar gateway`` builds it by default: successes are evidence
    too, every other setting its default (a link window of 120 s)."""
    clock = Upstream("clock", command=(sys.executable, CLOCK))
    return build_gateway(LibraryBackend(sc), [shop_stdio(), clock], token=TOKEN, report_clean=True)


async def agent(url: str, order: str) -> Any:
    """One agent's task, a session per call: look the order up, exchange its shirt."""
    await call(url, "get_order", {"order_id": order})
    return await call(url, "exchange", {"order_id": order, "item": "blue shirt"})


def refused(result: Any) -> bool:
    return bool(result.is_error) and text_of(result).startswith("Refused:")


def warned(result: Any) -> bool:
    return WARNINGS_META_KEY in (result.meta or {}) or WARNING_PREFIX in text_of(result)


def test_the_very_call_that_failed_is_warned_at_once_and_refused_from_the_third_try(
    tmp_path: Path,
) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        gateway = gateway_for(sc)

        async def main() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with serving(gateway) as url:
                for n in range(6, 12):
                    await agent(url, f"#W{n}")
                out["first"] = await agent(url, "#W1")
                started = time.monotonic()
                while True:  # the second agent, a moment later: judged with the first's
                    out["second"] = await agent(url, "#W1")
                    if warned(out["second"]) or time.monotonic() - started > 5:
                        break
                forwarded = gateway.stats.forwarded
                out["third"] = await agent(url, "#W1")
                out["forwarded"] = gateway.stats.forwarded - forwarded
                async with httpx.AsyncClient() as http:
                    out["metrics"] = await http.get(
                        url.removesuffix("/mcp") + "/metrics",
                        headers={"Authorization": f"Bearer {TOKEN}"},
                    )
            return out

        out = anyio.run(main)
        assert out["first"].is_error and not warned(out["first"])
        assert warned(out["second"]) and not refused(out["second"])
        assert refused(out["third"])
        assert out["forwarded"] == 1  # the lookup; the exchange was not sent
        assert gateway.stats.evidence_reports >= 2
        metrics = out["metrics"].text
        assert out["metrics"].status_code == 200, metrics
        # how long the failing calls' evidence waited, for the operator
        waited = [ln for ln in metrics.splitlines() if ln.startswith("sidecar_gateway_evidence_")]
        assert float(waited[0].split()[1]) >= 2 and len(waited) == 3, metrics


def test_three_situations_refuse_the_fourth_and_leave_delivered_orders_alone(
    tmp_path: Path,
) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        gateway = gateway_for(sc)

        async def main() -> dict[str, Any]:
            async with serving(gateway) as url:
                for order in ("#W40", "#W41", "#W42"):
                    assert (await agent(url, order)).is_error
                done = [await agent(url, f"#W{n}") for n in range(6, 17)]
                # within seconds: their sessions quiet for settle_s are evidence, as a
                # session a client closes is at once
                await eventually(lambda: gateway.book.stats.settled >= 11)
                fourth = await agent(url, "#W43")
                delivered = [await agent(url, f"#W{n}") for n in range(17, 21)]
            return {"done": done, "fourth": fourth, "delivered": delivered}

        out = anyio.run(main)
        assert refused(out["fourth"]), text_of(out["fourth"])
        for result in out["delivered"]:
            assert not result.is_error and not warned(result), text_of(result)


def test_an_upstream_whose_calls_share_nothing_still_teaches_the_very_call(
    tmp_path: Path,
) -> None:
    """``current_time`` shows no id-like value: no two calls are ever linked, yet the
    zone that failed twice is refused, and a valid zone is not."""
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        gateway = gateway_for(sc)

        async def main() -> list[Any]:
            async with serving(gateway) as url:
                for zone in ("Europe/Paris", "Asia/Tokyo", "America/Lima"):
                    assert not (await call(url, "current_time", {"timezone": zone})).is_error
                results = []
                for _ in range(4):
                    results.append(await call(url, "current_time", {"timezone": "Mars/Olympus"}))
                    await anyio.sleep(0.5)  # the evidence of the call before is in
                results.append(await call(url, "current_time", {"timezone": "Europe/Oslo"}))
            return results

        *bad, good = anyio.run(main)
        assert [r.is_error for r in bad] == [True] * 4
        assert not refused(bad[0]) and not refused(bad[1])
        assert refused(bad[2]) and refused(bad[3])
        assert not good.is_error
        assert gateway.linker.stats["linked"] == 0  # nothing was ever linked
