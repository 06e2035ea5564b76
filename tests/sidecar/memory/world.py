"""A small hand-written shop for the memory's tests: orders with a status, items and
payments, products with variants, accounts found by email.

Every order belongs to its own user and is paid with its own card unless a test says
otherwise, so that sessions on different orders are independent situations; and the
worlds hold enough successes for a learned condition to beat chance (a condition seen
in two situations against four successes is exactly what chance produces)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sidecar.memory import FailureMemory, Session, Step

NOT_DELIVERED = "Error: Non-delivered order cannot be refunded"
NOT_FOUND = "Error: Account not found"
COUNT_MISMATCH = "Error: The number of items to swap should match"


SUCCESSES = 20


def own(order_id: str, prefix: str) -> str:
    """An id of the order's own (its user, its card): ``#A2001`` -> ``card_2001``."""
    return f"{prefix}_{''.join(ch for ch in order_id if ch.isdigit())}"


def order(
    order_id: str,
    status: str = "delivered",
    items: Sequence[str] = ("1000000001",),
    payments: Sequence[str] | None = None,
    user: str | None = None,
) -> dict[str, Any]:
    payments = payments if payments is not None else (own(order_id, "card"),)
    user = user or own(order_id, "user")
    return {
        "order_id": order_id,
        "user_id": user,
        "status": status,
        "items": [{"name": "Desk Lamp", "item_id": i, "price": 20.0} for i in items],
        "payment_history": [
            {"transaction_type": "payment", "amount": 20.0, "payment_method_id": p}
            for p in payments
        ],
    }


def product(variants: dict[str, bool], price: float = 20.0) -> dict[str, Any]:
    return {
        "product_id": "9000000001",
        "name": "Desk Lamp",
        "variants": {
            v: {"item_id": v, "available": ok, "price": price} for v, ok in variants.items()
        },
    }


def step(
    tool: str, arguments: dict[str, Any], output: Any = None, error: str | None = None
) -> Step:
    if isinstance(output, dict | list):
        output = json.dumps(output)
    return Step(tool, arguments, None if error else output, error)


def get_order(o: dict[str, Any]) -> Step:
    return step("get_order", {"order_id": o["order_id"]}, o)


def refund(order_id: str, items: Sequence[str], payment: str, error: str | None = None) -> Step:
    args = {"order_id": order_id, "item_ids": list(items), "payment_method_id": payment}
    return step("refund_order", args, {"ok": True}, error)


def session(sid: str, *steps: Step, task_input: str | None = None) -> Session:
    failed = any(s.error for s in steps)
    return Session(sid, tuple(steps), "abandoned" if failed else "completed", task_input)


def learned(sessions: Iterable[Session]) -> FailureMemory:
    memory = FailureMemory()
    for s in sessions:
        memory.add_session(s)
    return memory


def refund_world(
    failing_orders: Sequence[str] = ("#A1001", "#A1002", "#A1003"),
    successes: int = SUCCESSES,
) -> list[Session]:
    """Refunds of delivered orders succeed (``successes`` sessions, first); refunds of
    pending orders fail (one session per failing order, after)."""
    out = []
    for n in range(successes):
        oid = f"#A20{n:02d}"
        o = order(oid, "delivered")
        out.append(session(f"ok-{n}", get_order(o), refund(oid, ["1000000001"], own(oid, "card"))))
    for n, oid in enumerate(failing_orders):
        o = order(oid, "pending")
        out.append(
            session(
                f"fail-{n}",
                get_order(o),
                refund(oid, ["1000000001"], own(oid, "card"), NOT_DELIVERED),
            )
        )
    return out
