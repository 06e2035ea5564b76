"""Uses: which sessions succeeded, what they completed and which fatal sequences their
successes contradicted (the evidence that keeps a tool; lookups learn from requests in
:mod:`sidecar.storage.requests`).

- ``usage_sessions``: whose success was counted (a session and what it completed), so a
  replayed report counts its completed run, and the constraints it contradicts, once;
- ``usage_evidence``: the same, with the session (whose source can be forgotten), the
  topology it completed and the chains it contradicted;
- ``completed_chains`` / ``completed_tools``: the completed runs per topology, and per
  tool the distinct completed chains that used it;
- ``tool_successes``: the sessions in which a call of the tool returned without error,
  whatever the session's outcome (a tool that succeeds is never evicted for the dead
  ends of the sessions it served).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sidecar.storage.base import Connection, Database
from sidecar.storage.credentials import CHUNK
from sidecar.storage.filters import SessionFilter
from sidecar.storage.revisions import RevisionRepository

_COMPACT = json.JSONEncoder(separators=(",", ":"))


def topology_key(topology: Sequence[str], signature: str = "") -> str:
    payload = _COMPACT.encode([list(topology), signature])
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True)
class Usage:
    """What one session's success counts for, once: a completed run of ``topology``
    (if any) and the constraints it contradicts (a chain id per contradiction)."""

    key: str
    """The session and what it completed: a replayed report has the same key."""
    topology: tuple[str, ...] | None
    contradicts: tuple[str, ...] = ()
    session: str = ""
    """The session key (whose source can be forgotten)."""


@dataclass(frozen=True)
class ForgottenUsage:
    sessions: set[str]
    contradicted: list[str]
    """Chain ids whose contradictions the forgotten sessions brought, one per
    contradiction."""


class UsesRepository:
    SCHEMA: ClassVar[str] = """
