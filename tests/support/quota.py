"""One agent token's attempts to grow the state: sessions of made-up tools, floods of the
catalog's own, and what each per-tool table of the state then names."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

CATALOG = {"get_order", "exchange_items"}


def ghost_steps(n: int, count: int, failing: bool) -> list[dict[str, Any]]:
    """``count`` calls of tools no catalog holds, every other one refused by a business
    rule when ``failing``."""
    steps = []
    for i in range(count):
        tool = f"ghost_{n}_{i}"
        refused = failing and i % 2 == 1
        steps.append({"tool": tool, "arguments": {"id": f"x{n}-{i}", "n": i},
                      "output": None if refused else {"id": f"x{n}-{i}", "status": "ok"},
                      "error": f"Error: invalid id x{n}-{i}" if refused else None})  # fmt: skip
    return steps


def attack(n: int, count: int = 120) -> dict[str, Any]:
    """A session of made-up tools around one call of the catalog's ``get_order``."""
    completed = n % 2 == 0
    order = {"tool": "get_order", "arguments": {"order_id": f"#G{n}"},
             "output": {"order_id": f"#G{n}", "status": "delivered"}, "error": None}  # fmt: skip
    return {
        "steps": [*ghost_steps(n, count, not completed), order],
        "outcome": "completed" if completed else "abandoned",
        "session_id": f"attack-{n}",
        "task_input": f"please do thing number {n}",
    }


def catalog_session(n: int) -> dict[str, Any]:
    steps = []
    for i in range(20):
        order = f"#F{n}-{i}"
        arguments = {"order_id": order, "note": "n" * 200}
        output = {"order_id": order, "status": "delivered"}
        steps.append({"tool": "get_order", "arguments": arguments, "output": output, "error": None})
    return {"steps": steps, "outcome": "completed", "session_id": f"flood-{n}"}


def tools_in(home: Path) -> dict[str, set[str]]:
    """The tools each per-tool table of the state names."""
    db = sqlite3.connect(home / "state.sqlite")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    out = {}
    for table in ("tool_successes", "completed_tools"):
        out[table] = {r[0] for r in db.execute(f"SELECT DISTINCT tool_id FROM {table}")}
    out["conditions"] = {r[0] for r in db.execute("SELECT DISTINCT tool FROM conditions")}
    out["sightings"] = {
        t for (topology,) in db.execute("SELECT topology FROM sighting_sessions")
        for t in json.loads(topology)
    }  # fmt: skip
    for table in ("usage_requests", "usage_request_counts"):
        if table in tables:
            out["usage"] = {r[0] for r in db.execute(f"SELECT DISTINCT tool_id FROM {table}")}
    db.close()
    return out
