"""What a lift covers: a rule's *family*, the same rule with its failure written any other
way.

Two rules are of one family when they test the same thing (the same fatal sequence; the
same tool and predicate) and their signatures' words mostly agree
(:func:`~sidecar.memory.signature.same_family`).  A lift covers the family, archived or
learned before or after it, so that a changed character in a report does not make a new
rule; reinstating any member enforces the family again.  Both rule kinds ask here.
"""

from __future__ import annotations

from collections.abc import Iterable

from sidecar.memory.signature import same_family, signature_words

Member = tuple[str, str, frozenset[str]]
"""``(rule id, what it tests, its signature's words)``."""


def words(signature: str) -> frozenset[str]:
    return signature_words(signature)


def members(key: str, of: frozenset[str], rules: Iterable[Member]) -> list[str]:
    """The ids of ``rules`` in the family of (``key``, ``of``)."""
    return [rid for rid, k, w in rules if k == key and same_family(of, w)]


def covered(key: str, of: frozenset[str], lifts: Iterable[Member]) -> bool:
    """Whether one of ``lifts`` covers the family of (``key``, ``of``)."""
    return bool(members(key, of, lifts))
