"""Fatal sequences as rules: archived chains compiled, their status, the completed runs
that contradict them, and operators' lifts.

An abandoned chain becomes a rule when the intake compiles it (:meth:`SequenceBook.compile`):
inside the intake's transaction, the chain is inserted in archive order, lifted at once
when its family was, and contradicted by every completed run already counted that
contains it (evidence counts the same whatever its order).  Its status follows
:mod:`sidecar.rules.lifecycle`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from sidecar.model import ArchivedConstraint
from sidecar.rules import lifting
from sidecar.rules.lifecycle import ENFORCED, Lifecycle, Status
from sidecar.rules.standing import LOCAL, Standing, source_of
from sidecar.storage.base import Connection
from sidecar.storage.judgements import Judgement
from sidecar.storage.revisions import RevisionRepository
from sidecar.storage.sequences import CompiledChain
from sidecar.storage.state import State
from sidecar.storage.uses import Usage

AUDIT = logging.getLogger("sidecar.archive.audit")
"""What an operator should see when someone's evidence is set aside."""


def contains(topology: Sequence[str], sequence: Sequence[str]) -> bool:
    """Whether ``sequence`` is a contiguous run of ``topology``."""
    n = len(sequence)
    return any(tuple(topology[i : i + n]) == tuple(sequence) for i in range(len(topology) - n + 1))


