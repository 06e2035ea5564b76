"""Who stands behind a rule, and whose evidence counts against it: one rule for every
kind of evidence.

Every session key names its source (``src:<name>/...``; the local source's keys carry
no prefix).  A rule's sources are those of the sessions behind it.

- Evidence is *independent* when it comes from two witnesses, or from one trusted source
  (the process itself, an operator, a token marked trusted, the gateway's own
  observations).  A token's reports and its traces (``otlp:<name>``) are one witness
  (:func:`~sidecar.trust.sources.witness`).  Only independent evidence makes a rule block,
  withhold or evict; otherwise the rule warns.
- A success that matches a rule *contradicts* it.  Against a rule a trusted source
  stands behind, only a trusted source's contradictions count; against any other, they
  count when they come from a trusted source, from one of the rule's own witnesses, or
  from two witnesses or more: no single other token contests a rule alone.  The others
  are recorded, shown and alerted on, and change no verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sidecar.storage.filters import SOURCE_PREFIX
from sidecar.trust.sources import LOCAL as LOCAL
from sidecar.trust.sources import is_trusted, witnesses


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
class Against:
    """The contradictions of one rule, as they count."""

    counted: tuple[float, ...]
    """When each counted contradiction arrived, in order."""
    ignored: int
    """Contradictions recorded but not counted (no standing to contest the rule)."""
    ignored_sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Standing:
    trusted: frozenset[str]
    """Sources whose word alone is enough (:func:`~sidecar.trust.sources.is_trusted`)."""
    min_sources: int = 2
    """Untrusted witnesses it takes to make evidence independent."""

    def is_trusted(self, source: str) -> bool:
        return is_trusted(source, self.trusted)

    def independent(self, sources: Iterable[str]) -> bool:
        found = set(sources)
        return len(witnesses(found)) >= self.min_sources or any(self.is_trusted(s) for s in found)

    def sources_of(self, session_keys: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted({source_of(k) for k in session_keys}))

    def against(
        self,
        backing: Iterable[str],
        contradictions: Sequence[tuple[str, float]],
        since: float | None = None,
    ) -> Against:
        """Which of a rule's contradictions ``(source, when)`` count, those met after
        ``since`` (a reinstatement) only."""
        entries = [(s, at) for s, at in contradictions if since is None or at > since]
        if not entries:
            return Against((), 0)
        own = set(backing)
        if any(self.is_trusted(s) for s in own):
            counts = [self.is_trusted(s) for s, _ in entries]
        else:
            sources = {s for s, _ in entries}
            who = witnesses(sources)
            standing = (
                len(who) >= self.min_sources
                or any(self.is_trusted(s) for s in sources)
                or bool(who & witnesses(own))
            )
            counts = [standing] * len(entries)
        counted = [e for e, ok in zip(entries, counts, strict=True) if ok]
        ignored = [e for e, ok in zip(entries, counts, strict=True) if not ok]
        return Against(
            tuple(sorted(at for _, at in counted)),
            len(ignored),
            tuple(sorted({s for s, _ in ignored})),
        )
