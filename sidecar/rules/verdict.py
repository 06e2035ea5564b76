"""The one place a check's reasons are merged and its verdict decided (a call seen
several ways, too: :func:`merged`).

Before a call, two kinds of rule may hold: learned (or hand-written) call conditions
and fatal sequences the call would complete.  Each gives reasons at a level; the verdict
is decided once, from all of them (:func:`~sidecar.memory.decide`): any block blocks,
any warning warns.  Block reasons come first, then warnings, each kind in its order.
Every reason is worded for the viewer who asked (:mod:`sidecar.rules.wording`): a
warning the viewer may not be shown is left out before the verdict is decided.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from sidecar.memory import FailureCondition, Reason, SessionRisk, decide
from sidecar.model import ArchivedConstraint, CallCheck, CheckReason
from sidecar.rules import wording
from sidecar.rules.conditions import ConditionState
from sidecar.rules.matcher import Hint
from sidecar.rules.wording import Reading


def condition_reasons(
    reasons: Iterable[Reason],
    states: Mapping[str, ConditionState],
    reading: Reading,
    max_chance: float,
    to_block: Callable[[FailureCondition], int | None] = lambda _c: None,
) -> list[CheckReason]:
    out = []
    for r in reasons:
        st = states.get(r.condition_id)
        c = r.condition if r.condition is not None else st.condition if st else None
        if c is None:
            raise ValueError(f"reason {r.condition_id} carries no condition")
        if r.level == "warn" and not reading.shows_warning(c, max_chance):
            continue
        readable = reading.reads_condition(c)
        pointer, status = (st.pointer, st.status) if st is not None else (None, "active")
        if not reading.owns_condition(c):
            pointer = None  # the archive's record of another source's session
        reason = wording.condition_reason(c, r.level, r.observed, pointer, status, readable)
        if r.level == "warn" and status == "active":
            reason = replace(reason, to_block=to_block(c))
        out.append(reason)
    return out


def sequence_reasons(
    blocked: Sequence[tuple[ArchivedConstraint, str]],
    hints: Sequence[Hint],
    reading: Reading,
    context: Mapping[str, object],
) -> list[CheckReason]:
    """The fatal sequences a call would complete (``blocked``), and the contested or
    unconfirmed ones it would complete (warnings; an unconfirmed one only to a viewer
    who reads it: it rests on one untrusted source)."""
    out = []
    for c, _why in blocked:
        why = wording.why(c.when, context, reading.reads_sequence(c))
        out.append(wording.sequence_reason(c, "block", why, "active", reading))
    for h in hints:
        if h.standing == "conditional":
            continue
        readable = reading.reads_sequence(h.constraint)
        if h.standing == "unconfirmed" and not readable:
            continue
        text = wording.standing_text(h.constraint, reading.owns(h.constraint.sources))
        out.append(wording.sequence_reason(h.constraint, "warn", text, h.standing, reading))
    return out


def verdict(reasons: Sequence[CheckReason]) -> CallCheck:
    """Block reasons first, then warnings; the decision taken from their levels."""
    ordered = sorted(reasons, key=lambda r: r.level != "block")
    if not ordered:
        return CallCheck("allow")
    return CallCheck(decide(r.level for r in ordered), tuple(ordered))


def merged(checks: Iterable[CallCheck]) -> CallCheck:
    """One verdict for a call seen several ways (a gateway's session as each link reads
    it, the tool under each name it has had): every rule that holds in any of them, once,
    at the strictest level it held at, decided as one check is."""
    checks = list(checks)
    reasons = sorted((r for c in checks for r in c.reasons), key=lambda r: r.level != "block")
    kept: dict[str, CheckReason] = {}
    for r in reasons:
        kept.setdefault(r.constraint_id, r)
    # the session's risk is read from its steps as named now: the first view's
    risk = next((c.risk for c in checks if c.risk is not None), None)
    return replace(verdict(list(kept.values())), risk=risk)


RISK_RULE = "session-risk"
"""The rule id of the warning :func:`risk_warning` words."""


def risk_warning(risk: SessionRisk | None, level: float | None) -> str | None:
    """The warning a session's risk of ending abandoned makes once it reached ``level``
    (``None``: never), in words; ``None`` below it.  A risk is a reason to look at the
    session, never one to refuse a call."""
    if level is None or risk is None or risk.probability < level:
        return None
    why = f"; {risk.reason}" if risk.reason else ""
    return (
        f"this session's risk of ending abandoned is {risk.probability:.2f} "
        f"(at least {level:.2f} warns), from {risk.sessions} past sessions like it{why}"
    )
