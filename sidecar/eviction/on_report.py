"""A home that evicts on report (``SIDECAR_EVICT_ON_REPORT``): intake says which
batches archived a chain, and the eviction runs after each of them, its answers told
what it did."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from sidecar.errors import SidecarError
from sidecar.eviction.decision import EvictionReport
from sidecar.intake import Committed
from sidecar.model import IntakeResult


def after_batches(
    batches: Iterable[Committed],
    evict: Callable[[], EvictionReport] | None,
    progress: Callable[[int], None] | None,
) -> list[IntakeResult]:
    """Every batch's answers; after a batch that archived, the eviction when the home
    evicts on report (its answers told what it did)."""
    results: list[IntakeResult] = []
    for done in batches:
        archived = done.archived and evict is not None
        results += _noted(done.results, evict) if archived and evict else done.results
        if progress is not None:
            progress(len(results))
    return results


def _noted(results: list[IntakeResult], evict: Callable[[], EvictionReport]) -> list[IntakeResult]:
    """A batch's answers told what the eviction run after it did."""
    try:
        note = f"; evicted {', '.join(d.tool_id for d in evict().evicted) or 'nothing'}"
    except SidecarError as exc:
        note = f"; eviction skipped: {exc}"
    return [
        replace(r, reason=f"{r.reason or ''}{note}") if r.status in ("archived", "recorded") else r
        for r in results
    ]
