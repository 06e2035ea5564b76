"""An operator's hand on the rules, as operations of :class:`~sidecar.core.Sidecar`
(inherited by it): lifting and reinstating a rule and its family, confirming or
retiring one rule, and reading what was done to it.  Every change is kept in the rule's
history with the operator's reason and, when a shell says who, their name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sidecar import validate
from sidecar.boundary import boundary
from sidecar.results import ConstraintChange, ConstraintEvent, RuleSessions
from sidecar.trust.principals import LOCAL, check_source

if TYPE_CHECKING:
    from sidecar.eviction.recovery import Recovery
    from sidecar.rules.book import Rules


class RuleDesk:
    """Lift, reinstate, confirm, retire: what an operator does to a rule."""

    rules: Rules
    recovery: Recovery

    @boundary
    def lift(self, constraint_id: str, reason: str, by: str | None = None) -> ConstraintChange:
        """Stop enforcing a rule (and its family); the record stays for audit.  ``by``: the
        operator's token name, recorded with the reason."""
        self.recovery.writable()
        why = validate.reason(reason, "lifting a constraint needs a reason")
        return self.rules.set_status(constraint_id, True, _by(why, by))

    @boundary
    def reinstate(self, constraint_id: str, reason: str, by: str | None = None) -> ConstraintChange:
        """Enforce a lifted or retired rule again; only contradictions met from now on
        count against it.  ``by`` as for :meth:`lift`."""
        self.recovery.writable()
        why = validate.reason(reason, "reinstating a constraint needs a reason")
        return self.rules.set_status(constraint_id, False, _by(why, by))

    @boundary
    def confirm(self, constraint_id: str, reason: str, by: str | None = None) -> ConstraintChange:
        """Vouch for a rule: it is enforced (as on :meth:`reinstate`) and acts as a
        hand-written rule does: it blocks when it holds, whatever the standing of the
        sources that taught it, and every agent may read it.  Lifting or reinstating it
        takes the confirmation back.  ``by`` as for :meth:`lift`."""
        self.recovery.writable()
        why = validate.reason(reason, "confirming a constraint needs a reason")
        return self.rules.judge(constraint_id, "confirmed", _by(why, by), _who(by))

    @boundary
    def retire(self, constraint_id: str, reason: str, by: str | None = None) -> ConstraintChange:
        """Stop enforcing this rule alone (not its family, unlike :meth:`lift`): it is
        kept, retired, to be read and reinstated.  ``by`` as for :meth:`lift`."""
        self.recovery.writable()
        why = validate.reason(reason, "retiring a constraint needs a reason")
        return self.rules.judge(constraint_id, "retired", _by(why, by), _who(by))

    @boundary
    def rule_sessions(self, constraint_id: str, limit: int = 100) -> RuleSessions:
        """The sessions behind a rule and those that contradicted it, by key, at most
        ``limit`` of each (a call condition: a sample of its failing sessions, and no
        contradicting ones: it counts them without keeping them)."""
        return self.rules.sessions_of(constraint_id, max(1, min(int(limit), 1000)))

    @boundary
    def constraint_history(self, constraint_id: str, limit: int = 100) -> list[ConstraintEvent]:
        """A rule's recorded lifts, reinstatements, confirmations, retirements and
        variants, newest first."""
        return self.rules.history(constraint_id, max(1, min(int(limit), 1000)))


def _who(by: str | None) -> str:
    return LOCAL if by is None else check_source(by)


def _by(reason: str, by: str | None) -> str:
    """A reason as the audit trail keeps it: with who gave it, when a shell said."""
    return reason if by is None else f"{reason} (by {check_source(by)})"
