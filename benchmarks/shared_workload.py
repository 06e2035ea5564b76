"""What the shared and fleet benchmarks measure with: their sizes, a catalog, the sessions
reported and the steps checked."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchmarks.bench_lookup import WORDS

if TYPE_CHECKING:
    from sidecar.model import Tool


POLL_LIMIT_S = 30.0
"""A replica that has not reflected a write after this long counts as never."""


@dataclass(frozen=True)
class Sizes:
    tools: int
    """Row 1's catalog."""
    constraints: int
    """Row 1's fatal continuations after ``tool_0 > tool_1``."""
    rounds: int
    """Row 1's timed round-robin rounds (each times every operation in both modes)."""
    embedder: str
    """Row 1's embedder: ``onnx`` (the sidecar's default model path) or ``hashing``."""
    sessions_per_client: int
    clients: int
    intake_rounds: int
    breakdown_sessions: int
    """Row 2's in-process breakdown: sessions reported one at a time per backend mix."""
    staleness_trials: int
    move_trials: int
    delta: tuple[int, int, tuple[int, ...], int, int] | None
    """:func:`benchmarks.bench_delta.measure`'s (chains, batch, steps, lookups,
    maintain_every), or ``None`` to leave row 5 out."""


REVISION_CACHE_MS = 250.0
"""``SIDECAR_REVISION_CACHE_MS`` of the cached rows: a replica keeps the revisions it
read for at most this long, less once another replica's write is announced."""


# ---- data ------------------------------------------------------------------------------
def catalog(n: int, rng: random.Random) -> list[Tool]:
    from sidecar import Tool

    tools = [Tool(f"tool_{i}", " ".join(rng.choice(WORDS) for _ in range(12))) for i in range(n)]
    return [*tools, Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")]


def lookup_step(order: str) -> dict[str, Any]:
    return {
        "tool": "get_order",
        "arguments": {"order_id": order},
        "output": {"order_id": order, "status": "pending"},
        "error": None,
    }


def session(n: int, tool: str = "exchange_items") -> dict[str, Any]:
    """A session whose last call fails with a business rule (learned, and archived)."""
    order = f"#S{n}"
    failing = {
        "tool": tool,
        "arguments": {"order_id": order},
        "output": None,
        "error": "Error: Non-delivered order cannot be exchanged",
    }
    return {
        "steps": [lookup_step(order), failing],
        "outcome": "abandoned",
        "session_id": f"bench-{uuid.uuid4().hex}",
    }


def good_session(n: int, tool: str = "exchange_items") -> dict[str, Any]:
    """A session whose exchange of a delivered order succeeds: what the failures are
    contrasted with (a rule no success was ever seen beside is likely by chance, and
    does not warn)."""
    order = f"#G{n}"
    return {
        "steps": [
            {**lookup_step(order), "output": {"order_id": order, "status": "delivered"}},
            {"tool": tool, "arguments": {"order_id": order},
             "output": {"exchanged": True}, "error": None},
        ],
        "outcome": "completed",
        "session_id": f"bench-{uuid.uuid4().hex}",
    }  # fmt: skip


def fatal_chain(topology: list[str], i: int) -> dict[str, Any]:
    return {
        "topology": topology,
        "outcome": "abandoned",
        "failure": {"signature": f"HTTP 413 #{i}", "kind": "deterministic"},
        "constraint": {"rule": f"rule {i}"},
    }
