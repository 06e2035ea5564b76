"""Which prefix tools leave the hot index: a pure function of the archive, the usage
evidence and the pins (steps 3 and 4 of the decision boundary in ``docs/design.md``).

For every prefix tool of every rule in force (an abandoned chain, a failing call):

- *keep* it when an operator pinned it, when a completed chain or a successful call
  used it, when an operator restored it after every session that drives it, or when
  fewer than ``min_chains`` dead-end sessions drive it (``SIDECAR_EVICT_MIN_CHAINS``,
  default 2: distinct sessions that met one of its abandoned chains); the chain's
  rule stays in force in lookups and checks;
- *evict* it otherwise: all of its appearances are inside abandoned chains, and
  independent sessions keep dead-ending through it.

Why two sessions by default: "appears only in abandoned chains" judged from a single
dead end is judged from whatever history happens to exist, and on real trajectories it
evicts tools that other tasks need (``BENCHMARKS.md``: one chain cost 3.7-4.5% of viable
recall; the rules alone already stop every re-assembly).  The same reasoning makes an
unknown failure kind wait for a second session before it is archived.

Being a function of its inputs, the decision is deterministic, and a tool that became
reusable is simply kept by the next run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sidecar.model import ArchivedConstraint
from sidecar.settings import DEFAULT_EVICT_MIN_CHAINS

LATE_USE = "used since the decision (a successful call committed before its move)"


@dataclass(frozen=True)
class ToolDecision:
    tool_id: str
    action: Literal["evict", "keep"]
    reason: str
    chains: tuple[str, ...]
    """The abandoned chains in which the tool is a prefix tool (what drove the decision)."""
    completed_chains: int = 0
    pinned: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_id": self.tool_id,
            "action": self.action,
            "reason": self.reason,
            "chains": list(self.chains),
            "completed_chains": self.completed_chains,
            "pinned": self.pinned,
        }


def decide(
    constraints: Iterable[ArchivedConstraint],
    active: set[str],
    pinned: set[str],
    completed: Mapping[str, int],
    restored_at: Mapping[str, float],
    min_chains: int = DEFAULT_EVICT_MIN_CHAINS,
    sessions: Mapping[str, Sequence[float | tuple[str, float]]] | None = None,
    independent: Callable[[set[str]], bool] | None = None,
) -> list[ToolDecision]:
    """One decision per prefix tool that is in the hot index, sorted by tool id.

    ``sessions``: for each chain, when each distinct session met it, with the session's
    source (by default, one session of the local source when it was archived).  A tool
    is evicted once ``min_chains`` dead-end sessions drive it, and ``independent`` says
    their sources are enough (two sources, or a trusted one: see
    :mod:`sidecar.rules.standing`); after an operator's restore, only sessions since
    count: the restore says the old evidence no longer holds.  A tool is never a prefix
    tool of its own failure (a session that retried a call is not a dead end through
    it)."""
    if min_chains < 1:
        raise ValueError(f"min_chains must be at least 1, got {min_chains}")
    drivers: dict[str, list[ArchivedConstraint]] = {}
    for c in constraints:
        for tool in dict.fromkeys(c.prefix):
            if tool != c.terminal:
                drivers.setdefault(tool, []).append(c)
    met = {cid: [_entry(e) for e in found] for cid, found in (sessions or {}).items()}
    judge = independent or (lambda _sources: True)
    return [
        _decide_tool(tool, drivers[tool], pinned, completed.get(tool, 0),
                     restored_at.get(tool), min_chains, met, judge)
        for tool in sorted(drivers)
        if tool in active
    ]  # fmt: skip


def _entry(found: float | tuple[str, float]) -> tuple[str, float]:
    return found if isinstance(found, tuple) else ("local", float(found))


def _decide_tool(
    tool: str,
    chains: list[ArchivedConstraint],
    pinned: set[str],
    uses: int,
    since: float | None,
    min_chains: int,
    met: Mapping[str, Sequence[tuple[str, float]]],
    independent: Callable[[set[str]], bool],
) -> ToolDecision:
    ids = tuple(sorted(c.chain_id for c in chains))
    latest = max(c.archived_at for c in chains)
    dead_ends = [
        (source, at)
        for c in chains
        for source, at in (met.get(c.chain_id) or (("local", c.archived_at),))
        if since is None or at > since
    ]
    counted = len(dead_ends)
    sources = {source for source, _ in dead_ends}
    if tool in pinned:
        return ToolDecision(tool, "keep", "pinned by an operator", ids, uses, True)
    if uses:
        why = f"used: {uses} completed chain(s) or session(s) with a successful call"
        return ToolDecision(tool, "keep", why, ids, uses)
    if since is not None and since >= latest and counted == 0:
        return ToolDecision(tool, "keep", "restored by an operator after its chains", ids)
    if counted < min_chains:
        after = " since its restore" if since is not None else ""
        why = f"{counted} dead-end session(s) through it{after}; eviction needs {min_chains}"
        return ToolDecision(tool, "keep", why, ids)
    if not independent(sources):
        why = (
            f"{counted} dead-end session(s) through it, all from {', '.join(sorted(sources))}: "
            "eviction needs two sources or a trusted one"
        )
        return ToolDecision(tool, "keep", why, ids)
    return ToolDecision(tool, "evict", "appears only in abandoned chains", ids)


@dataclass(frozen=True)
class EvictionReport:
    dry_run: bool
    evicted: tuple[ToolDecision, ...]
    kept: tuple[ToolDecision, ...]
    mandates: int
    reclaimed: Mapping[str, Any]
    recovered_moves: int
    duration_s: float
    pointers: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "evicted": [
                {**d.to_dict(), "pointer": self.pointers.get(d.tool_id)} for d in self.evicted
            ],
            "kept_with_constraint": [d.to_dict() for d in self.kept],
            "mandates": self.mandates,
            "reclaimed": dict(self.reclaimed),
            "recovered_moves": self.recovered_moves,
            "duration_s": round(self.duration_s, 3),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvictionReport:
        def decision(d: Mapping[str, Any]) -> ToolDecision:
            return ToolDecision(
                d["tool_id"],
                d["action"],
                d["reason"],
                tuple(d["chains"]),
                int(d.get("completed_chains", 0)),
                bool(d.get("pinned", False)),
            )

        return cls(
            dry_run=bool(data["dry_run"]),
            evicted=tuple(decision(d) for d in data["evicted"]),
            kept=tuple(decision(d) for d in data["kept_with_constraint"]),
            mandates=int(data["mandates"]),
            reclaimed=dict(data["reclaimed"]),
            recovered_moves=int(data["recovered_moves"]),
            duration_s=float(data["duration_s"]),
            pointers={d["tool_id"]: d["pointer"] for d in data["evicted"] if d.get("pointer")},
        )


_WORDPIECE = re.compile(r"\w+|[^\w\s]")


def approximate_tokens(text: str) -> int:
    """Words and punctuation: the token count when no model tokenizer is at hand."""
    return len(_WORDPIECE.findall(text))


@dataclass(frozen=True)
class Policy:
    min_chains: int = DEFAULT_EVICT_MIN_CHAINS
    batch_size: int = 500


@dataclass(frozen=True)
class RestoreResult:
    tool_id: str
    pointer: str
    lifted: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"tool_id": self.tool_id, "pointer": self.pointer, "lifted": list(self.lifted)}
