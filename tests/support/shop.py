"""An order shop's sessions, as the memory's tests and benchmarks report them: a lookup
of an order, then an exchange that a pending order refuses."""

from __future__ import annotations

from typing import Any

from sidecar import Sidecar

REFUSAL = "Error: Non-delivered order cannot be exchanged"


def lookup(order: str, status: str, items: int = 1) -> dict[str, Any]:
    return {
        "tool": "get_order",
        "arguments": {"order_id": order},
        "output": {"order_id": order, "status": status, "items": [f"i{n}" for n in range(items)]},
        "error": None,
    }


def exchange(order: str, error: str | None = None) -> dict[str, Any]:
    return {
        "tool": "exchange_items",
        "arguments": {"order_id": order, "item_ids": ["i1"]},
        "output": None if error else {"order_id": order, "status": "exchange requested"},
        "error": error,
    }


def failing_session(n: int) -> dict[str, Any]:
    """An agent that exchanges a pending order: refused."""
    order = f"#A{1000 + n}"
    return {
        "steps": [lookup(order, "pending"), exchange(order, REFUSAL)],
        "outcome": "abandoned",
        "session_id": f"fail-{n}",
    }


def good_session(n: int) -> dict[str, Any]:
    order = f"#B{2000 + n}"
    return {
        "steps": [lookup(order, "delivered"), exchange(order)],
        "outcome": "completed",
        "session_id": f"ok-{n}",
    }


SUCCESSES = 20
"""Enough successes for a condition met in a few situations to beat chance."""


def teach(sc: Sidecar, failing: int = 3, good: int = SUCCESSES) -> None:
    sc.report_many([good_session(n) for n in range(good)])
    sc.report_many([failing_session(n) for n in range(failing)])
