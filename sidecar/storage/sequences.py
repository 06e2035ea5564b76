"""Archived chains as rules: the compiled form of every archived chain, its evidence
(contradictions, last confirmation), the operators' lifts and reinstatements, and the
families they lifted.

- ``constraints``: one row per archived chain (the cold archive is the truth; this table
  is rebuilt from it for any chain it misses);
- ``constraint_evidence``: the chain's kind (``sequence``: a fatal sequence the matcher
  enforces; ``call``: a failing call reported with its steps, evidence for eviction),
  the completed runs that contradicted it (``baseline``: the count at its last
  reinstatement), when it was last confirmed and when it became invalid;
- ``constraint_events``: every lift, reinstatement and variant, with its reason;
- ``lifted_chain_families``: lifts that cover a chain's family (the same sequence with
  its failure written any other way).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sidecar.model import ArchivedConstraint, Condition
from sidecar.storage.base import Connection, Database
from sidecar.storage.credentials import CHUNK
from sidecar.storage.revisions import RevisionRepository


@dataclass(frozen=True)
class CompiledChain:
    """An archived chain in the form the matcher compiles."""

    chain_id: str
    sequence: tuple[str, ...]
    rule: str
    signature: str
    when: tuple[Condition, ...]
    gapped: bool
    pointer: str
    archived_at: float
    kind: str = "sequence"
    """``sequence`` (a fatal sequence) or ``call`` (a failing call's chain)."""

    @property
    def unconditional(self) -> bool:
        """A contiguous fatal sequence with no condition: what a completed run contradicts."""
        return self.kind == "sequence" and not self.when and not self.gapped


class SequenceRepository:
    SCHEMA: ClassVar[str] = """
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
CREATE TABLE IF NOT EXISTS lifted_chain_families (
    chain_id TEXT PRIMARY KEY, sequence TEXT NOT NULL, words TEXT NOT NULL, at REAL NOT NULL
);
"""

    def __init__(self, db: Database) -> None:
        self._db = db

    # ---- reads -------------------------------------------------------------------------
    def ids(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT chain_id FROM constraints")}

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM constraints").fetchone()[0])

    def known(self, ids: Iterable[str]) -> set[str]:
        """The chains of ``ids`` that are compiled (archived, or acknowledged and waiting
        for the archive)."""
        return self.present(self._db, ids)

    def present(self, tx: Connection | Database, ids: Iterable[str]) -> set[str]:
        wanted = list(dict.fromkeys(ids))
        found: set[str] = set()
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            found.update(
                r[0]
                for r in tx.execute(
                    "SELECT chain_id FROM constraints "
                    f"WHERE chain_id IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            )
        return found

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
        return [_archived(row) for row in rows]

    def events(self, chain_id: str, action: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT reason, at FROM constraint_events WHERE chain_id=? AND action=? ORDER BY at",
            (chain_id, action),
        ).fetchall()
        return [{"detail": r, "at": at} for r, at in rows]

    def history(self, chain_id: str, limit: int) -> list[tuple[str, str, float]]:
        """``(action, reason, at)`` of a rule's recorded changes (lifts, reinstatements,
        variants), newest first, at most ``limit``."""
        rows = self._db.execute(
            "SELECT action, reason, at FROM constraint_events WHERE chain_id=? "
            "ORDER BY at DESC LIMIT ?",
            (chain_id, limit),
        ).fetchall()
        return [(str(a), str(r), float(at)) for a, r, at in rows]

    def reinstated(self) -> dict[str, float]:
        """When each chain was last reinstated (by an operator, or with its family) or
        confirmed (which reinstates it)."""
        rows = self._db.execute(
            "SELECT chain_id, MAX(at) FROM constraint_events "
            "WHERE action IN ('active', 'confirmed') GROUP BY chain_id"
        )
        return {cid: float(at) for cid, at in rows}

    # ---- compiling ---------------------------------------------------------------------
    def insert(self, tx: Connection, chains: Sequence[CompiledChain], lifted: set[str]) -> int:
        """Insert chains (absent ones), in order after every stored one; those named in
        ``lifted`` start lifted (their family was).  Returns how many were inserted."""
        (next_ord,) = tx.execute("SELECT COALESCE(MAX(ord), -1) + 1 FROM constraints").fetchone()
        rows = [
            (
                c.chain_id,
                next_ord + i,
                json.dumps(list(c.sequence)),
                c.rule,
                c.signature,
                json.dumps([w.to_dict() for w in c.when]),
                int(c.gapped),
                c.pointer,
                "lifted" if c.chain_id in lifted else "active",
                c.archived_at,
            )
            for i, c in enumerate(chains)
        ]
        tx.executemany("INSERT INTO constraints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        tx.executemany(
            "INSERT OR IGNORE INTO constraint_evidence(chain_id, kind, last_seen) VALUES (?, ?, ?)",
            [(c.chain_id, c.kind, c.archived_at) for c in chains],
        )
        if rows:
            RevisionRepository.bump(tx, "constraints_rev")
        return len(rows)

    # ---- evidence ----------------------------------------------------------------------
    def contradict(
        self, tx: Connection, counts: Mapping[str, int], retire_after: int, now: float
    ) -> None:
        """Count completed runs that matched these chains; a chain that reaches
        ``retire_after`` (since any reinstatement) is marked invalid from now."""
        if not counts:
            return
        for cid, n in counts.items():
            tx.execute(
                "INSERT INTO constraint_evidence(chain_id, contradictions, last_seen) "
                "VALUES (?, ?, (SELECT archived_at FROM constraints WHERE chain_id=?)) "
                "ON CONFLICT(chain_id) DO UPDATE SET "
                "contradictions = constraint_evidence.contradictions + excluded.contradictions",
                (cid, n, cid),
            )
            tx.execute(
                "UPDATE constraint_evidence SET invalid_at=? WHERE chain_id=? AND "
                "invalid_at IS NULL AND contradictions - baseline >= ?",
                (now, cid, retire_after),
            )
        RevisionRepository.bump(tx, "constraints_rev")

    def uncontradict(self, tx: Connection, chain_ids: Iterable[str], retire_after: int) -> None:
        """Take back one contradiction per id (a forgotten session's); a chain whose
        contradictions fell below the retiring count is valid again."""
        tx.executemany(
            "UPDATE constraint_evidence SET contradictions = CASE WHEN "
            "contradictions > 0 THEN contradictions - 1 ELSE 0 END WHERE chain_id=?",
            [(cid,) for cid in chain_ids],
        )
        tx.execute(
            "UPDATE constraint_evidence SET invalid_at = NULL WHERE invalid_at IS NOT NULL "
            "AND contradictions - baseline < ?",
            (retire_after,),
        )
        RevisionRepository.bump(tx, "constraints_rev")

    def confirm(self, tx: Connection, chain_ids: Iterable[str], now: float) -> None:
        """A new session meeting an archived chain confirms it (and may change who
        stands behind it: the rules in force are read again)."""
        rows = [(now, cid) for cid in chain_ids]
        tx.executemany("UPDATE constraint_evidence SET last_seen=? WHERE chain_id=?", rows)
        if rows:
            RevisionRepository.bump(tx, "constraints_rev")

    # ---- status and families -----------------------------------------------------------
    def set_status(self, tx: Connection, chain_id: str, status: str) -> bool:
        found = tx.execute(
            "UPDATE constraints SET status=? WHERE chain_id=?", (status, chain_id)
        ).rowcount
        if found:
            RevisionRepository.bump(tx, "constraints_rev")
        return bool(found)

    def rebase(self, tx: Connection, chain_id: str, now: float) -> None:
        """After a reinstatement: only contradictions met from now on count."""
        tx.execute(
            "UPDATE constraint_evidence SET baseline = contradictions, invalid_at = NULL, "
            "last_seen = ? WHERE chain_id=?",
            (now, chain_id),
        )

    def log(self, tx: Connection, chain_id: str, action: str, reason: str, now: float) -> None:
        tx.execute(
            "INSERT INTO constraint_events VALUES (?, ?, ?, ?)", (chain_id, action, reason, now)
        )

    def identity(self, tx: Connection, chain_id: str) -> tuple[str, str] | None:
        """A chain's sequence (as stored) and signature."""
        row = tx.execute(
            "SELECT sequence, signature FROM constraints WHERE chain_id=?", (chain_id,)
        ).fetchone()
        return (row[0], row[1]) if row else None

    def of_sequence(self, tx: Connection, sequence: str) -> list[tuple[str, str, str]]:
        """``(chain_id, signature, status)`` of every chain of one stored sequence."""
        rows = tx.execute(
            "SELECT chain_id, signature, status FROM constraints WHERE sequence=? ORDER BY ord",
            (sequence,),
        ).fetchall()
        return [(c, s, st) for c, s, st in rows]

    def lifted_families(self, tx: Connection, sequence: str) -> list[tuple[str, frozenset[str]]]:
        """The lifts that cover families of ``sequence``: the lifted chain and its
        signature's words."""
        rows = tx.execute(
            "SELECT chain_id, words FROM lifted_chain_families WHERE sequence=?", (sequence,)
        ).fetchall()
        return [(c, frozenset(json.loads(w))) for c, w in rows]

    def lift_family(
        self, tx: Connection, chain_id: str, sequence: str, words: Iterable[str], now: float
    ) -> None:
        tx.execute(
            "INSERT INTO lifted_chain_families VALUES (?, ?, ?, ?) "
            "ON CONFLICT(chain_id) DO NOTHING",
            (chain_id, sequence, json.dumps(sorted(words)), now),
        )

    def unlift_family(self, tx: Connection, chain_id: str) -> None:
        tx.execute("DELETE FROM lifted_chain_families WHERE chain_id=?", (chain_id,))


def _archived(row: Sequence[Any]) -> ArchivedConstraint:
    (cid, ord_, seq, rule, sig, when, gapped, pointer, at, status) = row[:10]
    kind, contra, base, seen, invalid = row[10:]
    return ArchivedConstraint(
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