CREATE TABLE IF NOT EXISTS completed_chains (
    chain_key TEXT PRIMARY KEY, topology TEXT NOT NULL, times INTEGER NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS completed_tools (
    tool_id TEXT PRIMARY KEY, chains INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS usage_sessions (usage_key TEXT PRIMARY KEY, seen_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS usage_evidence (
    usage_key TEXT PRIMARY KEY, session_key TEXT NOT NULL, topology TEXT,
    contradicts TEXT NOT NULL, seen_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tool_successes (
    tool_id TEXT NOT NULL, session_key TEXT NOT NULL, seen_at REAL NOT NULL,
    PRIMARY KEY (tool_id, session_key)
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    # ---- writes ------------------------------------------------------------------------
    def record(self, tx: Connection, usage: Iterable[Usage], now: float) -> list[Usage]:
        """Count each session's success once (a replay counts nothing); returns the
        successes counted now."""
        fresh_ones: list[Usage] = []
        for u in usage:
            fresh = tx.execute(
                "INSERT OR IGNORE INTO usage_sessions VALUES (?, ?)", (u.key, now)
            ).rowcount
            if not fresh:
                continue
            topology = json.dumps(list(u.topology)) if u.topology else None
            tx.execute(
                "INSERT OR IGNORE INTO usage_evidence VALUES (?, ?, ?, ?, ?)",
                (u.key, u.session, topology, json.dumps(list(u.contradicts)), now),
            )
            if u.topology:
                self._complete(tx, u.topology, now)
            fresh_ones.append(u)
        return fresh_ones

    def record_successes(
        self, tx: Connection, succeeded: Iterable[tuple[str, str]], now: float
    ) -> None:
        """``(tool_id, session_key)``: a call of the tool returned without error."""
        tx.executemany(
            "INSERT OR IGNORE INTO tool_successes VALUES (?, ?, ?)",
            [(tool, session, now) for tool, session in succeeded],
        )

    @staticmethod
    def _complete(tx: Connection, topology: Sequence[str], now: float) -> None:
        RevisionRepository.bump(tx, "usage_rev")
        key = topology_key(topology)
        row = tx.execute("SELECT times FROM completed_chains WHERE chain_key=?", (key,)).fetchone()
        if row is not None:
            tx.execute(
                "UPDATE completed_chains SET times = times + 1, last_seen=? WHERE chain_key=?",
                (now, key),
            )
            return
        tx.execute(
            "INSERT INTO completed_chains VALUES (?, ?, 1, ?, ?)",
            (key, json.dumps(list(topology)), now, now),
        )
        tx.executemany(
            "INSERT INTO completed_tools VALUES (?, 1) "
            "ON CONFLICT(tool_id) DO UPDATE SET chains = completed_tools.chains + 1",
            [(tool,) for tool in set(topology)],
        )

    @staticmethod
    def _uncomplete(tx: Connection, topology: Sequence[str]) -> None:
        RevisionRepository.bump(tx, "usage_rev")
        key = topology_key(topology)
        row = tx.execute("SELECT times FROM completed_chains WHERE chain_key=?", (key,)).fetchone()
        if row is None:
            return
        if int(row[0]) > 1:
            tx.execute("UPDATE completed_chains SET times = times - 1 WHERE chain_key=?", (key,))
            return
        tx.execute("DELETE FROM completed_chains WHERE chain_key=?", (key,))
        for tool in set(topology):
            tx.execute("UPDATE completed_tools SET chains = chains - 1 WHERE tool_id=?", (tool,))
        tx.execute("DELETE FROM completed_tools WHERE chains <= 0")

    def add_contradiction(self, tx: Connection, usage_key: str, chain_id: str) -> None:
        """A completed run counted before a fatal sequence was archived contradicts it
        too (so that forgetting the run takes the contradiction back)."""
        row = tx.execute(
            "SELECT contradicts FROM usage_evidence WHERE usage_key=?", (usage_key,)
        ).fetchone()
        against = [*json.loads(row[0]), chain_id] if row else [chain_id]
        tx.execute(
            "UPDATE usage_evidence SET contradicts=? WHERE usage_key=?",
            (json.dumps(against), usage_key),
        )

    def forget(self, tx: Connection, which: SessionFilter) -> ForgottenUsage:
        """Uncount every success of the sessions ``which`` names: their completed runs,
        the successful calls they counted; returns the sessions and the contradictions
        their successes brought."""
        where, args = which.where()
        sessions = {
            r[0]
            for table in ("usage_evidence", "tool_successes")
            for r in tx.execute(f"SELECT session_key FROM {table} WHERE {where}", args)
        }
        tx.execute(f"DELETE FROM tool_successes WHERE {where}", args)
        contradicted: list[str] = []
        rows = tx.execute(
            f"SELECT usage_key, topology, contradicts FROM usage_evidence WHERE {where}", args
        ).fetchall()
        for key, topology, contradicts in rows:
            if topology is not None:
                self._uncomplete(tx, json.loads(topology))
            contradicted += json.loads(contradicts)
            tx.execute("DELETE FROM usage_sessions WHERE usage_key=?", (key,))
            tx.execute("DELETE FROM usage_evidence WHERE usage_key=?", (key,))
        return ForgottenUsage(sessions, contradicted)

    # ---- reads -------------------------------------------------------------------------
    def seen(self, key: str) -> bool:
        """Whether a session's success (see :class:`Usage`) was counted already."""
        row = self._db.execute("SELECT 1 FROM usage_sessions WHERE usage_key=?", (key,))
        return row.fetchone() is not None

    def completed_runs(self, topology: Sequence[str]) -> int:
        row = self._db.execute(
            "SELECT times FROM completed_chains WHERE chain_key=?", (topology_key(topology),)
        ).fetchone()
        return int(row[0]) if row else 0

    def completed_topologies(
        self, conn: Connection | None = None
    ) -> list[tuple[tuple[str, ...], int]]:
        """Every completed chain's topology and how many runs completed it."""
        rows = (conn or self._db).execute(
            "SELECT topology, times FROM completed_chains ORDER BY chain_key"
        )
        return [(tuple(json.loads(t)), int(n)) for t, n in rows]

    def completions(self, tx: Connection) -> list[tuple[str, tuple[str, ...], str]]:
        """Every counted completed run: its usage key, topology and session."""
        rows = tx.execute(
            "SELECT usage_key, topology, session_key FROM usage_evidence "
            "WHERE topology IS NOT NULL ORDER BY usage_key"
        ).fetchall()
        return [(k, tuple(json.loads(t)), s) for k, t, s in rows]

    def contradictions(self) -> dict[str, list[tuple[str, float]]]:
        """Per chain, each contradiction a counted success brought: its session and
        when it arrived (one entry per contradiction)."""
        out: dict[str, list[tuple[str, float]]] = {}
        rows = self._db.execute(
            "SELECT session_key, contradicts, seen_at FROM usage_evidence "
            "WHERE contradicts != '[]' ORDER BY seen_at, usage_key"
        )
        for session, contradicts, at in rows:
            for cid in json.loads(contradicts):
                out.setdefault(cid, []).append((session, float(at)))
        return out

    def completed_chain_count(self, tool_id: str) -> int:
        """Distinct completed chains that used ``tool_id``."""
        row = self._db.execute(
            "SELECT chains FROM completed_tools WHERE tool_id=?", (tool_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    def tool_uses(
        self,
        tool_ids: Iterable[str],
        conn: Connection | None = None,
        set_aside: Mapping[str, set[str]] | None = None,
    ) -> dict[str, int]:
        """Per tool, its usage evidence: the distinct completed chains that used it and
        the distinct sessions in which one of its calls returned without error (read in
        ``conn``'s transaction when given).  ``set_aside`` names, per tool, sessions
        whose success does not count for it: a completed chain counts only when a
        session not set aside completed it."""
        db: Any = conn if conn is not None else self._db
        wanted = list(dict.fromkeys(tool_ids))
        out = dict.fromkeys(wanted, 0)
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            marks = ",".join("?" * len(chunk))
            for tool, n in db.execute(
                f"SELECT tool_id, chains FROM completed_tools WHERE tool_id IN ({marks})", chunk
            ):
                out[tool] += int(n)
            for tool, n in db.execute(
                f"SELECT tool_id, COUNT(*) FROM tool_successes WHERE tool_id IN ({marks}) "
                "GROUP BY tool_id",
                chunk,
            ):
                out[tool] += int(n)
        for tool, sessions in (set_aside or {}).items():
            if tool in out and sessions:
                out[tool] = max(0, out[tool] - self._uses_by(db, tool, sessions))
        return out

    @staticmethod
    def _uses_by(db: Any, tool: str, sessions: set[str]) -> int:
        """How much of ``tool``'s usage evidence ``sessions`` alone account for: their
        successful calls of it, and the completed chains using it that no other session
        completed."""
        keys = sorted(sessions)
        found = 0
        runs: dict[str, int] = {}
        for start in range(0, len(keys), CHUNK):
            chunk = keys[start : start + CHUNK]
            marks = ",".join("?" * len(chunk))
            row = db.execute(
                f"SELECT COUNT(*) FROM tool_successes WHERE tool_id=? AND session_key IN ({marks})",
                [tool, *chunk],
            ).fetchone()
            found += int(row[0])
            for (topology,) in db.execute(
                f"SELECT topology FROM usage_evidence WHERE topology IS NOT NULL "
                f"AND session_key IN ({marks})",
                chunk,
            ):
                if tool in json.loads(topology):
                    key = topology_key(json.loads(topology))
                    runs[key] = runs.get(key, 0) + 1
        for key, n in runs.items():
            row = db.execute(
                "SELECT times FROM completed_chains WHERE chain_key=?", (key,)
            ).fetchone()
            if row is not None and int(row[0]) <= n:
                found += 1
        return found

    def uses_by_sessions(
        self, tool: str, counted: Callable[[str], bool], conn: Connection | None = None
    ) -> int:
        """:meth:`tool_uses` of one tool, counting only the sessions ``counted`` keeps
        (by session key): their successful calls of it, and the distinct completed
        chains through it one of them completed (read in ``conn``'s transaction when
        given)."""
        db: Any = conn if conn is not None else self._db
        found = sum(
            1
            for (key,) in db.execute(
                "SELECT session_key FROM tool_successes WHERE tool_id=?", (tool,)
            )
            if counted(str(key))
        )
        runs: set[str] = set()
        # a cheap filter on the topology's JSON text, then the exact test
        for key, topology in db.execute(
            "SELECT session_key, topology FROM usage_evidence WHERE topology LIKE ?",
            (f"%{json.dumps(tool)}%",),
        ):
            chain = json.loads(topology)
            if tool in chain and counted(str(key)):
                runs.add(topology_key(chain))
        return found + len(runs)
