"""Forgetting a source: what it reported goes, and everything that rested on it is
derived again — the conditions it taught, the sessions it counted toward sightings,
dead ends and contradictions, and the evictions whose evidence it supplied."""

from __future__ import annotations

from sidecar.eviction import Evictor
from sidecar.eviction.recovery import Recovery
from sidecar.intake import Intake
from sidecar.results import Forgotten
from sidecar.rules import Rules
from sidecar.trust.sources import reached_by_forget


def forget(
    source: str,
    since: float | None,
    rules: Rules,
    intake: Intake,
    eviction: Evictor,
    recovery: Recovery,
) -> Forgotten:
    """Forget ``source``'s evidence (since ``since``, when given), then restore the tools
    whose eviction no longer has enough evidence (through the journaled move)."""
    unfounded = set(eviction.unfounded())
    sessions: set[str] = set()
    conditions = constraints = 0
    tools: set[str] = set()
    for name in reached_by_forget(source):  # a token's evidence, whatever the route
        memory = rules.conditions.forget(name, since)
        sequences = intake.forget(name, since)
        sessions |= memory.sessions | sequences.sessions
        conditions += memory.conditions
        constraints += sequences.constraints
        tools |= memory.tools
    restored = [t for t in eviction.unfounded() if t not in unfounded]
    if restored:
        recovery.moves_ready()
        why = f"forgotten: the evidence of its eviction came from {source}"
        for tool in restored:
            eviction.restore(tool, why, lambda _chains: [])
    return Forgotten(
        source=source,
        sessions=len(sessions),
        conditions=conditions,
        constraints=constraints,
        tools=tuple(sorted(tools)),
        restored=tuple(restored),
    )
