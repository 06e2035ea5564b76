"""Intake's usage step: a finished session that states its request (``task_input``)
becomes one row per tool it speaks for: the tools that returned without error in a
completed session served the request; the tool an abandoned session failed at
deterministically did not.  The request is embedded as a lookup embeds a query (its
views); of several views, each tool keeps the one nearest its own vector (a request
with several parts, each served by a tool).  The rows go to the state
(:mod:`sidecar.storage.requests`) with the batch, attributed to its source; lookups
read them back (:mod:`sidecar.lookup.usage`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from indexes import ActiveIndex, Evidence, query_vectors
from sidecar.intake.plan import Ask
from sidecar.lookup.ranking import query_views
from sidecar.storage.requests import RequestRow


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
