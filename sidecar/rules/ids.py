"""A rule's id says which kind of rule it is: an archived chain's (32 hex digits) names
a fatal sequence, a learned call condition's (16) a condition.  Parsed once, at the
boundary, into a :class:`RuleId`; nothing downstream looks at an id's length."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sidecar.errors import InvalidInput

RuleKind = Literal["sequence", "condition"]
_PATTERN = re.compile(r"(?P<sequence>[0-9a-f]{32})|(?P<condition>[0-9a-f]{16})")


@dataclass(frozen=True)
class RuleId:
    kind: RuleKind
    value: str

    def __str__(self) -> str:
        return self.value


def rule_id(value: object) -> RuleId:
    """The rule an id names; :class:`~sidecar.errors.InvalidInput` for anything else."""
    found = _PATTERN.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        shown = value[:80] if isinstance(value, str) else type(value).__name__
        raise InvalidInput(
            f"{shown!r} is not a constraint id (a chain id of 32 lowercase hex digits, or a "
            "call condition id of 16)"
        )
    kind: RuleKind = "sequence" if found.group("sequence") else "condition"
    return RuleId(kind, found.group(0))
