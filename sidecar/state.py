"""The sidecar's own small state: what is neither a hot tool nor a cold record.

Each module owns its tables and hands its DDL to the home, which creates them when it
is opened for writing (the move journal in :mod:`sidecar.journal`, the revocation ledger in
:mod:`sidecar.revocation`); the tables defined here are:

- ``tool_credentials``: credential references of active tools (kept out of Chroma);
- ``completed_chains`` / ``completed_tools``: usage evidence from completed chains;
- ``usage_sessions``: whose success was counted (a session and what it completed), so a
  replayed report counts its completed run, and the constraints it contradicts, once;
- ``sighting_sessions``: the distinct sessions that met a failure (topology and
  signature), so an unknown kind is archived once it is reproduced, a replayed report
  counts once, and N sessions count N;
- ``chain_sessions``: the distinct sessions behind each archived chain (eviction counts
  them);
- ``constraints``: the compiled-form view of archived chains.  The cold archive is the
  truth; this table is rebuilt from it for any chain it misses (see
  :meth:`sidecar.intake.Intake.reconcile`);
- ``constraint_evidence``: each chain's kind (``sequence``: a fatal sequence the
  matcher enforces; ``call``: a failing call reported with its steps, which drives
  eviction while the learned conditions of :mod:`sidecar.callmemory` enforce it), the
  completed runs that contradicted it, and when it was last confirmed (see
  :mod:`sidecar.lifecycle`);
- ``intake_staged``: the counters of an intake batch whose chains are being published
  to the cold store; whoever first sees the publication done applies them, once (see
  :meth:`sidecar.intake.Intake.reconcile`).

The database behind the store is a :class:`~sidecar.storage.Database`: SQLite under the
home by default, PostgreSQL when ``SIDECAR_DATABASE_URL`` names one (chosen by
:mod:`sidecar.home`).  A store on a read-only database never writes: every write raises
:class:`~sidecar.storage.DatabaseError`.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from sidecar.memory.signature import same_family, signature_words
from sidecar.model import ArchivedConstraint, Condition, CredentialRef
from sidecar.storage import Connection, Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_credentials (
    tool_id TEXT NOT NULL, ref TEXT NOT NULL, scopes TEXT NOT NULL,
    provider TEXT, revocation_endpoint TEXT,
    PRIMARY KEY (tool_id, ref)
);
CREATE TABLE IF NOT EXISTS completed_chains (
    chain_key TEXT PRIMARY KEY, topology TEXT NOT NULL, times INTEGER NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS completed_tools (
    tool_id TEXT PRIMARY KEY, chains INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sighting_sessions (
    sighting_key TEXT NOT NULL, session_key TEXT NOT NULL, topology TEXT NOT NULL,
    signature TEXT NOT NULL, seen_at REAL NOT NULL,
    PRIMARY KEY (sighting_key, session_key)
);
CREATE TABLE IF NOT EXISTS chain_sessions (
    chain_id TEXT NOT NULL, session_key TEXT NOT NULL, seen_at REAL NOT NULL,
    PRIMARY KEY (chain_id, session_key)
);
CREATE TABLE IF NOT EXISTS constraints (
    chain_id TEXT PRIMARY KEY, ord INTEGER NOT NULL UNIQUE, sequence TEXT NOT NULL,
    rule TEXT NOT NULL, signature TEXT NOT NULL, when_json TEXT NOT NULL,
    gapped INTEGER NOT NULL, pointer TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'active', archived_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS constraint_evidence (
    chain_id TEXT PRIMARY KEY, kind TEXT NOT NULL DEFAULT 'sequence',
    contradictions INTEGER NOT NULL DEFAULT 0, baseline INTEGER NOT NULL DEFAULT 0,
    last_seen REAL, invalid_at REAL
);
CREATE TABLE IF NOT EXISTS constraint_events (
    chain_id TEXT NOT NULL, action TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS usage_sessions (usage_key TEXT PRIMARY KEY, seen_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS intake_staged (
    batch_id TEXT PRIMARY KEY, chain_ids TEXT NOT NULL, counters TEXT NOT NULL,
    staged_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tools_writes (rev INTEGER PRIMARY KEY, writer TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_successes (
    tool_id TEXT NOT NULL, session_key TEXT NOT NULL, seen_at REAL NOT NULL,
    PRIMARY KEY (tool_id, session_key)
);
CREATE TABLE IF NOT EXISTS usage_evidence (
    usage_key TEXT PRIMARY KEY, session_key TEXT NOT NULL, topology TEXT,
    contradicts TEXT NOT NULL, seen_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS lifted_chain_families (
    chain_id TEXT PRIMARY KEY, sequence TEXT NOT NULL, words TEXT NOT NULL, at REAL NOT NULL
);
"""
TOOLS_WRITES_KEPT = 4096
"""Hot-index revisions remembered with their writer; a process that fell further behind
treats the gap as another process's write."""


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


