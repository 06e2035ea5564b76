"""Usage for lookups: what finished sessions' requests teach (see :mod:`indexes.usage`).

Intake writes the rows (:mod:`sidecar.intake.requests`).  At lookup, :class:`UsageState`
keeps a :class:`~indexes.UsageIndex` in step with the
state's rows: the rows added since its last read are added (the index is the same
whatever the order the rows arrive in); a forget rebuilds it from the rows left, which
hold each source's own kept requests, so the rebuilt index is exactly the one that never
heard of the forgotten evidence (its requests may have pushed others out of the index's
shared samples; the rows still hold those).  So every replica's lookups see every
replica's usage on their next request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection

from indexes import Evidence, UsageIndex
from sidecar.storage.requests import RequestRow
from sidecar.storage.state import State
from sidecar.trust.sources import is_trusted

log = logging.getLogger(__name__)


class UsageState:
    """The usage index of the state's rows, read again only as far as they moved."""

    def __init__(self, state: State, trusted: Collection[str]) -> None:
        self._state = state
        self._trusted = frozenset(trusted)
        self._lock = threading.Lock()
        self._index: UsageIndex | None = None
        self._generation = -1
        self._seq = 0
        self._rows = 0

    def current(self, dim: int) -> UsageIndex | None:
        """The usage index (``None`` while no session taught any usage)."""
        rev = self._state.revisions.current()
        with self._lock:
            index = self._index
            if index is None or index.dim != dim or rev.requests_generation != self._generation:
                index = UsageIndex(dim, trusts=lambda s: is_trusted(s, self._trusted))
                self._seq = self._rows = 0
                self._generation = rev.requests_generation
            if rev.requests > self._seq:
                rows, self._seq = self._state.requests.since(self._seq)
                for row in rows:
                    self._add(index, row)
            self._index = index
            return index if self._rows else None

    def _add(self, index: UsageIndex, row: RequestRow) -> None:
        """Add what a row's count grew by since the index last counted it (the index
        holds each kept request's sessions per source: nothing per stored row here)."""
        try:
            evidence = Evidence.from_row(row.evidence_row())
            grown = row.sessions - index.counted(evidence)
            if grown <= 0:
                return
            index.add(evidence, sessions=grown)
        except ValueError as exc:  # a row of another model's dimension
            log.warning("usage row of %s skipped: %s", row.tool_id, exc)
            return
        self._rows += 1