class SequenceBook:
    def __init__(self, state: State, lifecycle: Lifecycle, standing: Standing) -> None:
        self._state = state
        self._lifecycle = lifecycle
        self._standing = standing
        self._fatal = FatalIndex()
        self.alerts = 0
        """Contradictions this process ignored (for ``/metrics``)."""

    @property
    def retire_after(self) -> int:
        return self._lifecycle.retire_after

    # ---- reading -----------------------------------------------------------------------
    def chains(self, kinds: Sequence[str] = ("sequence",)) -> list[ArchivedConstraint]:
        """Every archived chain of ``kinds``, lifted ones included, in archive order, each
        judged: who stands behind it, whether that is independent evidence, and which
        of its contradictions count (:mod:`sidecar.rules.standing`)."""
        raw = self._state.sequences.chains(kinds)
        if not raw:
            return raw
        sessions = self._state.sightings.chain_sessions()
        against = self._state.uses.contradictions()
        reinstated = self._state.sequences.reinstated()
        people = self._state.judgements.all()
        return [
            self._judged(
                c,
                sessions.get(c.chain_id, []),
                against.get(c.chain_id, []),
                reinstated.get(c.chain_id),
                people.get(c.chain_id),
            )
            for c in raw
        ]

    def _judged(
        self,
        c: ArchivedConstraint,
        sessions: Sequence[tuple[str, float]],
        against: Sequence[tuple[str, float]],
        since: float | None,
        person: Judgement | None = None,
    ) -> ArchivedConstraint:
        # a chain compiled with no session recorded (a home from before sessions were
        # kept) is the process's own
        sources = self._standing.sources_of(k for k, _ in sessions) or (LOCAL,)
        judged = self._standing.against(sources, [(source_of(k), at) for k, at in against], since)
        counted = judged.counted
        retire = self.retire_after
        vouched = person is not None and person.judgement == "confirmed"
        retired_at = person.at if person is not None and person.judgement == "retired" else None
        invalid_at = counted[retire - 1] if len(counted) >= retire else retired_at
        return replace(
            c,
            contradictions=len(counted),
            baseline=0,
            invalid_at=invalid_at,
            sources=sources,
            unconfirmed=not (vouched or self._standing.independent(sources)),
            vouched=vouched,
            retired_at=retired_at,
            ignored=judged.ignored,
            ignored_sources=judged.ignored_sources,
        )

    def status(self, c: ArchivedConstraint, now: float | None = None) -> Status:
        if c.retired_at is not None and not c.lifted:
            return "retired"  # by an operator's hand
        when = time.time() if now is None else now
        return self._lifecycle.status(c.lifted, c.contradictions, c.baseline, c.last_seen, when)

    def in_force(self, kinds: Sequence[str] = ("sequence",)) -> list[ArchivedConstraint]:
        """The chains of ``kinds`` that are active or contested (a contested one marked:
        it warns, never blocks)."""
        now = time.time()
        out = []
        for c in self.chains(kinds):
            status = self.status(c, now)
            if status in ENFORCED:
                out.append(replace(c, contested=status == "contested"))
        return out

    def fatal(self) -> FatalIndex:
        """The unconditional fatal sequences by terminal tool, as of the constraints
        revision (what a completed call is checked against for contradictions)."""
        self._fatal.refresh(self._state.revisions.revisions()[0], self)
        return self._fatal

    def compiled(self) -> None:
        """After this process's compiling committed: its index already holds what it
        compiled."""
        self._fatal.written(self._state.revisions.revisions()[0])

    def events(self, chain_id: str, action: str) -> list[dict[str, object]]:
        return self._state.sequences.events(chain_id, action)

    # ---- writing, inside the caller's transaction -----------------------------------------
    def compile(self, tx: Connection, chains: Sequence[CompiledChain], now: float) -> int:
        """Add archived chains not compiled yet, in order; returns how many were new."""
        repo = self._state.sequences
        present = repo.present(tx, (c.chain_id for c in chains))
        fresh: list[CompiledChain] = []
        for c in chains:
            if c.chain_id not in present:
                present.add(c.chain_id)
                fresh.append(c)
        lifted = {c.chain_id for c in fresh if self._family_lifted(tx, c)}
        added = repo.insert(tx, fresh, lifted)
        fatal = {c.chain_id: c.sequence for c in fresh if c.unconditional}
        if fatal:
            self._earlier_completions(tx, fatal, now)
        self._fatal.extend((c.sequence, c.chain_id) for c in fresh if c.unconditional)
        return added

    def _family_lifted(self, tx: Connection, chain: CompiledChain) -> bool:
        key = _stored(chain.sequence)
        lifts = [(cid, key, w) for cid, w in self._state.sequences.lifted_families(tx, key)]
        return lifting.covered(key, lifting.words(chain.signature), lifts)

    def _earlier_completions(
        self, tx: Connection, fatal: Mapping[str, tuple[str, ...]], now: float
    ) -> None:
        """Completed runs that came before a new fatal sequence and contain it contradict
        it as those after it do: the evidence is the same whatever its order."""
        completed = self._state.uses.completed_topologies(tx)
        runs_by_key = self._state.uses.completions(tx)
        for cid, seq in fatal.items():
            runs = sum(times for topo, times in completed if contains(topo, seq))
            if not runs:
                continue
            self._state.sequences.contradict(tx, {cid: runs}, self.retire_after, now)
            for key, topo, _session in runs_by_key:
                if contains(topo, seq):
                    self._state.uses.add_contradiction(tx, key, cid)

    def contradict(self, tx: Connection, counts: Mapping[str, int], now: float) -> None:
        self._state.sequences.contradict(tx, counts, self.retire_after, now)

    def alert(self, tx: Connection, fresh: Sequence[Usage]) -> None:
        """Successes from untrusted sources that contradict a rule a trusted source stands
        behind: recorded (they stay in the usage evidence, and show as ignored), counted
        for no verdict, and said in the audit log."""
        by_chain: dict[str, list[str]] = {}
        for u in fresh:
            source = source_of(u.session)
            if self._standing.is_trusted(source):
                continue
            for cid in u.contradicts:
                by_chain.setdefault(cid, []).append(source)
        if not by_chain:
            return
        behind = self._state.sightings.behind(tx, by_chain)
        for cid, sources in sorted(by_chain.items()):
            backing = self._standing.sources_of(behind.get(cid, ())) or (LOCAL,)
            if any(self._standing.is_trusted(b) for b in backing):
                self.alerts += len(sources)
                AUDIT.warning(
                    "contradiction ignored: %s (untrusted) contradicted fatal sequence %s, "
                    "which %s stand(s) behind",
                    ", ".join(sorted(set(sources))),
                    cid,
                    ", ".join(backing),
                )

    def uncontradict(self, tx: Connection, chain_ids: Iterable[str]) -> None:
        self._state.sequences.uncontradict(tx, chain_ids, self.retire_after)

    def confirm(self, tx: Connection, chain_ids: Iterable[str], now: float) -> None:
        self._state.sequences.confirm(tx, chain_ids, now)

    # ---- operators ---------------------------------------------------------------------
    def set_status(
        self,
        chain_id: str,
        lifted: bool,
        reason: str,
        family: bool = True,
        then: Callable[[Connection], None] | None = None,
        logged: bool = True,
    ) -> bool:
        """Lift or reinstate a chain (and, with ``family``, its family); returns whether
        it exists.  A reinstated chain counts only contradictions met from now on.
        Every change is kept in the chain's events (``logged``: by this call; else
        ``then`` logs it); ``then`` runs in the same transaction."""
        status = "lifted" if lifted else "active"
        now = time.time()
        with self._state.tx() as tx:
            repo = self._state.sequences
            if not repo.set_status(tx, chain_id, status):
                return False
            if then is not None:
                then(tx)
            if family:
                self._set_family(tx, chain_id, lifted, reason, now)
            if not lifted:
                repo.rebase(tx, chain_id, now)
            if logged:
                repo.log(tx, chain_id, status, reason, now)
            return True

    def judge(self, chain_id: str, then: Callable[[Connection], None]) -> bool:
        """Record an operator's judgement (``then``, in the transaction) of a chain that
        exists; returns whether it does."""
        with self._state.tx() as tx:
            if self._state.sequences.identity(tx, chain_id) is None:
                return False
            then(tx)
            RevisionRepository.bump(tx, "constraints_rev")
            return True

    def _set_family(
        self, tx: Connection, chain_id: str, lift: bool, reason: str, now: float
    ) -> None:
        repo = self._state.sequences
        found = repo.identity(tx, chain_id)
        if found is None:
            return
        sequence, signature = found
        of = lifting.words(signature)
        if lift:
            repo.lift_family(tx, chain_id, sequence, of, now)
        else:
            lifts = [(cid, sequence, w) for cid, w in repo.lifted_families(tx, sequence)]
            for cid in lifting.members(sequence, of, lifts):
                repo.unlift_family(tx, cid)
        status = "lifted" if lift else "active"
        others = [
            (cid, sequence, lifting.words(sig))
            for cid, sig, st in repo.of_sequence(tx, sequence)
            if cid != chain_id and st != status
        ]
        for cid in lifting.members(sequence, of, others):
            repo.set_status(tx, cid, status)
            repo.log(tx, cid, status, f"with its family ({chain_id}): {reason}", now)
            self._state.judgements.clear(tx, [cid])  # a person's word on it no longer stands

    def log(self, rule: str, action: str, reason: str) -> None:
        with self._state.tx() as tx:
            self._state.sequences.log(tx, rule, action, reason, time.time())