@dataclass
class Counters:
    """What an intake batch counts, applied in one transaction."""

    usage: list[Usage] = field(default_factory=list)
    sighted: list[tuple[tuple[str, ...], str, str]] = field(default_factory=list)
    """``(topology, signature, session_key)``: a session met a failure."""
    chain_sessions: list[tuple[str, str]] = field(default_factory=list)
    """``(chain_id, session_key)``: a session behind an archived chain."""
    succeeded: list[tuple[str, str]] = field(default_factory=list)
    """``(tool_id, session_key)``: a call of the tool returned without error, whatever
    the session's outcome (usage evidence for eviction)."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "usage": [[u.key, u.topology, list(u.contradicts), u.session] for u in self.usage],
                "sighted": [[list(t), sig, who] for t, sig, who in self.sighted],
                "chain_sessions": [list(c) for c in self.chain_sessions],
                "succeeded": [list(c) for c in self.succeeded],
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
        )


_COMPACT = json.JSONEncoder(separators=(",", ":"))


def topology_key(topology: Sequence[str], signature: str = "") -> str:
    payload = _COMPACT.encode([list(topology), signature])
    return hashlib.sha256(payload.encode()).hexdigest()


def sessions_from_counts(db: Database) -> None:
    """Homes written before sightings counted sessions kept a bare count per failure:
    each counted report becomes one anonymous session, so nothing is lost."""
    if not db.has_table("sightings"):
        return
    rows = db.execute(
        "SELECT sighting_key, topology, signature, times, last_seen FROM sightings"
    ).fetchall()
    db.executemany(
        "INSERT OR IGNORE INTO sighting_sessions VALUES (?, ?, ?, ?, ?)",
        [
            (key, f"legacy:{i}", topology, signature, seen)
            for key, topology, signature, times, seen in rows
            for i in range(int(times))
        ],
    )
    db.execute("DROP TABLE sightings")


class StateStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        self.writable = db.writable
        self.writer = uuid.uuid4().hex
        """This store's name in ``tools_writes``: which hot-index revisions it made."""
        self._revisions_cache: tuple[object, tuple[int, int]] | None = None

    def ensure(self, ddl: str) -> None:
        """Create a module's tables if they are missing (writable stores only)."""
        self._db.ensure(ddl)

    def close(self) -> None:
        self._db.close()

    @property
    def db(self) -> Database:
        return self._db

    def tx(self) -> AbstractContextManager[Connection]:
        """A write transaction that excludes every other writer of the state."""
        return self._db.tx()

    # ---- credentials --------------------------------------------------------------
    def set_credentials(self, tool_id: str, creds: Sequence[CredentialRef]) -> None:
        with self._db.tx() as db:
            db.execute("DELETE FROM tool_credentials WHERE tool_id=?", (tool_id,))
            db.executemany(
                "INSERT INTO tool_credentials VALUES (?, ?, ?, ?, ?)",
                [
                    (tool_id, c.ref, json.dumps(list(c.scopes)), c.provider, c.revocation_endpoint)
                    for c in creds
                ],
            )

    def credentials(self, tool_ids: Iterable[str]) -> dict[str, list[CredentialRef]]:
        wanted = list(dict.fromkeys(tool_ids))
        out: dict[str, list[CredentialRef]] = {t: [] for t in wanted}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = self._db.execute(
                "SELECT tool_id, ref, scopes, provider, revocation_endpoint FROM tool_credentials "
                f"WHERE tool_id IN ({','.join('?' * len(chunk))}) ORDER BY tool_id, ref",
                chunk,
            ).fetchall()
            for tool_id, r, s, p, e in rows:
                out[tool_id].append(CredentialRef(r, tuple(json.loads(s)), p, e))
        return out

    # ---- usage evidence and sightings ----------------------------------------------
    def record_intake(self, counters: Counters, retire_after: int) -> None:
        """One transaction: count completed runs and the contradictions they bring,
        record sightings and the sessions behind archived chains.  Whatever a session
        already counted (a replayed report) is not counted again."""
        with self._db.tx() as db:
            self._record(db, counters, retire_after, time.time())

    def usage_seen(self, key: str) -> bool:
        """Whether a session's success (see :class:`Usage`) was counted already."""
        row = self._db.execute("SELECT 1 FROM usage_sessions WHERE usage_key=?", (key,))
        return row.fetchone() is not None

    def _record(self, db: Connection, counters: Counters, retire_after: int, now: float) -> None:
        contradicted: dict[str, int] = {}
        for usage in counters.usage:
            fresh = db.execute(
                "INSERT OR IGNORE INTO usage_sessions VALUES (?, ?)", (usage.key, now)
            ).rowcount
            if not fresh:
                continue  # a replay: counted when first received
            db.execute(
                "INSERT OR IGNORE INTO usage_evidence VALUES (?, ?, ?, ?, ?)",
                (usage.key, usage.session,
                 json.dumps(list(usage.topology)) if usage.topology else None,
                 json.dumps(list(usage.contradicts)), now),
            )  # fmt: skip
            if usage.topology:
                self._complete(db, usage.topology, now)
            for cid in usage.contradicts:
                contradicted[cid] = contradicted.get(cid, 0) + 1
        self._contradict(db, contradicted, retire_after, now)
        db.executemany(
            "INSERT OR IGNORE INTO sighting_sessions VALUES (?, ?, ?, ?, ?)",
            [
                (topology_key(t, sig), session, json.dumps(list(t)), sig, now)
                for t, sig, session in counters.sighted
            ],
        )
        db.executemany(
            "INSERT OR IGNORE INTO chain_sessions VALUES (?, ?, ?)",
            [(cid, session, now) for cid, session in counters.chain_sessions],
        )
        db.executemany(
            "INSERT OR IGNORE INTO tool_successes VALUES (?, ?, ?)",
            [(tool, session, now) for tool, session in counters.succeeded],
        )
        # a new session meeting an archived chain confirms it
        db.executemany(
            "UPDATE constraint_evidence SET last_seen=? WHERE chain_id=?",
            [(now, cid) for cid, _session in counters.chain_sessions],
        )

    # ---- intake batches staged around their cold publication -------------------------
    def stage_intake(self, batch_id: str, chain_ids: Sequence[str], counters: Counters) -> None:
        """Before a batch's chains are published: its counters, for whoever first sees
        the publication done (this batch, or a reconcile after a crash) to apply."""
        with self._db.tx() as db:
            db.execute(
                "INSERT INTO intake_staged VALUES (?, ?, ?, ?)",
                (batch_id, json.dumps(list(chain_ids)), counters.to_json(), time.time()),
            )

    def staged_intakes(self) -> list[tuple[str, list[str], Counters, float]]:
        rows = self._db.execute(
            "SELECT batch_id, chain_ids, counters, staged_at FROM intake_staged ORDER BY staged_at"
        ).fetchall()
        return [(b, json.loads(c), Counters.from_json(n), float(at)) for b, c, n, at in rows]

    def drop_staged(self, batch_id: str) -> None:
        """Forget a staged batch whose chains were never published (nothing counted)."""
        with self._db.tx() as db:
            db.execute("DELETE FROM intake_staged WHERE batch_id=?", (batch_id,))

    @staticmethod
    def _complete(db: Connection, topology: Sequence[str], now: float) -> None:
        bump(db, "usage_rev")
        key = topology_key(topology)
        row = db.execute("SELECT times FROM completed_chains WHERE chain_key=?", (key,)).fetchone()
        if row is not None:
            db.execute(
                "UPDATE completed_chains SET times = times + 1, last_seen=? WHERE chain_key=?",
                (now, key),
            )
            return
        db.execute(
            "INSERT INTO completed_chains VALUES (?, ?, 1, ?, ?)",
            (key, json.dumps(list(topology)), now, now),
        )
        db.executemany(
            "INSERT INTO completed_tools VALUES (?, 1) "
            "ON CONFLICT(tool_id) DO UPDATE SET chains = completed_tools.chains + 1",
            [(tool,) for tool in set(topology)],
        )

    def completed_runs(self, topology: Sequence[str]) -> int:
        row = self._db.execute(
            "SELECT times FROM completed_chains WHERE chain_key=?", (topology_key(topology),)
        ).fetchone()
        return int(row[0]) if row else 0

    def tool_uses(
        self, tool_ids: Iterable[str], db: Connection | Database | None = None
    ) -> dict[str, int]:
        """Per tool, its usage evidence: the distinct completed chains that used it and
        the distinct sessions in which one of its calls returned without error (read in
        ``db``'s transaction when given)."""
        conn = db if db is not None else self._db
        wanted = list(dict.fromkeys(tool_ids))
        out = dict.fromkeys(wanted, 0)
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for tool, n in conn.execute(
                f"SELECT tool_id, chains FROM completed_tools WHERE tool_id IN ({marks})", chunk
            ):
                out[tool] += int(n)
            for tool, n in conn.execute(
                f"SELECT tool_id, COUNT(*) FROM tool_successes WHERE tool_id IN ({marks}) "
                "GROUP BY tool_id",
                chunk,
            ):
                out[tool] += int(n)
        return out

    def usage_revision(self) -> int:
        """Changes whenever a completed run is counted."""
        row = self._db.execute("SELECT value FROM meta WHERE key='usage_rev'").fetchone()
        return int(row[0]) if row else 0

    def completed_topologies(self) -> list[tuple[tuple[str, ...], int]]:
        """Every completed chain's topology and how many runs completed it."""
        rows = self._db.execute("SELECT topology, times FROM completed_chains ORDER BY chain_key")
        return [(tuple(json.loads(t)), int(n)) for t, n in rows]

    def completed_chain_count(self, tool_id: str) -> int:
        """Distinct completed chains that used ``tool_id``."""
        row = self._db.execute(
            "SELECT chains FROM completed_tools WHERE tool_id=?", (tool_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    def sighting_sessions_of(
        self, keys: Iterable[tuple[Sequence[str], str]]
    ) -> dict[tuple[tuple[str, ...], str], set[str]]:
        """:meth:`sighting_sessions` for many failures in one read."""
        by_key = {topology_key(t, s): (tuple(t), s) for t, s in keys}
        out: dict[tuple[tuple[str, ...], str], set[str]] = {k: set() for k in by_key.values()}
        wanted = list(by_key)
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = self._db.execute(
                "SELECT sighting_key, session_key FROM sighting_sessions "
                f"WHERE sighting_key IN ({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            for key, session in rows:
                out[by_key[key]].add(session)
        return out

    def sighting_sessions(self, topology: Sequence[str], signature: str) -> set[str]:
        """The distinct sessions that met this failure."""
        rows = self._db.execute(
            "SELECT session_key FROM sighting_sessions WHERE sighting_key=?",
            (topology_key(topology, signature),),
        ).fetchall()
        return {r[0] for r in rows}

    def sightings(self, topology: Sequence[str], signature: str) -> int:
        return len(self.sighting_sessions(topology, signature))

    def chain_session_times(self) -> dict[str, list[float]]:
        """For each archived chain, when each distinct session behind it was seen."""
        out: dict[str, list[float]] = {}
        for cid, at in self._db.execute("SELECT chain_id, seen_at FROM chain_sessions"):
            out.setdefault(cid, []).append(float(at))
        return out

    # ---- constraints --------------------------------------------------------------
    def add_constraints(
        self,
        items: Sequence[tuple[str, Sequence[str], str, str, Sequence[Condition], bool, str, float]],
        kinds: Mapping[str, str] | None = None,
        staged: str | None = None,
        retire_after: int = 3,
    ) -> int:
        """Insert ``(chain_id, sequence, rule, signature, when, gapped, pointer,
        archived_at)`` items not present yet, in arrival order, in one transaction with
        the counters of the ``staged`` intake batch (see :meth:`stage_intake`), unless
        they were applied already; returns how many constraints were new."""
        now = time.time()
        with self._db.tx() as db:
            if staged is not None:
                # the write lock is held: whoever deletes the row applies its counters;
                # before the new constraints, so that a completed run of the same batch
                # is found among the runs that came before them
                row = db.execute(
                    "SELECT counters FROM intake_staged WHERE batch_id=?", (staged,)
                ).fetchone()
                if row is not None:
                    db.execute("DELETE FROM intake_staged WHERE batch_id=?", (staged,))
                    self._record(db, Counters.from_json(row[0]), retire_after, now)
            added = self._insert_constraints(db, items, kinds or {}, retire_after, now)
        return added

    def _insert_constraints(
        self,
        db: Connection,
        items: Sequence[tuple[str, Sequence[str], str, str, Sequence[Condition], bool, str, float]],
        kinds: Mapping[str, str],
        retire_after: int = 3,
        now: float | None = None,
    ) -> int:
        ids = list(dict.fromkeys(item[0] for item in items))
        present: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            present.update(
                r[0]
                for r in db.execute(
                    "SELECT chain_id FROM constraints "
                    f"WHERE chain_id IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            )
        (next_ord,) = db.execute("SELECT COALESCE(MAX(ord), -1) + 1 FROM constraints").fetchone()
        rows: list[tuple[Any, ...]] = []
        evidence: list[tuple[str, str, float]] = []
        fatal: dict[str, tuple[str, ...]] = {}
        for chain_id, sequence, rule, signature, when, gapped, pointer, archived_at in items:
            if chain_id in present:
                continue  # already compiled
            present.add(chain_id)
            seq_json = json.dumps(list(sequence))
            lifted = self._family_lifted(db, seq_json, signature)
            rows.append(
                (
                    chain_id,
                    next_ord + len(rows),
                    seq_json,
                    rule,
                    signature,
                    json.dumps([c.to_dict() for c in when]),
                    int(gapped),
                    pointer,
                    "lifted" if lifted else "active",
                    archived_at,
                )
            )
            evidence.append((chain_id, kinds.get(chain_id, "sequence"), archived_at))
            if kinds.get(chain_id, "sequence") == "sequence" and not when and not gapped:
                fatal[chain_id] = tuple(sequence)
        db.executemany("INSERT INTO constraints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        db.executemany(
            "INSERT OR IGNORE INTO constraint_evidence(chain_id, kind, last_seen) VALUES (?, ?, ?)",
            evidence,
        )
        if fatal:
            self._earlier_completions(db, fatal, retire_after, now or time.time())
        added = len(rows)
        if added:
            self._bump_revision(db)
        return added

    @staticmethod
    def _earlier_completions(
        db: Connection, fatal: Mapping[str, tuple[str, ...]], retire_after: int, now: float
    ) -> None:
        """Completed runs that came before a new fatal sequence and contain it contradict
        it as those after it do: the evidence is the same whatever its order."""
        completed = db.execute("SELECT topology, times FROM completed_chains").fetchall()
        usage = [
            (key, json.loads(topo), json.loads(against))
            for key, topo, against in db.execute(
                "SELECT usage_key, topology, contradicts FROM usage_evidence "
                "WHERE topology IS NOT NULL"
            ).fetchall()
        ]
        for cid, seq in fatal.items():
            runs = sum(int(t) for topo, t in completed if _contains(json.loads(topo), seq))
            if not runs:
                continue
            db.execute(
                "UPDATE constraint_evidence SET contradictions = contradictions + ?, "
                "invalid_at = CASE WHEN contradictions + ? - baseline >= ? THEN ? "
                "ELSE invalid_at END WHERE chain_id=?",
                (runs, runs, retire_after, now, cid),
            )
            for key, topo, against in usage:
                if _contains(topo, seq):
                    against.append(cid)
                    db.execute(
                        "UPDATE usage_evidence SET contradicts=? WHERE usage_key=?",
                        (json.dumps(against), key),
                    )

    def constraint_ids(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT chain_id FROM constraints")}

    def constraint_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM constraints").fetchone()[0])

    def chains(self, kinds: Sequence[str] = ("sequence",)) -> list[ArchivedConstraint]:
        """Every archived chain of the given kinds, lifted ones included, in archive
        order, with its evidence (contradictions, last confirmation)."""
        marks = ",".join("?" * len(kinds))
        rows = self._db.execute(
            "SELECT c.chain_id, c.ord, c.sequence, c.rule, c.signature, c.when_json, c.gapped, "
            "c.pointer, c.archived_at, c.status, COALESCE(e.kind, 'sequence'), "
            "COALESCE(e.contradictions, 0), COALESCE(e.baseline, 0), "
            "COALESCE(e.last_seen, c.archived_at), e.invalid_at "
            "FROM constraints c LEFT JOIN constraint_evidence e ON e.chain_id = c.chain_id "
            f"WHERE COALESCE(e.kind, 'sequence') IN ({marks}) ORDER BY c.ord",
            tuple(kinds),
        ).fetchall()
        return [
            ArchivedConstraint(
                chain_id=cid,
                sequence=tuple(json.loads(seq)),
                rule=rule,
                signature=sig,
                when=tuple(
                    Condition(field=w["field"], op=w["op"], value=w["value"], step=w["step"])
                    for w in json.loads(when)
                ),
                gapped=bool(gapped),
                pointer=pointer,
                order=ord_,
                archived_at=at,
                kind=kind,
                lifted=status == "lifted",
                contradictions=int(contra),
                baseline=int(base),
                last_seen=float(seen),
                invalid_at=invalid,
            )
            for (
                cid,
                ord_,
                seq,
                rule,
                sig,
                when,
                gapped,
                pointer,
                at,
                status,
                kind,
                contra,
                base,
                seen,
                invalid,
            ) in rows
        ]

    def active_constraints(self) -> list[ArchivedConstraint]:
        """The sequence constraints an operator has not lifted (whatever their evidence:
        the caller applies :mod:`sidecar.lifecycle`)."""
        return [c for c in self.chains() if not c.lifted]

    def _contradict(
        self, db: Connection, counts: Mapping[str, int], retire_after: int, now: float
    ) -> None:
        """Count completed runs that matched these chains; a chain that reaches
        ``retire_after`` (since any reinstatement) is marked invalid from now."""
        if not counts:
            return
        for cid, n in counts.items():
            db.execute(
                "INSERT INTO constraint_evidence(chain_id, contradictions, last_seen) "
                "VALUES (?, ?, (SELECT archived_at FROM constraints WHERE chain_id=?)) "
                "ON CONFLICT(chain_id) DO UPDATE SET "
                "contradictions = constraint_evidence.contradictions + excluded.contradictions",
                (cid, n, cid),
            )
            db.execute(
                "UPDATE constraint_evidence SET invalid_at=? WHERE chain_id=? AND "
                "invalid_at IS NULL AND contradictions - baseline >= ?",
                (now, cid, retire_after),
            )
        self._bump_revision(db)

    def forget_sessions(
        self, prefix: str | None, since: float | None
    ) -> tuple[set[str], list[str]]:
        """Forget every session whose key starts with ``prefix`` (``None``: the keys of
        the local source, which carry no prefix), seen since ``since`` when given: its
        sightings, the dead ends it counted, and the completed runs and contradictions
        its successes brought.  Returns the sessions, and the archived chains no
        remaining session supports."""
        args: list[Any] = []
        if prefix is None:
            where = "substr(session_key, 1, 4) != 'src:'"
        else:
            where, args = "substr(session_key, 1, ?) = ?", [len(prefix), prefix]
        if since is not None:
            where += " AND seen_at >= ?"
            args.append(since)
        now = time.time()
        with self.tx() as db:
            sessions: set[str] = set()
            for table in (
                "sighting_sessions",
                "chain_sessions",
                "usage_evidence",
                "tool_successes",
            ):
                sessions |= {
                    r[0] for r in db.execute(f"SELECT session_key FROM {table} WHERE {where}", args)
                }
            chains = {
                r[0] for r in db.execute(f"SELECT chain_id FROM chain_sessions WHERE {where}", args)
            }
            db.execute(f"DELETE FROM sighting_sessions WHERE {where}", args)
            db.execute(f"DELETE FROM chain_sessions WHERE {where}", args)
            db.execute(f"DELETE FROM tool_successes WHERE {where}", args)
            unsupported = sorted(
                cid
                for cid in chains
                if db.execute(
                    "SELECT 1 FROM chain_sessions WHERE chain_id=? LIMIT 1", (cid,)
                ).fetchone()
                is None
            )
            rows = db.execute(
                f"SELECT usage_key, topology, contradicts FROM usage_evidence WHERE {where}", args
            ).fetchall()
            for key, topology, contradicts in rows:
                if topology is not None:
                    self._uncomplete(db, json.loads(topology), now)
                for cid in json.loads(contradicts):
                    db.execute(
                        "UPDATE constraint_evidence SET contradictions = CASE WHEN "
                        "contradictions > 0 THEN contradictions - 1 ELSE 0 END WHERE chain_id=?",
                        (cid,),
                    )
                db.execute("DELETE FROM usage_sessions WHERE usage_key=?", (key,))
                db.execute("DELETE FROM usage_evidence WHERE usage_key=?", (key,))
            # a chain whose contradictions fell below the retiring count is valid again
            db.execute(
                "UPDATE constraint_evidence SET invalid_at = NULL WHERE invalid_at IS NOT NULL "
                "AND contradictions - baseline < ?",
                (self.retire_after,),
            )
            self._bump_revision(db)
        return sessions, unsupported

    retire_after = 3
    """Contradictions that retire a chain (the home sets it from its settings)."""

    @staticmethod
    def _uncomplete(db: Connection, topology: Sequence[str], now: float) -> None:
        bump(db, "usage_rev")
        key = topology_key(topology)
        row = db.execute("SELECT times FROM completed_chains WHERE chain_key=?", (key,)).fetchone()
        if row is None:
            return
        if int(row[0]) > 1:
            db.execute("UPDATE completed_chains SET times = times - 1 WHERE chain_key=?", (key,))
            return
        db.execute("DELETE FROM completed_chains WHERE chain_key=?", (key,))
        for tool in set(topology):
            db.execute("UPDATE completed_tools SET chains = chains - 1 WHERE tool_id=?", (tool,))
        db.execute("DELETE FROM completed_tools WHERE chains <= 0")

    def set_constraint_status(
        self, chain_id: str, status: str, reason: str, family: bool = True
    ) -> bool:
        """Lift (``lifted``) or reinstate (``active``) a constraint; returns whether it
        existed.  A reinstated constraint counts only contradictions met from now on.
        Every change is kept in ``constraint_events``."""
        with self._db.tx() as db:
            found = db.execute(
                "UPDATE constraints SET status=? WHERE chain_id=?", (status, chain_id)
            ).rowcount
            if found and family:
                self._lift_family(db, chain_id, status == "lifted", reason)
            if found and status == "active":
                db.execute(
                    "UPDATE constraint_evidence SET baseline = contradictions, invalid_at = NULL, "
                    "last_seen = ? WHERE chain_id=?",
                    (time.time(), chain_id),
                )
            if found:
                db.execute(
                    "INSERT INTO constraint_events VALUES (?, ?, ?, ?)",
                    (chain_id, status, reason, time.time()),
                )
                self._bump_revision(db)
            return bool(found)

    def _lift_family(self, db: Connection, chain_id: str, lift: bool, reason: str) -> None:
        """A lift (or reinstatement) covers the chain's family: the same sequence with its
        failure written any other way (:func:`~sidecar.memory.signature.same_family`),
        archived before or after."""
        sequence, signature = db.execute(
            "SELECT sequence, signature FROM constraints WHERE chain_id=?", (chain_id,)
        ).fetchone()
        words = signature_words(signature)
        if lift:
            db.execute(
                "INSERT INTO lifted_chain_families VALUES (?, ?, ?, ?) "
                "ON CONFLICT(chain_id) DO NOTHING",
                (chain_id, sequence, json.dumps(sorted(words)), time.time()),
            )
        else:
            for cid, w in db.execute(
                "SELECT chain_id, words FROM lifted_chain_families WHERE sequence=?", (sequence,)
            ).fetchall():
                if same_family(words, frozenset(json.loads(w))):
                    db.execute("DELETE FROM lifted_chain_families WHERE chain_id=?", (cid,))
        status = "lifted" if lift else "active"
        others = [
            cid
            for cid, sig in db.execute(
                "SELECT chain_id, signature FROM constraints WHERE sequence=? AND chain_id != ? "
                "AND status != ?",
                (sequence, chain_id, status),
            ).fetchall()
            if same_family(words, signature_words(sig))
        ]
        for cid in others:
            db.execute("UPDATE constraints SET status=? WHERE chain_id=?", (status, cid))
            db.execute(
                "INSERT INTO constraint_events VALUES (?, ?, ?, ?)",
                (cid, status, f"with its family ({chain_id}): {reason}", time.time()),
            )

    def _family_lifted(self, db: Connection, sequence: str, signature: str) -> bool:
        words = signature_words(signature)
        return any(
            same_family(words, frozenset(json.loads(w)))
            for (w,) in db.execute(
                "SELECT words FROM lifted_chain_families WHERE sequence=?", (sequence,)
            )
        )

    def events(self, constraint_id: str, action: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT reason, at FROM constraint_events WHERE chain_id=? AND action=? ORDER BY at",
            (constraint_id, action),
        ).fetchall()
        return [{"detail": r, "at": at} for r, at in rows]

    def log_constraint_event(self, constraint_id: str, action: str, reason: str) -> None:
        with self._db.tx() as db:
            db.execute(
                "INSERT INTO constraint_events VALUES (?, ?, ?, ?)",
                (constraint_id, action, reason, time.time()),
            )

    def revision(self) -> int:
        """Changes whenever the active constraints change."""
        return self.revisions()[0]

    def revisions(self) -> tuple[int, int]:
        """The constraints revision and the hot-index revision (bumped by every write
        to the hot index, from any process sharing this home), in one read; kept while
        the database's change token says no process can have written since."""
        token = self._db.change_token()
        cached = self._revisions_cache
        if token is not None and cached is not None and cached[0] == token:
            return cached[1]
        rows = dict(
            self._db.execute(
                "SELECT key, value FROM meta WHERE key IN ('constraints_rev', 'tools_rev')"
            ).fetchall()
        )
        revisions = int(rows.get("constraints_rev", 0)), int(rows.get("tools_rev", 0))
        self._revisions_cache = (token, revisions)
        return revisions

    def bump_tools_revision(self) -> None:
        with self._db.tx() as db:
            self.bump_tools_in(db)

    def bump_tools_in(self, db: Connection) -> None:
        """Move the hot-index revision inside a transaction, recording that this store
        made it (see :meth:`written_elsewhere`)."""
        bump(db, "tools_rev")
        (rev,) = db.execute(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key='tools_rev'"
        ).fetchone()
        db.execute(
            "INSERT INTO tools_writes VALUES (?, ?) "
            "ON CONFLICT(rev) DO UPDATE SET writer=excluded.writer",
            (rev, self.writer),
        )
        db.execute("DELETE FROM tools_writes WHERE rev <= ?", (rev - TOOLS_WRITES_KEPT,))

    def written_elsewhere(self, since: int, now: int) -> bool:
        """Whether any hot-index revision in ``(since, now]`` was made by another
        process (or cannot be told: a read-only store, revisions no longer remembered);
        its writes are ones this process's in-memory copies did not follow."""
        if not self.writable or since < 0:
            return True
        with self._db.reading():
            mine = self._db.execute(
                "SELECT count(*) FROM tools_writes WHERE rev > ? AND rev <= ? AND writer = ?",
                (since, now, self.writer),
            ).fetchone()[0]
        return int(mine) != now - since

    @staticmethod
    def _bump_revision(db: Connection) -> None:
        bump(db, "constraints_rev")

    def meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._db.tx() as db:
            db.execute(
                "INSERT INTO meta VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, value),
            )


def _contains(topology: Sequence[str], sequence: Sequence[str]) -> bool:
    """Whether ``sequence`` is a contiguous run of ``topology``."""
    n = len(sequence)
    return any(tuple(topology[i : i + n]) == tuple(sequence) for i in range(len(topology) - n + 1))


def bump(db: Connection, key: str) -> None:
    """Move a revision counter (``tools_rev``, ``constraints_rev``) inside a transaction."""
    db.execute(
        "INSERT INTO meta VALUES (?, '1') ON CONFLICT(key) "
        "DO UPDATE SET value = CAST(meta.value AS INTEGER) + 1",
        (key,),
    )
