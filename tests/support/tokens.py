"""Named tokens as the trust tests hold them: two agents and an operator, a tokens file
naming the agents, a poisoner's fabricated session, a request under a token."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from sidecar import Sidecar
from tests.support.shop import REFUSAL, exchange, lookup

OPERATOR = "operator-token-0123456789"
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}


def fabricated(n: int, who: str) -> dict[str, Any]:
    """A failing exchange of a pending order, as a poisoner would write it."""
    order = f"#{who[0].upper()}{5000 + n}"
    return {
        "steps": [lookup(order, "pending"), exchange(order, REFUSAL)],
        "outcome": "abandoned",
        "session_id": f"{who}-{n}",
    }


def tokens_file(path: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "tokens": [
                    {"name": "alice", "role": "agent", "token": TOKENS["alice"]},
                    {
                        "name": "bob",
                        "role": "agent",
                        "token_sha256": hashlib.sha256(TOKENS["bob"].encode()).hexdigest(),
                    },
                ]
            }
        )
    )
    return path


def post(client: TestClient, token: str, path: str, body: Any) -> Any:
    return client.post(path, json=body, headers={"Authorization": f"Bearer {token}"})


def verdict(sc: Sidecar) -> str:
    steps = [lookup("#C3000", "pending")]
    return sc.check_call(steps, "exchange_items", {"order_id": "#C3000"}).decision
