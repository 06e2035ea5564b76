"""Usage for lookups: what finished sessions' requests teach (see :mod:`indexes.usage`).

At intake, a finished session that states its request (``task_input``) becomes one row
per tool it speaks for (:func:`request_rows`): the tools that returned without error in
a completed session served the request; the tool an abandoned session failed at
deterministically did not.  The request is embedded as a lookup embeds a query (its
views); of several views, each tool keeps the one nearest its own vector (a request
with several parts, each served by a tool).  The rows go to the state
(:mod:`sidecar.storage.requests`) with the batch, attributed to its source.

At lookup, :class:`UsageState` keeps a :class:`~indexes.UsageIndex` in step with the
state's rows: the rows added since its last read are added (the index is the same
whatever the order the rows arrive in); a forget rebuilds it.  So every replica's
lookups see every replica's usage on their next request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Sequence

import numpy as np

from indexes import ActiveIndex, Evidence, UsageIndex, query_vectors
from sidecar.intake.plan import Ask
from sidecar.ranking import query_views
from sidecar.sources import is_trusted
from sidecar.storage.requests import RequestRow
from sidecar.storage.state import State

log = logging.getLogger(__name__)


def request_rows(
    index: ActiveIndex, asks: Sequence[Ask], source: str, at: float
) -> list[RequestRow]:
    """The usage rows of finished sessions' requests, attributed to ``source`` (every
    request's views embedded in one run of the query graph)."""
    asks = [a for a in asks if a.served or a.failed]
    views = [query_views(a.text) for a in asks]
    flat = [v for vs in views for v in vs]
    if not flat:
        return []
    vectors = query_vectors(index.embedder, flat)
    out: list[RequestRow] = []
    start = 0
    for ask, texts in zip(asks, views, strict=True):
        rows = vectors[start : start + len(texts)]
        start += len(texts)
        tools = [(t, True) for t in ask.served] + [(t, False) for t in ask.failed]
        nearest = _nearest_views(index, rows, [t for t, _ in tools])
        for tool, completed in tools:
            row = Evidence(tool, source, ask.session, nearest[tool], completed, at).row()
            out.append(RequestRow(*row))
    return out


def _nearest_views(
    index: ActiveIndex, views: np.ndarray, tools: list[str]
) -> dict[str, np.ndarray]:
    """Per tool, the request's view nearest its own vector (as
    :func:`indexes.usage.request_vector` chooses, with the similarities asked of the
    index, which holds the tools' vectors: one question per view); the first view when
    the request has one, or the index does not hold the tool."""
    if len(views) == 1:
        return dict.fromkeys(tools, np.asarray(views[0]))
    sims = [index.similarities(view, tools) for view in views]
    out: dict[str, np.ndarray] = {}
    for tool in tools:
        scores = [found.get(tool) for found in sims]
        best = 0 if None in scores else int(np.argmax(np.asarray(scores, dtype=np.float64)))
        out[tool] = np.asarray(views[best])
    return out


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
        self._counted: dict[tuple[str, str, str, str], int] = {}
        """Per stored row, the sessions the index holds of it: a row read again (its
        request seen again) adds what its count grew by."""

    def current(self, dim: int) -> UsageIndex | None:
        """The usage index (``None`` while no session taught any usage)."""
        rev = self._state.revisions.current()
        with self._lock:
            index = self._index
            if index is None or index.dim != dim or rev.requests_generation != self._generation:
                index = UsageIndex(dim, trusts=lambda s: is_trusted(s, self._trusted))
                self._seq = self._rows = 0
                self._counted = {}
                self._generation = rev.requests_generation
            if rev.requests > self._seq:
                rows, self._seq = self._state.requests.since(self._seq)
                for row in rows:
                    self._add(index, row)
            self._index = index
            return index if self._rows else None

    def _add(self, index: UsageIndex, row: RequestRow) -> None:
        grown = row.sessions - self._counted.get(row.group, 0)
        if grown <= 0:
            return
        try:
            added = index.add(Evidence.from_row(row.evidence_row()), sessions=grown)
        except ValueError as exc:  # a row of another model's dimension
            log.warning("usage row of %s skipped: %s", row.tool_id, exc)
            return
        self._rows += 1
        if added.kept:
            self._counted[row.group] = row.sessions
        # the store deletes the rows the index pushed out: one coming back starts again
        for key in added.evicted:
            self._counted.pop((row.tool_id, row.source, row.outcome, key), None)
