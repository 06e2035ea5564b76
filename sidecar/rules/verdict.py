"""The one place a check's reasons are merged and its verdict decided.

Before a call, two kinds of rule may hold: learned (or hand-written) call conditions
and fatal sequences the call would complete.  Each gives reasons at a level; the verdict
is decided once, from all of them (:func:`~sidecar.memory.decide`): any block blocks,
any warning warns.  Block reasons come first, then warnings, each kind in its order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sidecar.memory import Reason, decide
from sidecar.model import ArchivedConstraint, CallCheck, CheckReason
from sidecar.neutralize import shown
from sidecar.rules.conditions import ConditionState
from sidecar.rules.matcher import Hint


def condition_reasons(
    reasons: Iterable[Reason], states: Mapping[str, ConditionState]
) -> list[CheckReason]:
    out = []
    for r in reasons:
        st = states.get(r.condition_id)
        out.append(
            CheckReason(
                r.level,
                r.condition_id,
                "call",
                shown(r.explanation),
                r.observed,
                st.pointer if st else None,
                st.status if st else "active",
            )
        )
    return out


def sequence_reasons(
    blocked: Sequence[tuple[ArchivedConstraint, str]], hints: Sequence[Hint]
) -> list[CheckReason]:
    """The fatal sequences a call would complete (``blocked``, with why), and the
    contested or unconfirmed ones it would complete (warnings)."""
    out = [
        CheckReason(
            "block",
            c.chain_id,
            "sequence",
            f"{shown(c.rule)} (completes fatal sequence {'>'.join(c.sequence)})",
            why,
            c.pointer,
        )
        for c, why in blocked
    ]
    out += [
        CheckReason(
            "warn",
            h.constraint.chain_id,
            "sequence",
            h.text,
            "",
            h.constraint.pointer,
            h.standing,
        )
        for h in hints
        if h.standing != "conditional"
    ]
    return out


def verdict(reasons: Sequence[CheckReason]) -> CallCheck:
    """Block reasons first, then warnings; the decision taken from their levels."""
    ordered = sorted(reasons, key=lambda r: r.level != "block")
    if not ordered:
        return CallCheck("allow")
    return CallCheck(decide(r.level for r in ordered), tuple(ordered))
