"""The rules: fatal sequences and call conditions, their status and lifecycle, and the
checks that apply them (:class:`~sidecar.rules.book.Rules`).

- :mod:`.ids`: a rule's id, parsed into its kind;
- :mod:`.lifecycle`: active, contested, retired, lifted;
- :mod:`.families`: what a lift covers;
- :mod:`.sequences`: fatal sequences compiled from archived chains;
- :mod:`.learner` and :mod:`.conditions`: the call memory's learner in the state, and
  the conditions it derives;
- :mod:`.matcher`: the compiled automaton over fatal sequences;
- :mod:`.verdict`: the one place a check's reasons become a verdict.
"""

from sidecar.rules.book import Rules
from sidecar.rules.ids import RuleId, rule_id
from sidecar.rules.lifecycle import ENFORCED, Lifecycle, Status

__all__ = ["ENFORCED", "Lifecycle", "RuleId", "Rules", "Status", "rule_id"]
