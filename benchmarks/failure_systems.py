"""The failure memories ``bench_failures`` compares, behind one small interface:
``learn(session)`` after a run, ``check(before, call, told)`` before each call.

A new system (say, the same memory reached through the public library) is one more
class with these two methods and a ``name``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sidecar.memory import (
    FailureCondition,
    FailureMemory,
    LearnParams,
    Session,
    Step,
    Thresholds,
    Trace,
    assess,
    failure_kind,
    may_apply,
    normalize_signature,
    reads_only,
)

if TYPE_CHECKING:
    from sidecar.model import ArchivedConstraint
    from sidecar.rules.matcher import ConstraintMatcher


@dataclass(frozen=True)
class Check:
    decision: str
    """``allow``, ``warn`` or ``block``."""
    constraints: tuple[str, ...] = ()
    """The constraints (chains or conditions) behind a warn or a block."""
    holding: tuple[FailureCondition, ...] = ()
    """``call_memory`` only: every learned condition that held, whatever its level."""
    read_only: bool = False
    """The tool called only reads (its catalog type says so): warned on established
    rules only."""


class System(Protocol):
    name: str

    def learn(self, session: Session) -> None: ...

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check: ...


def learned_failures(session: Session) -> Iterable[tuple[int, Step]]:
    """The failing steps every system learns from: those not classified transient."""
    for i, step in enumerate(session.steps):
        if step.error is not None and failure_kind(step.error) != "transient":
            yield i, step


class PlainIndex:
    """A tool index with no failure memory: always allows."""

    name = "plain_index"

    def learn(self, session: Session) -> None:
        pass

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        return Check("allow")


class _Chains:
    """Abandoned chains (a run's tools up to and including a failing call) as the
    library's compiled constraints.  A chain of one tool cannot be archived (the
    library rejects it) and is skipped."""

    def __init__(self) -> None:
        self._constraints: list[ArchivedConstraint] = []
        self._matcher: ConstraintMatcher | None = None

    def learn(self, session: Session) -> None:
        from sidecar.model import ArchivedConstraint

        tools = [s.tool for s in session.steps]
        for i, step in learned_failures(session):
            chain = tuple(tools[: i + 1])
            if len(chain) < 2:
                continue
            n = len(self._constraints)
            self._constraints.append(
                ArchivedConstraint(
                    chain_id=f"{session.session_id}#{i}",
                    sequence=chain,
                    rule=f"after {' > '.join(chain[:-1])}, {chain[-1]} failed",
                    signature=normalize_signature(step.error or ""),
                    when=(),
                    gapped=False,
                    pointer=f"cold://chains/{n}",
                    order=n,
                )
            )
        self._matcher = None

    def matcher(self) -> ConstraintMatcher:
        from sidecar.rules.matcher import ConstraintMatcher

        if self._matcher is None:
            self._matcher = ConstraintMatcher(self._constraints)
        return self._matcher

    def __len__(self) -> int:
        return len(self._constraints)


class SeedPrefix(_Chains):
    """The seed's prefix check: blocks a plan (the tools so far plus the next) when an
    abandoned chain's prefix is a prefix of it."""

    name = "seed_prefix"

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        plan = [s.tool for s in before] + [call.tool]
        result = self.matcher().check(plan, mode="prefix")
        if result.safe:
            return Check("allow")
        return Check("block", tuple(c.chain_id for c in result.collisions))


class SequenceMemory(_Chains):
    """Today's sequence-only memory: blocks a call that completes a learned fatal
    sequence (contiguous) after the tools run so far."""

    name = "sequence_memory"

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        blocked, _ = self.matcher().next_steps([s.tool for s in before])
        hits = blocked.get(call.tool)
        if not hits:
            return Check("allow")
        return Check("block", tuple(c.chain_id for c, _ in hits))


