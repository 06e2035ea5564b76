"""The outcome an observed session's steps imply, when its agent declared none: the one
rule the gateway and the OTLP intake report by."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.memory import SessionOutcome, Step


def inferred_outcome(steps: Sequence[Step]) -> SessionOutcome | None:
    """``abandoned`` when the last failure was never followed by a success of the same
    tool, ``unknown`` when it was, ``None`` when nothing failed."""
    steps = list(steps)
    last = next((i for i in range(len(steps) - 1, -1, -1) if steps[i].failed), None)
    if last is None:
        return None
    tool = steps[last].tool
    recovered = any(s.tool == tool and not s.failed for s in steps[last + 1 :])
    return "unknown" if recovered else "abandoned"
