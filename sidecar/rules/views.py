"""Rules as people see them: one :class:`~sidecar.results.ConstraintView` per rule; an
agent sees another source's rule as a verdict (:func:`verdict_view`)."""

from __future__ import annotations

from dataclasses import replace

from sidecar.model import ArchivedConstraint
from sidecar.results import ConstraintView
from sidecar.rules.conditions import ConditionState
from sidecar.storage.judgements import Judgement


def sequence_view(
    c: ArchivedConstraint, status: str, sessions: int, person: Judgement | None = None
) -> ConstraintView:
    return ConstraintView(
        chain_id=c.chain_id,
        sequence=c.sequence,
        rule=c.rule,
        expected_failure=c.signature,
        pointer=c.pointer,
        status=status,
        archived_at=c.archived_at,
        kind="sequence",
        valid_from=c.archived_at,
        last_seen=c.last_seen,
        invalid_at=c.invalid_at if status == "retired" else None,
        support=sessions,
        contradictions=c.contradictions,
        sessions=sessions,
        sources=c.sources,
        independent=not c.unconfirmed,
        ignored_contradictions=c.ignored,
        judged=person.judgement if person else None,
        judged_by=person.by if person else None,
    )


def condition_view(st: ConditionState, independent: bool = True) -> ConstraintView:
    c = st.condition
    return ConstraintView(
        chain_id=c.condition_id,
        sequence=(c.tool,),
        rule=c.explanation,
        expected_failure=c.signature,
        pointer=st.pointer,
        status=st.status,
        archived_at=st.valid_from,
        kind="call",
        valid_from=st.valid_from,
        last_seen=st.last_seen,
        invalid_at=st.invalid_at if st.status == "retired" else None,
        support=c.support,
        contradictions=c.contradictions,
        confidence=c.confidence,
        condition=c.to_dict(),
        sessions=c.session_count or c.support,
        sources=c.sources,
        chance=c.chance if c.source == "learned" else None,
        confirmations=c.confirmations if c.source == "learned" else None,
        independent=independent or st.confirmed,
        ignored_contradictions=c.ignored,
        judged=st.judged.judgement if st.judged else None,
        judged_by=st.judged.by if st.judged else None,
    )


def verdict_view(view: ConstraintView, text: str, failure: str) -> ConstraintView:
    """A rule as an agent that does not own it sees it: its id, tools, status, standing
    and counts, worded by the sidecar (``text``; ``failure``: its failure text when the
    agent may read it), with no pointer, sources, sessions or argument values."""
    return replace(
        view,
        rule=text,
        expected_failure=failure,
        pointer=None,
        condition=None,
        sources=(),
        judged_by=None,
    )
