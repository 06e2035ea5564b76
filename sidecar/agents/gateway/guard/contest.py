"""Contest sampling: a bounded share of blocked calls is forwarded anyway, so that a block
can still be proved wrong.

A call the memory blocks is never forwarded, so nothing the gateway sees can ever
contradict the block: a rule learned from fabricated reports (poisoning), or from an
upstream since fixed, would stand until an operator lifts it.  With sampling, a blocked
call is forwarded with probability ``rate``, at most ``budget`` times per rule per
``window_s``, and only for tools whose upstream declares them free of side effects
(``readOnlyHint: true``, or ``destructiveHint: false``) unless ``scope`` is ``all``.  The
forwarded call carries the rule's reasons as warnings and ``_meta["sidecar/contest"]``;
its session is reported whatever its outcome, so a success contests the rule (the
memory's own rules then turn the block into a warning, and retire it after enough
successes) and a failure confirms it.

Why these defaults (``rate`` 0.1, ``budget`` 1 per rule per hour, ``scope`` ``safe``): the
cost of a sample is one call the memory expected to fail, made for an agent that did not
choose it.  For a read-only tool that cost is a wasted call at most once an hour per rule,
and it is what lets a poisoned or stale block heal on real traffic, so sampling is on.  A
tool with side effects is another matter: a known-failing write may fail half-way (a
charge taken, an order half-placed), so it is never sampled unless the operator says
``all``; an upstream that annotates nothing is treated as having side effects, as the MCP
specification's defaults say (``destructiveHint`` defaults to true).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sidecar.agents.gateway.guard.backend import GuardReason

if TYPE_CHECKING:
    from mcp.types import Tool

Scope = Literal["safe", "all"]
DEFAULT_RATE = 0.1
DEFAULT_BUDGET = 1
DEFAULT_WINDOW_S = 3600.0


@dataclass(frozen=True)
class ContestPolicy:
    rate: float = DEFAULT_RATE
    """Share of blocked calls forwarded (0: never)."""
    budget: int = DEFAULT_BUDGET
    """Forwarded calls per rule per window, at most."""
    window_s: float = DEFAULT_WINDOW_S
    scope: Scope = "safe"
    """``safe``: only tools annotated read-only or non-destructive; ``all``: any tool."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"contest rate must be from 0 to 1, not {self.rate!r}")
        if self.budget < 0:
            raise ValueError(f"contest budget must be >= 0, not {self.budget!r}")
        if not self.window_s > 0:
            raise ValueError("contest window must be positive")
        if self.scope not in ("safe", "all"):
            raise ValueError(f"contest scope must be 'safe' or 'all', not {self.scope!r}")

    @classmethod
    def off(cls) -> ContestPolicy:
        return cls(rate=0.0, budget=0)


def side_effect_free(tool: Tool | None) -> bool:
    """Whether the upstream declares ``tool`` free of side effects."""
    hints = None if tool is None else tool.annotations
    if hints is None:
        return False
    return hints.read_only_hint is True or hints.destructive_hint is False


def rule_key(reason: GuardReason) -> str:
    return reason.rule_id or f"{reason.rule}|{reason.pointer or ''}"


class Contest:
    """Decides, per blocked call, whether it is forwarded as a sample."""

    def __init__(
        self,
        policy: ContestPolicy | None = None,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or ContestPolicy()
        self._rng = rng
        self._clock = clock
        self._spent: dict[str, list[float]] = {}  # rule -> when its samples went out
        self.sampled = 0

    def sample(self, tool: Tool | None, reasons: Sequence[GuardReason]) -> bool:
        """Whether this blocked call of ``tool`` goes out as a sample; if so, it is
        charged to every rule that blocks it."""
        policy = self.policy
        if policy.rate <= 0 or policy.budget <= 0 or not reasons:
            return False
        if policy.scope == "safe" and not side_effect_free(tool):
            return False
        now = self._clock()
        keys = {rule_key(r) for r in reasons}
        for key in keys:
            recent = [t for t in self._spent.pop(key, []) if now - t < policy.window_s]
            if recent:
                self._spent[key] = recent
            if len(recent) >= policy.budget:
                return False
        if self._rng() >= policy.rate:
            return False
        for key in keys:
            self._spent.setdefault(key, []).append(now)
        self.sampled += 1
        return True

    def snapshot(self) -> dict[str, Any]:
        return {"sampled": self.sampled, "rules_in_window": len(self._spent)}
