"""Repeats: the very call (the tool, with the same arguments) had already succeeded
earlier in the session (``again``).  Creating what the first call created, or deleting
what it deleted, fails where reading it again would not.  Such a condition blocks only
when the failure message says so ("already", "exists", "duplicate"): a repeated call
that fails for another reason is more often a retry of something flaky than the repeat
itself.
"""

from __future__ import annotations

import re
from typing import ClassVar

from sidecar.memory.families.base import Call, Family, Features
from sidecar.memory.predicate import Predicate
from sidecar.memory.stats import ToolStats

PREFIX = "again"
FEATURE = f"{PREFIX}:call"
_ALREADY = re.compile(r"(?i)\b(?:already|duplicate[sd]?|exists)\b")
"""A message that says the call's effect is there already."""


class Repeated(Family):
    name: ClassVar[str] = "repeated"
    rank: ClassVar[int] = 11
    prefixes: ClassVar[tuple[str, ...]] = (PREFIX,)

    def extract(self, call: Call, out: Features) -> None:
        out[FEATURE] = call.trace.done_before(call.tool, call.arguments)

    def proposes_flag(self, name: str, value: bool | None) -> bool:
        return value is True  # a first call explains nothing

    def signature_names(self, predicate: Predicate, signature: str) -> bool:
        return predicate.value is True and bool(_ALREADY.search(signature))

    def warn_only(self, predicate: Predicate, stats: ToolStats, named: set[str]) -> bool:
        return predicate.feature not in named

    def describe(self, predicate: Predicate) -> str:
        if predicate.value:
            return "the same call (tool and arguments) had succeeded earlier in the session"
        return "no call with the same arguments had succeeded earlier in the session"


FAMILY = Repeated()
