"""Constraint-aware lookup.

A lookup ranks active tools by similarity to the query and never returns one that the
state says is cold (evicted, or with its move begun) or one that would complete a
fatal sequence after the executed prefix under the given context; the fatal
continuations that the filter displaced come back as ``withheld`` with their rule and
pointer, and hits that lead toward a fatal sequence carry warnings.

With ``hybrid`` on (the default), the order is the fusion of :mod:`sidecar.lookup.ranking`: the
dense ranking over the query's views, BM25 over the same documents, the usage finished
sessions taught (:mod:`sidecar.lookup.usage`; a hit it raised says by how many sessions)
and, after an executed prefix, the tools that completed chains after it.  Exclusions apply to the
fused order exactly as to the dense one: a withheld or cold tool is never a hit, and
the withheld continuations that ranked above the last hit are listed.  A hit's
``score`` stays its cosine similarity (its best view's); a lookup whose best hit is
below ``abstain_below`` answers ``abstained`` with its hits, as candidates.

The compiled fatal sequences (:meth:`sidecar.rules.Rules.matcher`) are rebuilt only when
the constraints revision moves; the set of cold tools and the hits' fields are re-read
only when the hot-index revision moves.  Both revisions come from one read
of the state, so a lookup follows writes made by any process on the home.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from indexes import ActiveIndex, IndexHit, query_vectors
from sidecar.lookup.ranking import hybrid_ranked, query_views, successors
from sidecar.lookup.usage import UsageState
from sidecar.memory import Step, Trace
from sidecar.model import ArchivedConstraint, LookupHit, LookupResult, Withheld
from sidecar.rules import Rules, wording
from sidecar.rules.matcher import Hint
from sidecar.rules.wording import OPERATOR, Reading, Viewer
from sidecar.settings import Settings
from sidecar.storage.state import State
from sidecar.tools.records import Fields
from sidecar.trust.neutralize import shown


class Lookup:
    def __init__(
        self,
        state: State,
        rules: Rules,
        fields: Fields,
        settings: Settings,
        trusted: Collection[str] = (),
    ) -> None:
        self._state = state
        self.usage = UsageState(state, trusted)
        self._rules = rules
        self._fields = fields
        self._settings = settings
        self._lock = threading.Lock()
        self._cold: frozenset[str] = frozenset()
        self._cold_rev = -1
        self._index_rev = -1
        self._chains: list[tuple[tuple[str, ...], int]] = []
        self._chains_rev = -1

    def tool_type(self, tool_id: str) -> str | None:
        """A catalog tool's type (``None``: no such active tool), read from the fields
        held in memory (reloaded only when the hot-index revision moves)."""
        _constraints_rev, tools_rev = self._state.revisions.revisions()
        found = self._fields.at(tools_rev).get(tool_id)
        return None if found is None else str(found.get("tool_type") or "unspecified")

    def follow(self, index: ActiveIndex, tools_rev: int) -> None:
        """Keep ``index``'s in-process copies (the exact tier's vectors) in step: its own
        writes update them as they happen; when another process wrote to the hot index
        since the last lookup, they are dropped and read again."""
        with self._lock:
            if tools_rev != self._index_rev:
                if self._state.revisions.written_elsewhere(self._index_rev, tools_rev):
                    index.invalidate()
                self._index_rev = tools_rev

    def cold_tools(self, tools_rev: int) -> frozenset[str]:
        """Tools the state says are not hot: evicted, or with their move begun."""
        with self._lock:
            if tools_rev != self._cold_rev:
                moves = self._state.moves
                self._cold = frozenset(moves.evicted()) | moves.in_flight_tools()
                self._cold_rev = tools_rev
            return self._cold

    def withheld_at_start(self) -> frozenset[str]:
        """Tools a lookup with no executed prefix and no context withholds (a fatal
        sequence of one step)."""
        blocked, _ = self._rules.matcher().next_steps((), {})
        return frozenset(blocked)

    def completed_chains(self) -> list[tuple[tuple[str, ...], int]]:
        """Completed chains and their runs, read again when a completed run was counted."""
        rev = self._state.revisions.current().usage
        with self._lock:
            if rev != self._chains_rev:
                self._chains = self._state.uses.completed_topologies()
                self._chains_rev = rev
            return self._chains

    def search_text(
        self,
        index: ActiveIndex,
        text: str,
        k: int,
        executed: tuple[str, ...],
        context: dict[str, Any],
        steps: Sequence[Step] | None = None,
        task_input: str | None = None,
        viewer: Viewer = OPERATOR,
    ) -> LookupResult:
        """The lookup of a request's text: embedded (its views, when the ranking is
        hybrid, which also reads the text for BM25), then :meth:`search`."""
        if self._settings.hybrid:
            vector = query_vectors(index.embedder, query_views(text))
            return self.search(index, vector, k, executed, context, steps, task_input, text, viewer)
        vector = index.embed_query(text)
        return self.search(index, vector, k, executed, context, steps, task_input, None, viewer)

    def search(
        self,
        index: ActiveIndex,
        vector: np.ndarray,
        k: int,
        executed: tuple[str, ...],
        context: dict[str, Any],
        steps: Sequence[Step] | None = None,
        task_input: str | None = None,
        text: str | None = None,
        viewer: Viewer = OPERATOR,
    ) -> LookupResult:
        """The lookup.  ``vector`` holds the query's vector, or one row per view;
        ``text`` is the query itself (for BM25; ``None``: the dense ranking alone); its
        withheld tools and warnings are worded for ``viewer``."""
        constraints_rev, tools_rev = self._state.revisions.revisions()
        matcher = self._rules.matcher(constraints_rev)
        blocked, conditional = matcher.next_steps(executed, context)
        self.follow(index, tools_rev)
        exclude: Collection[str] = blocked.keys() | self.cold_tools(tools_rev)
        fields = self._fields.at(tools_rev)
        excluded = _Excluded(exclude, fields)
        raised: dict[str, int] = {}
        if self._settings.hybrid:
            ranked, displaced, raised = self._fused(index, vector, k, executed, excluded, text)
        else:
            ranked, displaced = index.search_ranked(vector, k, excluded, ids_only=True)
        reading = self._rules.reading(viewer)
        withheld = [
            _withheld(h.id, c, why, context, reading)
            for h in displaced
            if h.id in blocked
            for c, why in blocked[h.id]
        ]
        limit = self._settings.max_warnings_per_tool
        trace = Trace(steps, task_input) if steps else None
        words = None if viewer.operator else reading
        hits = [
            LookupHit(
                tool_id=h.id,
                score=h.score,
                description=str(fields[h.id].get("description") or ""),
                warnings=tuple(
                    (
                        self._rules.hints(trace, h.id, task_input, reading)
                        + _hints(conditional.get(h.id, []), reading)
                        + matcher.warnings(executed, h.id, limit, words)
                    )[:limit]
                ),
                tool_type=str(fields[h.id].get("tool_type") or "unspecified"),
                usage=raised.get(h.id, 0),
            )
            for h in ranked
        ]
        best = max((h.score for h in hits), default=-1.0)
        below = self._settings.abstain_below
        abstained = below > 0 and best < below
        return LookupResult(tuple(hits), tuple(withheld), abstained)

    def _fused(
        self,
        index: ActiveIndex,
        vector: np.ndarray,
        k: int,
        executed: tuple[str, ...],
        excluded: Collection[str],
        text: str | None,
    ) -> tuple[list[IndexHit], list[IndexHit], dict[str, int]]:
        """The ``k`` best hits of the fused ranking that are not ``excluded``, the
        excluded ones ranked above the last of them (what the exclusion displaced), and
        the completed sessions whose usage raised each hit it raised."""
        weight = self._settings.chain_weight
        # beside the dense ranking alone (a lookup by vector) the chains outweigh it on
        # catalogs whose chains rarely repeat: see sidecar.lookup.ranking
        chains = (
            successors(self.completed_chains(), executed)
            if executed and weight > 0 and text is not None
            else []
        )
        views = np.atleast_2d(vector)
        fused = hybrid_ranked(
            index,
            views,
            text,
            k,
            excluded,
            usage=self.usage.current(views.shape[1]),
            chains=chains,
            chain_weight=weight,
        )
        raised = {t: b.sessions for t, b in fused.usage.items() if b.score > 0 and b.sessions}
        return (
            [IndexHit(rid, score, "", {}) for rid, score in fused.hits],
            [IndexHit(rid, score, "", {}) for rid, score in fused.displaced],
            raised,
        )


class _Excluded(Collection[str]):
    """The excluded ids, plus any id the records do not know (a record the hot index
    kept after its tool left: never served)."""

    def __init__(self, ids: Collection[str], known: Mapping[str, object]) -> None:
        self._ids = ids
        self._known = known

    def __contains__(self, item: object) -> bool:
        return item in self._ids or item not in self._known

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Any:
        return iter(self._ids)


def _withheld(
    tool: str, c: ArchivedConstraint, why: str, context: Mapping[str, Any], reading: Reading
) -> Withheld:
    pointer = c.pointer if reading.owns(c.sources) else ""
    if reading.reads_sequence(c):
        return Withheld(tool, shown(c.rule), pointer, c.chain_id, why)
    text = wording.sequence_text(c, False)
    return Withheld(tool, text, pointer, c.chain_id, wording.why(c.when, context, False))


def _hints(hints: Sequence[Hint], reading: Reading) -> list[str]:
    out = []
    for h in hints:
        shown_as = wording.lookup_hint(h.constraint, h.standing, h.text, reading)
        if shown_as is not None:
            out.append(shown_as)
    return out
