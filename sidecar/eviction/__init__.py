"""Eviction: which tools leave the hot index (:mod:`.decision`), moving them between the
stores safely (:mod:`.engine`, :mod:`.journal`), and the revocation mandates their
dormant credentials get (:mod:`.revocation`)."""

from sidecar.eviction.decision import (
    EvictionReport,
    Policy,
    RestoreResult,
    ToolDecision,
    approximate_tokens,
    decide,
)
from sidecar.eviction.engine import Evictor
from sidecar.eviction.journal import Journal
from sidecar.eviction.revocation import Ledger, Revoker, make_revoker
from sidecar.storage.mandates import Mandate

__all__ = [
    "EvictionReport",
    "Evictor",
    "Journal",
    "Ledger",
    "Mandate",
    "Policy",
    "RestoreResult",
    "Revoker",
    "ToolDecision",
    "approximate_tokens",
    "decide",
    "make_revoker",
]
