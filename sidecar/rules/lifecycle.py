"""How a constraint lives: evidence makes it, successes contest it, enough of them retire
it, an operator may lift or reinstate it.

    active ──(a success that matches it)──> contested ──(retire_after successes)──> retired
       ^                                        │                                     │
       └──────────── reinstated by an operator ─┴─────────────────────────────────────┘
    any ──(lifted by an operator)──> lifted ──(reinstated)──> active

- **active**: enforced (a lookup withholds, a check blocks when the evidence is strong
  enough);
- **contested**: a completed call or run matched it (same sequence, its condition
  holding): it warns but never blocks or withholds;
- **retired**: ``retire_after`` contradictions (or, when age-based decay is on, no new
  failure for ``max_age_days``): not enforced, kept with ``invalid_at`` so that it can be
  read and reinstated;
- **lifted**: an operator stopped enforcing it.

A reinstated constraint counts only the contradictions met after the reinstatement
(its ``baseline`` is the count at that moment).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["active", "contested", "retired", "lifted"]
ENFORCED: frozenset[str] = frozenset({"active", "contested"})
DAY_S = 86_400.0


@dataclass(frozen=True)
class Lifecycle:
    retire_after: int = 3
    """Contradictions (since any reinstatement) that retire a constraint."""
    max_age_days: float = 0.0
    """Retire a constraint no failure has confirmed for this long; 0 turns decay off."""

    def status(
        self,
        lifted: bool,
        contradictions: int,
        baseline: int,
        last_seen: float,
        now: float,
    ) -> Status:
        if lifted:
            return "lifted"
        against = contradictions - baseline
        if against >= self.retire_after:
            return "retired"
        if self.max_age_days > 0 and now - last_seen > self.max_age_days * DAY_S:
            return "retired"
        return "contested" if against > 0 else "active"
