"""Forgetting a source: what it reported goes, and everything that rested on it is
derived again — the conditions it taught, the sessions it counted toward sightings,
dead ends and contradictions, and the evictions whose evidence it supplied.

A preview (:func:`preview`) runs the same forgetting on a throwaway copy of the state:
forgetting spans several transactions and the call memory's in-process model, so no
single rollback could undo it, and a copy answers with the very figures the real
forgetting would report."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from sidecar.eviction import Evictor
from sidecar.eviction.recovery import Recovery
from sidecar.intake import Intake
from sidecar.results import Forgotten
from sidecar.rules import Rules
from sidecar.settings import Settings
from sidecar.storage import Database
from sidecar.trust.sources import reached_by_forget


class ForgetTrial(Protocol):
    """What a preview needs of a library opened on the copy."""

    rules: Rules
    intake: Intake
    eviction: Evictor
    recovery: Recovery


def forget(
    source: str,
    since: float | None,
    rules: Rules,
    intake: Intake,
    eviction: Evictor,
    recovery: Recovery,
    restore: bool = True,
) -> Forgotten:
    """Forget ``source``'s evidence (since ``since``, when given), then restore the tools
    whose eviction no longer has enough evidence (through the journaled move; with
    ``restore=False`` they are only named, as a preview on a copy does)."""
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
    if restored and restore:
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


def preview(
    source: str,
    since: float | None,
    settings: Settings,
    state: Database,
    opener: Callable[[Settings], AbstractContextManager[ForgetTrial]],
) -> Forgotten:
    """What :func:`forget` would report, with nothing of ``state`` changed: the state is
    copied into a SQLite database in a temporary home, ``opener`` opens the library on
    it, and the forgetting runs there (the tools it would restore are named, not
    moved); the copy is deleted after."""
    from sidecar.app.home import open_state
    from sidecar.storage.copy import copy_state, tables_of
    from sidecar.storage.state import SCHEMAS

    with tempfile.TemporaryDirectory(prefix="sidecar-forget-preview-") as tmp:
        tokens = settings.tokens_path if settings.tokens_path.exists() else None
        trial = settings.with_(
            home=Path(tmp) / "home",
            database_url=None,
            cold_url=None,
            tokens_file=tokens,
            evict_on_report=False,
            migrate="auto",
        )
        trial.home.mkdir()
        target = open_state(trial, writable=True)
        try:
            copy_state(state, target, tables_of(SCHEMAS))
        finally:
            target.close()
        with opener(trial) as copy:
            return forget(
                source, since, copy.rules, copy.intake, copy.eviction, copy.recovery, False
            )
