"""Which steps of each session the call memory has learned, so that a session sent
again longer (a conversation whose later turns extend it, reported after each turn)
teaches its new steps and nothing twice.

``learned_sessions`` (in :mod:`sidecar.callmemory`) says a session was learned;
``learned_steps`` says how many of its steps, with a digest of them: a session sent
again is extended only when it starts with exactly those steps.  A session learned
before this table existed has no row here and is never extended.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from sidecar.memory import Session, Step

SCHEMA = """
CREATE TABLE IF NOT EXISTS learned_steps (
    session_key TEXT PRIMARY KEY, steps INTEGER NOT NULL, digest TEXT NOT NULL
);
"""


def unlearned_from(db: Any, session: Session, now: float) -> int | None:
    """Where learning ``session`` starts: 0 for a session never learned; for one learned
    before and sent again longer with the same first steps (a conversation whose later
    turns extend it), the number learned then; ``None`` when there is nothing new."""
    key, steps = session.session_id, session.steps
    digests = _digests(steps)
    if db.execute("INSERT OR IGNORE INTO learned_sessions VALUES (?, ?)", (key, now)).rowcount:
        db.execute(
            "INSERT INTO learned_steps VALUES (?, ?, ?) ON CONFLICT(session_key) DO UPDATE "
            "SET steps=excluded.steps, digest=excluded.digest",
            (key, len(steps), digests[-1]),
        )
        return 0
    row = db.execute("SELECT steps, digest FROM learned_steps WHERE session_key=?", (key,))
    known = row.fetchone()
    if known is None or len(steps) <= known[0] or digests[known[0]] != known[1]:
        return None
    db.execute(
        "UPDATE learned_steps SET steps=?, digest=? WHERE session_key=?",
        (len(steps), digests[-1], key),
    )
    return int(known[0])


def _digests(steps: Sequence[Step]) -> list[str]:
    """The digest of each prefix of ``steps`` (the empty one first)."""
    running = hashlib.sha256()
    out = [running.hexdigest()]
    for step in steps:
        running.update(json.dumps(step.to_dict(), sort_keys=True, default=str).encode())
        out.append(running.hexdigest())
    return out
