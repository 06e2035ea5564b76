"""Call-level failure memory: which calls of a tool fail, learned from the tool,
arguments and state of real calls rather than from the sequence of tool names.

Pure Python (standard library only) and storage-free: every type converts to and from
plain JSON dicts.

- :mod:`~sidecar.memory.evidence`: ``Step`` and ``Session``;
- :mod:`~sidecar.memory.signature`: ``normalize_signature``, ``is_business_rule_failure``,
  ``failure_kind``;
- :mod:`~sidecar.memory.trace`: ``Trace``, the incremental index of a session's steps;
- :mod:`~sidecar.memory.features`: ``call_features`` and the feature families;
- :mod:`~sidecar.memory.conditions`: ``FailureCondition`` and ``Predicate`` (JSON form);
- :mod:`~sidecar.memory.memory`: ``FailureMemory``, the incremental learner;
- :mod:`~sidecar.memory.risk`: ``SessionRisk``, ``RiskParams``: a session's risk of
  ending abandoned, from its prefix (``FailureMemory.risk``);
- :mod:`~sidecar.memory.thresholds`: ``assess``, ``may_apply``, ``Thresholds``, ``Verdict``.
"""

from sidecar.classify import BUSINESS_RULE_TEXT
from sidecar.memory.conditions import FailureCondition
from sidecar.memory.evidence import Session, SessionOutcome, Step
from sidecar.memory.features import FAMILIES, call_features
from sidecar.memory.memory import FailureMemory
from sidecar.memory.params import LearnParams
from sidecar.memory.predicate import Predicate
from sidecar.memory.risk import RiskParams, SessionRisk
from sidecar.memory.signature import (
    failure_kind,
    is_business_rule_failure,
    normalize_signature,
)
from sidecar.memory.thresholds import (
    DEFAULT_THRESHOLDS,
    Accepted,
    Reason,
    Thresholds,
    Verdict,
    assess,
    decide,
    may_apply,
    reads_only,
    reasons_for,
)
from sidecar.memory.trace import Trace

__all__ = [
    "BUSINESS_RULE_TEXT",
    "DEFAULT_THRESHOLDS",
    "FAMILIES",
    "Accepted",
    "FailureCondition",
    "FailureMemory",
    "LearnParams",
    "Predicate",
    "Reason",
    "RiskParams",
    "Session",
    "SessionOutcome",
    "SessionRisk",
    "Step",
    "Thresholds",
    "Trace",
    "Verdict",
    "assess",
    "call_features",
    "decide",
    "failure_kind",
    "is_business_rule_failure",
    "may_apply",
    "normalize_signature",
    "reads_only",
    "reasons_for",
]