def _stored(sequence: Sequence[str]) -> str:
    """A sequence as the repository keys it."""
    return json.dumps(list(sequence))


class FatalIndex:
    """The unconditional, contiguous fatal sequences by terminal tool.  Read from the
    state when the constraints revision moved, then kept up to date with this process's
    own compiling (a chain another process archived is seen when the revision next
    moves)."""

    def __init__(self) -> None:
        self._by_terminal: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        self._rev = -1
        self._lock = threading.Lock()

    def refresh(self, revision: int, book: SequenceBook) -> None:
        with self._lock:
            if revision == self._rev:
                return
            self._by_terminal = {}
            active = [c for c in book.chains() if not c.lifted and not c.when]
            self._add((c.sequence, c.chain_id) for c in active)
            self._rev = revision

    def extend(self, items: Iterable[tuple[Sequence[str], str]]) -> None:
        with self._lock:
            self._add(items)

    def written(self, revision: int) -> None:
        """The constraints revision after this process's own compiling: nothing to read
        again (had it been read before)."""
        with self._lock:
            if self._rev >= 0:
                self._rev = revision

    def _add(self, items: Iterable[tuple[Sequence[str], str]]) -> None:
        for sequence, cid in items:
            seq = tuple(sequence)
            self._by_terminal.setdefault(seq[-1], []).append((seq, cid))

    def completed_at(self, tools: Sequence[str], j: int) -> list[str]:
        """The sequences ``tools[: j + 1]`` ends with."""
        return [
            cid
            for seq, cid in self._by_terminal.get(tools[j], ())
            if len(seq) <= j + 1 and tuple(tools[j + 1 - len(seq) : j + 1]) == seq
        ]

    def contradictions(self, tools: Sequence[str], succeeded: Iterable[int]) -> tuple[str, ...]:
        """A tool that completed after ``tools[:j]`` contradicts every unconditional fatal
        sequence it completes there (one chain id per contradiction)."""
        return tuple(cid for j in succeeded for cid in self.completed_at(tools, j))
