"""Who stands behind a rule, and whose evidence counts against it.

Every session key names its source (``src:<name>/...``; the local source's keys carry
no prefix).  A rule's sources are those of the sessions behind it.  Evidence is
*independent* when it comes from two sources, or from one trusted source; only
independent evidence makes a rule block, withhold or evict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sidecar.storage.filters import SOURCE_PREFIX

LOCAL = "local"
"""The source of evidence a process reports through the library itself."""


def source_of(session_key: str) -> str:
    """The source a session key belongs to."""
    if session_key.startswith(SOURCE_PREFIX):
        return session_key[len(SOURCE_PREFIX) :].split("/", 1)[0]
    return LOCAL


def session_filter_prefix(source: str) -> str | None:
    """The prefix of a source's session keys (``None``: the local source's, which carry
    none)."""
    return None if source == LOCAL else f"{SOURCE_PREFIX}{source}/"


@dataclass(frozen=True)
class Standing:
    trusted: frozenset[str]
    """Sources whose word alone is enough (the process itself, trusted tokens)."""
    min_sources: int = 2
    """Untrusted sources it takes to make evidence independent."""

    def independent(self, sources: Iterable[str]) -> bool:
        found = set(sources)
        return len(found) >= self.min_sources or bool(found & self.trusted)

    def sources_of(self, session_keys: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted({source_of(k) for k in session_keys}))
