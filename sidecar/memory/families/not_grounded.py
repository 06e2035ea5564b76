"""Grounding: every id-like value of an argument occurs in an earlier output, argument
or the task input (``grounded:{a}``).  An ungrounded id is one the agent may have made
up; it is evidence only when the failure message speaks of it: it quotes the value, or
it names the argument and says its value is not there or not right ("The appointment ID
does not exist", "The password is incorrect").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from sidecar.memory.families.base import Call, Family, Features, all_named
from sidecar.memory.predicate import Predicate
from sidecar.memory.values import FeatureValue


class NotGrounded(Family):
    name: ClassVar[str] = "not_grounded"
    rank: ClassVar[int] = 1
    prefixes: ClassVar[tuple[str, ...]] = ("grounded",)

    def extract(self, call: Call, out: Features) -> None:
        for name, keys in call.keys_of.items():
            out[f"grounded:{name}"] = len(call.seen[name]) == len(keys)

    def proposes_flag(self, name: str, value: bool | None) -> bool:
        return value is False  # a grounded value explains nothing

    def signature_names(self, predicate: Predicate, signature: str) -> bool:
        if _FORM.search(signature) or not _ABSENT.search(signature):
            return False
        return names_argument(signature, predicate.rest)

    def describe(self, predicate: Predicate) -> str:
        where = "earlier output, argument or the task input"
        return f"{predicate.rest} appears in {'an' if predicate.value else 'no'} {where}"

    def absent(self, predicate: Predicate) -> bool:
        return predicate.value is False

    def unfounded(self, predicate: Predicate) -> str | None:
        return predicate.rest if predicate.value is False else None

    def named(
        self, features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str,
        amounts: Mapping[str, float],
    ) -> list[str]:  # fmt: skip
        return [f"grounded:{n}" for n, raw in arguments.items() if all_named(raw, error)]


_ABSENT = re.compile(
    r"(?i)\b(?:does\s*n[o']?t\s+exist|not\s+exist|no\s+such|not\s+found|not\s+in\s+the"
    r"|unknown|incorrect|wrong|not\s+recogni[sz]ed)\b"
)
"""A message that says a value is not there, or not the right one."""
_FORM = re.compile(r"(?i)\b(?:format|formatted|invalid|must\s+be|should\s+be|expected)\b")
"""A message about the value's form: its shape is the matter, not whether it exists."""
_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_GENERIC = frozenset({"name", "type", "value", "data", "info", "text", "item", "items"})


def names_argument(signature: str, argument: str) -> bool:
    """Whether a message names an argument: a word of its name of four letters or more,
    not a generic one, begins a word of the message (``appointment_id``: "The
    appointment ID"; ``file_name``: "No such file")."""
    text = signature.lower()
    for part in _PART.findall(argument):
        word = part.lower()
        if len(word) >= 4 and word not in _GENERIC and re.search(rf"\b{word}", text):
            return True
    return False


FAMILY = NotGrounded()