class CallMemory:
    """:class:`sidecar.memory.FailureMemory` with :func:`sidecar.memory.assess`.  Keeps
    one :class:`Trace` per replayed run, extended as the run goes on (as a runtime would
    keep one per session)."""

    name = "call_memory"
    collect = Thresholds(min_confidence_warn=0.0, min_precision_warn=0.0, max_chance_warn=2.0)
    """Levels under which every condition that holds is reported (decisions are then
    re-derived for any thresholds)."""

    def __init__(
        self,
        thresholds: Thresholds | None = None,
        params: LearnParams | None = None,
        name: str = "call_memory",
        reads: frozenset[str] = frozenset(),
    ) -> None:
        self.name = name
        self.reads = reads
        """The tools that only read."""
        self.memory = FailureMemory(params)
        self.thresholds = thresholds or Thresholds()
        self._trace = Trace()
        self._of: int | None = None

    def learn(self, session: Session) -> None:
        self.memory.add_session(session)

    def trace_for(self, before: Sequence[Step]) -> Trace:
        if self._of != id(before) or len(self._trace) > len(before):
            self._trace, self._of = Trace(), id(before)
        for step in before[len(self._trace) :]:
            self._trace.add(step)
        return self._trace

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        trace = self.trace_for(before)
        conditions = self.memory.conditions(call.tool)
        accepted = self.memory.accepted(call.tool)
        verdict = assess(
            conditions, trace, call.tool, call.arguments, told, self.collect, accepted=accepted
        )
        by_id = {c.condition_id: c for c in conditions}
        # a reason carries its condition as judged for this call (a threshold between
        # its failures and its successes may only warn there)
        holding = tuple(r.condition or by_id[r.condition_id] for r in verdict.reasons)
        read_only = call.tool in self.reads
        decision, ids = decide(holding, self.thresholds, read_only)
        return Check(decision, ids, holding, read_only)

    def hint(self, before: Sequence[Step], tool: str, told: str | None) -> str | None:
        """The level of the strongest "may apply" hint a lookup of ``tool`` would carry
        at this point, or ``None``."""
        conditions = self.memory.conditions(tool)
        levels = {r.level for r in may_apply(conditions, self.trace_for(before), tool, told)}
        return "block" if "block" in levels else "warn" if levels else None


def decide(
    holding: Sequence[FailureCondition], thresholds: Thresholds, read_only: bool = False
) -> tuple[str, tuple[str, ...]]:
    """The decision (and the conditions behind it) from the conditions that hold, on a
    call of a tool that only reads when ``read_only``."""
    levels = [(c, thresholds.level(c, read_only)) for c in holding]
    blocks = tuple(c.condition_id for c, lvl in levels if lvl == "block")
    if blocks:
        return "block", blocks
    warns = tuple(c.condition_id for c, lvl in levels if lvl == "warn")
    return ("warn", warns) if warns else ("allow", ())


def make_systems(
    variants: dict[str, LearnParams] | None = None, tools: Sequence[Any] = ()
) -> list[Any]:
    """The four systems, the call memory through the public library (on a home holding
    ``tools``), and a ``call_memory`` per named variant of its learning parameters."""
    reads = reads_of(tools)
    extra = [CallMemory(params=p, name=n, reads=reads) for n, p in (variants or {}).items()]
    return [
        PlainIndex(),
        SeedPrefix(),
        SequenceMemory(),
        CallMemory(reads=reads),
        SidecarLibrary(tools),
        *extra,
    ]


def reads_of(tools: Sequence[Any]) -> frozenset[str]:
    """The tools whose catalog type says they only read."""
    return frozenset(t.tool_id for t in tools if reads_only(t.tool_type))


class SidecarLibrary:
    """The call memory reached the way a user reaches it: a :class:`sidecar.Sidecar` on a
    fresh home, sessions reported as steps (``report_many``), every call checked with
    ``check_call``; after training, the eviction runs with its default policy, so that
    the replay can count successful runs that an evicted tool would make impossible.
    The hashing embedder stands in for the model: no lookup is ranked here."""

    name = "sidecar"

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        import tempfile

        from indexes import HashingEmbedder
        from sidecar import Sidecar

        self._dir = tempfile.TemporaryDirectory(prefix="bench-failures-")
        self.sc = Sidecar.open(embedder=HashingEmbedder(), home=f"{self._dir.name}/home")
        if tools:
            self.sc.add_tools(list(tools))
        self._pending: list[dict[str, Any]] = []
        self.evicted: set[str] = set()

    def learn(self, session: Session) -> None:
        self._pending.append(_report(session))

    def after_training(self) -> None:
        """Report the training sessions (in their order, as one batch), then evict."""
        self._send(self._pending)
        self._pending = []
        self.evicted = {d.tool_id for d in self.sc.evict().evicted}

    def report(self, sessions: Sequence[Session]) -> None:
        """Report ``sessions`` now, in their order, as one batch."""
        self._send([_report(s) for s in sessions])

    def _send(self, reports: list[dict[str, Any]]) -> None:
        results = self.sc.report_many(reports)
        rejected = [r.reason for r in results if r.status == "rejected"]
        if rejected:
            raise RuntimeError(f"the library rejected training sessions: {rejected[:3]}")

    def check(self, before: Sequence[Step], call: Step, told: str | None) -> Check:
        verdict = self.sc.check_call(before, call.tool, call.arguments, told)
        ids = tuple(r.constraint_id for r in verdict.reasons if r.level == verdict.decision)
        return Check(verdict.decision, ids)

    def close(self) -> None:
        self.sc.close()
        self._dir.cleanup()


def _report(session: Session) -> dict[str, Any]:
    """A session as the library takes a report of it."""
    return {
        "steps": [s.to_dict() for s in session.steps],
        "outcome": session.outcome,
        "task_input": session.task_input,
        "session_id": session.session_id,
    }
