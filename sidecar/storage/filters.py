"""Which sessions a forget reaches: a source's session keys, since a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCE_PREFIX = "src:"
"""Session keys of a named source start with ``src:<name>/``; the local source's carry
no prefix."""


@dataclass(frozen=True)
class SessionFilter:
    """The sessions of one source (``prefix`` ``None``: the local source), seen at or
    after ``since`` when given."""

    prefix: str | None
    since: float | None = None

    def where(self, key: str = "session_key", seen: str = "seen_at") -> tuple[str, list[Any]]:
        """A ``WHERE`` clause over a table's session key and time columns, and its
        parameters."""
        args: list[Any] = []
        if self.prefix is None:
            clause = f"substr({key}, 1, {len(SOURCE_PREFIX)}) != '{SOURCE_PREFIX}'"
        else:
            clause, args = f"substr({key}, 1, ?) = ?", [len(self.prefix), self.prefix]
        if self.since is not None:
            clause += f" AND {seen} >= ?"
            args.append(self.since)
        return clause, args
