"""What an intake batch counts, applied in one transaction: the successes it brings,
the failures its sessions met, the sessions behind each archived chain, and the
requests finished sessions brought to their tools.

A batch that archives chains stages its counters before the chains are published (the
state keeps them as JSON, :meth:`Counters.to_json`), and whoever first sees the
publication done applies them, once (:func:`apply`).  Every counter is keyed by
session, so applying a batch twice counts nothing twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from sidecar.rules import Rules
from sidecar.storage.base import Connection
from sidecar.storage.requests import RequestRow
from sidecar.storage.sightings import Sighted
from sidecar.storage.state import State
from sidecar.storage.uses import Usage


@dataclass
class Counters:
    usage: list[Usage] = field(default_factory=list)
    sighted: list[Sighted] = field(default_factory=list)
    """``(topology, signature, session_key)``: a session met a failure."""
    chain_sessions: list[tuple[str, str]] = field(default_factory=list)
    """``(chain_id, session_key)``: a session behind an archived chain."""
    succeeded: list[tuple[str, str]] = field(default_factory=list)
    """``(tool_id, session_key)``: a call of the tool returned without error, whatever
    the session's outcome (usage evidence for eviction)."""
    requests: list[RequestRow] = field(default_factory=list)
    """The requests finished sessions brought to their tools (usage for lookups)."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "usage": [[u.key, u.topology, list(u.contradicts), u.session] for u in self.usage],
                "sighted": [[list(t), sig, who] for t, sig, who in self.sighted],
                "chain_sessions": [list(c) for c in self.chain_sessions],
                "succeeded": [list(c) for c in self.succeeded],
                "requests": [r.to_json() for r in self.requests],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Counters:
        data = json.loads(text)
        return cls(
            [
                Usage(u[0], tuple(u[1]) if u[1] is not None else None, tuple(u[2]), *u[3:])
                for u in data["usage"]
            ],
            [(tuple(t), sig, who) for t, sig, who in data["sighted"]],
            [(cid, who) for cid, who in data["chain_sessions"]],
            [(tool, who) for tool, who in data.get("succeeded", [])],
            [RequestRow.from_json(r) for r in data.get("requests", [])],
        )


def apply(tx: Connection, state: State, rules: Rules, counters: Counters, now: float) -> int:
    """Count completed runs and the contradictions they bring, record sightings and the
    sessions behind archived chains; whatever a session already counted (a replayed
    report) is not counted again.  Returns the bytes the usage rows grew by."""
    fresh = state.uses.record(tx, counters.usage, now)
    contradicted = Counter(cid for u in fresh for cid in u.contradicts)
    rules.sequences.contradict(tx, contradicted, now)
    rules.sequences.alert(tx, fresh)
    state.sightings.record(tx, counters.sighted, counters.chain_sessions, now)
    state.uses.record_successes(tx, counters.succeeded, now)
    # a request counts the sessions whose success is counted now: a replay brings none
    counted = {u.session for u in fresh}
    grown = state.requests.add(tx, _once(r for r in counters.requests if r.session in counted))
    # a new session meeting an archived chain confirms it
    rules.sequences.confirm(tx, [cid for cid, _session in counters.chain_sessions], now)
    return grown


def _once(rows: Iterable[RequestRow]) -> list[RequestRow]:
    """Each session's row of a tool and outcome once (a batch may carry a session
    twice)."""
    seen: set[tuple[str, str, str, str]] = set()
    out = []
    for r in rows:
        key = (r.tool_id, r.source, r.outcome, r.session)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out
