"""A scripted agent that uses the sidecar as a library: no server, no model calls.

The agent serves a small shop (``get_order``, ``exchange_item``, ``cancel_order``,
``track_package``; an exchange is refused while an order is still pending) and does the
four things an agent runtime does with the sidecar:

1. it adds its tools to the hot index;
2. it reports each session it ran: twenty customers whose exchange on a delivered
   order went through, three whose exchange failed on a pending order (the memory
   needs the successes too: they are what tells it which difference made the others
   fail);
3. it checks the next call before making it, and leaves out a call the memory blocks;
4. it looks up a tool for the next step, with the session so far.

    python examples/library_agent.py [--home DIR]

With no ``--home`` it works in a temporary folder and leaves nothing behind.  It prints
what it does, one line per step; ``tests/integration/test_examples.py`` runs it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from sidecar import Sidecar, Tool
from sidecar.memory import Step

ORDERS = {"#W1": "pending", "#W2": "pending", "#W3": "delivered", "#W4": "pending"}
ORDERS |= {f"#W{n}": "delivered" for n in range(10, 32)}
ORDERS["#W5"] = "pending"  # the new customer's order
CUSTOMERS = [f"#W{n}" for n in range(10, 30)] + ["#W1", "#W2", "#W4"]

TOOLS = [
    Tool("get_order", "Look up an order by its id: its items and delivery status."),
    Tool("exchange_item", "Exchange an item of a delivered order for another one."),
    Tool("cancel_order", "Cancel an order that has not been delivered yet."),
    Tool("track_package", "Track the package of an order: carrier, position, arrival."),
]


# ---- the shop: what the agent's tools really do -------------------------------------
def run_tool(tool: str, arguments: dict[str, Any]) -> Step:
    """One call of the shop, as the step the session records (output, or error)."""
    order_id = arguments["order_id"]
    status = ORDERS.get(order_id)
    if status is None:
        return Step(tool, arguments, None, f"Order not found: {order_id}")
    if tool == "get_order":
        return Step(tool, arguments, {"order_id": order_id, "status": status})
    if tool == "exchange_item" and status != "delivered":
        return Step(tool, arguments, None, "Error: Non-delivered order cannot be exchanged")
    return Step(tool, arguments, {"order_id": order_id, "done": tool})


def exchange_session(order_id: str) -> list[Step]:
    """A customer asks to exchange a shirt: the agent reads the order, then exchanges."""
    return [
        run_tool("get_order", {"order_id": order_id}),
        run_tool("exchange_item", {"order_id": order_id, "item": "blue shirt"}),
    ]


# ---- the agent ---------------------------------------------------------------------
def customer_reports() -> list[dict[str, Any]]:
    """One report per earlier customer's session: refused exchanges and successful ones."""
    reports = []
    for n, order_id in enumerate(CUSTOMERS, 1):
        steps = exchange_session(order_id)
        outcome = "abandoned" if any(s.failed for s in steps) else "completed"
        reports.append(
            {"steps": [s.to_dict() for s in steps], "outcome": outcome, "session_id": f"c-{n}"}
        )
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="sidecar home (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        home = args.home or Path(scratch) / "home"
        with Sidecar.open(home=home) as sc:
            run_agent(sc)
    return 0


def run_agent(sc: Sidecar) -> None:
    added = sc.add_tools(TOOLS)
    print(f"1. added {len(added.added)} tools: {', '.join(added.added)}")

    results = sc.report_many(customer_reports())
    archived = sum(r.status == "archived" for r in results)
    recorded = sum(r.status == "recorded" for r in results)
    print(
        f"2. reported {len(results)} sessions: {archived} archived (the refused exchanges), "
        f"{recorded} recorded (the exchanges that went through)"
    )

    # a new customer: the agent has read the order, and is about to exchange
    steps = [run_tool("get_order", {"order_id": "#W5"})]
    planned = {"order_id": "#W5", "item": "blue shirt"}
    verdict = sc.check_call(steps, "exchange_item", planned)
    print(f"3. check exchange_item({json.dumps(planned)}): {verdict.decision}")
    for reason in verdict.reasons[:1]:
        print(f"   {reason.level}: {reason.explanation}")
        print(f"   because: {reason.evidence}  (audit: {reason.pointer})")
    if verdict.decision == "block":
        print("   the agent does not make the call")

    # lookups take the same steps: a tool whose learned failure the session already
    # sets up comes back marked
    found = sc.search("exchange the shirt, or else cancel the order", 3, steps=steps)
    hits = [f"{h.tool_id}{' (may fail)' if h.warnings else ''}" for h in found.hits]
    print(f"4. look up the next step: {', '.join(hits)}")

    # the same call on a delivered order goes through
    steps = [run_tool("get_order", {"order_id": "#W31"})]
    delivered = sc.check_call(steps, "exchange_item", {"order_id": "#W31", "item": "red shirt"})
    print(f"5. check exchange_item on the delivered #W31: {delivered.decision}")


if __name__ == "__main__":
    raise SystemExit(main())
