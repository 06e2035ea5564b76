"""Request limits and status vocabularies, defined once.

The library enforces them; the HTTP request models, the CLI's argument parser and the
MCP tools import them from here, so every surface accepts and refuses the same input.
"""

from __future__ import annotations

from typing import Literal, get_args

MAX_K = 100
"""Hits one lookup may ask for."""
MAX_QUERY = 2_048
"""Characters of a lookup query."""
MAX_PLAN = 256
"""Tools in a plan, an executed prefix or a report's topology."""
MAX_CONTEXT = 64
"""Fields of a lookup or check context."""
MAX_REASON = 2_048
"""Characters of an operator's reason (restore, lift, reinstate)."""
MAX_TOOLS_PER_REQUEST = 10_000
MAX_REPORTS_PER_REQUEST = 1_000
INTAKE_CHUNK = 5_000
"""Reports per all-or-nothing intake batch (one cold file, one state transaction).  A
batch rewrites the index pages its random chain ids land on, about all of them once the
archive is large, so larger batches write fewer pages per chain."""
MAX_POINTER = 512
MAX_STEPS = 1_000
"""Steps of one reported session, or of a session given to a check or a lookup."""
MAX_TEXT = 16_384
"""Characters of a signature, a rule or a task input."""
MAX_MIN_CHAINS = 1_000_000
MAX_BODY_BYTES = 1_048_576
"""Largest HTTP request body, by default."""

CheckMode = Literal["sequence", "prefix"]
CHECK_MODES: tuple[str, ...] = get_args(CheckMode)

MandateStatus = Literal["pending", "submitted", "revoked", "failed", "unsupported", "cancelled"]
MANDATE_STATUSES: tuple[str, ...] = get_args(MandateStatus)

ConstraintStatus = Literal["active", "contested", "retired", "lifted"]
CONSTRAINT_STATUSES: tuple[str, ...] = get_args(ConstraintStatus)

IntakeStatus = Literal["archived", "not_archived", "rejected", "recorded"]
INTAKE_STATUSES: tuple[str, ...] = get_args(IntakeStatus)

Decision = Literal["allow", "warn", "block"]
DECISIONS: tuple[str, ...] = get_args(Decision)
