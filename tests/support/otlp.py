"""Agent turns sent to a served sidecar as OTLP/JSON, and the sweep that delivers them."""

from __future__ import annotations

import json
from typing import Any

from starlette.testclient import TestClient

from sidecar import Sidecar
from tests.agents.otlp.bodies import agent_turn, request, trace_id
from tests.support.shop import REFUSAL


def traces(who: str, n: int) -> dict[str, Any]:
    """A failing exchange of a pending order as one agent turn, sent as OTLP/JSON."""
    order = f"#{who[0].upper()}{7000 + n}"
    calls = [
        {"tool": "get_order", "arguments": {"order_id": order},
         "result": {"order_id": order, "status": "pending", "items": ["i0"]}},
        {"tool": "exchange_items", "arguments": {"order_id": order, "item_ids": ["i1"]},
         "error": REFUSAL},
    ]  # fmt: skip
    return request(agent_turn(trace_id(n + (0 if who == "alice" else 500)), None, calls))


def post_traces(client: TestClient, token: str, body: dict[str, Any]) -> int:
    answer = client.post(
        "/v1/traces",
        content=json.dumps(body),
        headers={"Authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    return answer.status_code


def settle(sc: Sidecar, client: TestClient) -> None:
    """Close every open trace now and deliver its sessions (as the sweep would)."""
    assembler = client.app.api.state.traces  # type: ignore[attr-defined]
    assembler.deliver(assembler.flush())
