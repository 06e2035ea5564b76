"""Constraint-aware lookup and plan checks.

A lookup ranks active tools by similarity to the query and never returns one that the
state says is cold (evicted, or with its move begun) or one that would complete a
fatal sequence after the executed prefix under the given context; the fatal
continuations that the filter displaced come back as ``withheld`` with their rule and
pointer, and hits that lead toward a fatal sequence carry warnings.

With ``hybrid`` on (the default), the order is the fusion of :mod:`sidecar.ranking`: the
dense ranking over the query's views, BM25 over the same documents and, after an
executed prefix, the tools that completed chains after it.  Exclusions apply to the
fused order exactly as to the dense one: a withheld or cold tool is never a hit, and
the withheld continuations that ranked above the last hit are listed.  A hit's
``score`` stays its cosine similarity (its best view's); a lookup whose best hit is
below ``abstain_below`` answers ``abstained`` with its hits, as candidates.

The compiled constraints (:class:`~sidecar.constraints.ConstraintMatcher`) are rebuilt
only when the constraints revision moves; the set of cold tools and the hits' fields
are re-read only when the hot-index revision moves.  Both revisions come from one read
of the state, so a lookup follows writes made by any process on the home.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from indexes import ActiveIndex, IndexHit
from sidecar.callmemory import CallMemory
from sidecar.constraints import ConstraintMatcher
from sidecar.errors import InvalidInput
from sidecar.journal import Journal
from sidecar.lifecycle import ENFORCED, Lifecycle
from sidecar.limits import CHECK_MODES, MAX_CONTEXT, MAX_K, MAX_PLAN, MAX_QUERY, CheckMode
from sidecar.memory import Step, Trace
from sidecar.model import (
    ArchivedConstraint,
    CallCheck,
    CheckReason,
    CheckResult,
    LookupHit,
    LookupResult,
    Withheld,
    check_tool_id,
)
from sidecar.neutralize import shown
from sidecar.ranking import DEPTH, fuse, successors
from sidecar.registry import Fields
from sidecar.settings import Settings
from sidecar.state import StateStore


class Lookup:
    def __init__(
        self,
        state: StateStore,
        journal: Journal,
        fields: Fields,
        settings: Settings,
        calls: CallMemory,
        lifecycle: Lifecycle,
    ) -> None:
        self._state = state
        self._journal = journal
        self._fields = fields
        self._settings = settings
        self._calls = calls
        self._lifecycle = lifecycle
        self._lock = threading.Lock()
        self._matcher: ConstraintMatcher | None = None
        self._matcher_rev = -1
        self._cold: frozenset[str] = frozenset()
        self._cold_rev = -1
        self._index_rev = -1
        self._chains: list[tuple[tuple[str, ...], int]] = []
        self._chains_rev = -1

    def matcher(self, rev: int | None = None) -> ConstraintMatcher:
        """The compiled constraints at constraints revision ``rev`` (read now if not
        given)."""
        rev = self._state.revision() if rev is None else rev
        with self._lock:
            if self._matcher is None or rev != self._matcher_rev:
                self._matcher = ConstraintMatcher(
                    self.enforced(),
                    missing_field=self._settings.missing_field,
                    warning_sample=self._settings.max_warnings_per_tool,
                )
                self._matcher_rev = rev
            return self._matcher

    def enforced(self) -> list[ArchivedConstraint]:
        """The sequence constraints in force: active ones, and contested ones (which
        warn only); retired and lifted ones are left out."""
        now = time.time()
        out = []
        for c in self._state.active_constraints():
            status = self._lifecycle.status(
                c.lifted, c.contradictions, c.baseline, c.last_seen, now
            )
            if status in ENFORCED:
                out.append(replace(c, contested=status == "contested"))
        return out

    def follow(self, index: ActiveIndex, tools_rev: int) -> None:
        """Keep ``index``'s in-process copies (the exact tier's vectors) in step: its own
        writes update them as they happen; when another process wrote to the hot index
        since the last lookup, they are dropped and read again."""
        with self._lock:
            if tools_rev != self._index_rev:
                if self._state.written_elsewhere(self._index_rev, tools_rev):
                    index.invalidate()
                self._index_rev = tools_rev

    def cold_tools(self, tools_rev: int) -> frozenset[str]:
        """Tools the state says are not hot: evicted, or with their move begun."""
        with self._lock:
            if tools_rev != self._cold_rev:
                self._cold = frozenset(self._journal.evicted()) | self._journal.in_flight_tools()
                self._cold_rev = tools_rev
            return self._cold

    def withheld_at_start(self) -> frozenset[str]:
        """Tools a lookup with no executed prefix and no context withholds (a fatal
        sequence of one step)."""
        blocked, _ = self.matcher().next_steps((), {})
        return frozenset(blocked)

    def completed_chains(self) -> list[tuple[tuple[str, ...], int]]:
        """Completed chains and their runs, read again when a completed run was counted."""
        rev = self._state.usage_revision()
        with self._lock:
            if rev != self._chains_rev:
                self._chains = self._state.completed_topologies()
                self._chains_rev = rev
            return self._chains

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
    ) -> LookupResult:
        """The lookup.  ``vector`` holds the query's vector, or one row per view;
        ``text`` is the query itself (for BM25; ``None``: the dense ranking alone)."""
        constraints_rev, tools_rev = self._state.revisions()
        matcher = self.matcher(constraints_rev)
        blocked, conditional = matcher.next_steps(executed, context)
        self.follow(index, tools_rev)
        exclude: Collection[str] = blocked.keys() | self.cold_tools(tools_rev)
        fields = self._fields.at(tools_rev)
        excluded = _Excluded(exclude, fields)
        if self._settings.hybrid:
            ranked, displaced = self._fused(index, vector, k, executed, excluded, text)
        else:
            ranked, displaced = index.search_ranked(vector, k, excluded, ids_only=True)
        withheld = [
            Withheld(h.id, shown(c.rule), c.pointer, c.chain_id, why)
            for h in displaced
            if h.id in blocked
            for c, why in blocked[h.id]
        ]
        limit = self._settings.max_warnings_per_tool
        trace = Trace(steps, task_input) if steps else None
        hits = [
            LookupHit(
                tool_id=h.id,
                score=h.score,
                description=str(fields[h.id].get("description") or ""),
                warnings=tuple(
                    (
                        self._call_hints(trace, h.id, task_input)
                        + conditional.get(h.id, [])
                        + matcher.warnings(executed, h.id, limit)
                    )[:limit]
                ),
                tool_type=str(fields[h.id].get("tool_type") or "unspecified"),
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
    ) -> tuple[list[IndexHit], list[IndexHit]]:
        """The ``k`` best hits of the fused ranking that are not ``excluded``, and the
        excluded ones ranked above the last of them (what the exclusion displaced).

        Each ranking is read ``DEPTH`` beyond ``k`` non-excluded tools, excluded ones
        kept in place, so that an exclusion never moves another tool's rank."""
        depth = k + DEPTH
        hits, displaced = index.search_ranked(vector, depth, excluded, ids_only=True)
        dense = sorted(hits + displaced, key=lambda h: -h.score)
        scores = {h.id: h.score for h in dense}
        rankings: list[tuple[Sequence[str], float]] = [([h.id for h in dense], 1.0)]
        if text is not None:
            lexical = index.lexical_ranked(text, depth + len(excluded))
            rankings.append(([rid for rid, _ in lexical], 1.0))
        weight = self._settings.chain_weight
        # beside the dense ranking alone (a lookup by vector) the chains outweigh it on
        # catalogs whose chains rarely repeat: see sidecar.ranking
        if executed and weight > 0 and text is not None:
            rankings.append((successors(self.completed_chains(), executed), weight))
        order = fuse(rankings, scores)
        chosen: list[str] = []
        pushed: list[str] = []
        for rid in order:
            if len(chosen) == k:
                break
            (pushed if rid in excluded else chosen).append(rid)
        missing = [rid for rid in chosen + pushed if rid not in scores]
        if missing:
            scores |= index.similarities(vector, missing)
        # a tool with no vector (it left the index between the rankings, or only the
        # completed chains name it) is neither served nor reported as withheld
        chosen = [rid for rid in chosen if rid in scores]
        pushed = [rid for rid in pushed if rid in scores]
        return (
            [IndexHit(rid, scores[rid], "", {}) for rid in chosen],
            [IndexHit(rid, scores.get(rid, 0.0), "", {}) for rid in pushed],
        )

    def _call_hints(self, trace: Trace | None, tool: str, task_input: str | None) -> list[str]:
        if trace is None:
            return []
        return [
            f"may fail: {shown(r.explanation)}; {r.observed}"
            for r in self._calls.may_apply(trace, tool, task_input)
        ]

    def check(self, plan: tuple[str, ...], mode: CheckMode, context: dict[str, Any]) -> CheckResult:
        return self.matcher().check(plan, context, mode)

    def check_call(
        self,
        steps: Sequence[Step],
        tool: str,
        arguments: Mapping[str, Any],
        task_input: str | None,
        context: dict[str, Any],
    ) -> CallCheck:
        """Before ``tool(arguments)`` after ``steps``: the learned conditions of the call
        (:mod:`sidecar.callmemory`) and the fatal sequences it would complete."""
        reasons: list[CheckReason] = []
        states = self._calls.states()
        verdict = self._calls.assess(steps, tool, arguments, task_input)
        for r in verdict.reasons:
            st = states.get(r.condition_id)
            reasons.append(
                CheckReason(
                    r.level,
                    r.condition_id,
                    "call",
                    shown(r.explanation),
                    r.observed,
                    st.pointer if st else None,
                    st.status if st else "active",
                )
            )
        blocked, conditional = self.matcher().next_steps(tuple(s.tool for s in steps), context)
        for c, why in blocked.get(tool, []):
            reasons.append(
                CheckReason(
                    "block",
                    c.chain_id,
                    "sequence",
                    f"{shown(c.rule)} (completes fatal sequence {'>'.join(c.sequence)})",
                    why,
                    c.pointer,
                )
            )
        reasons += [
            CheckReason("warn", "", "sequence", text, "", None, "contested")
            for text in conditional.get(tool, [])
            if "contested" in text
        ]
        reasons.sort(key=lambda r: r.level != "block")
        if not reasons:
            return CallCheck("allow")
        return CallCheck("block" if reasons[0].level == "block" else "warn", tuple(reasons))


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


# ---- argument checks, shared by every surface -------------------------------------------
def query_text(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("query must be a non-empty string")
    if len(query) > MAX_QUERY:
        raise InvalidInput(f"query is longer than {MAX_QUERY} characters")
    return query


def k_value(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an integer from 1 to {MAX_K}")
    return k


def check_mode(mode: object) -> CheckMode:
    if mode not in CHECK_MODES:
        raise InvalidInput(f"mode must be 'sequence' or 'prefix', got {mode!r}")
    return mode  # type: ignore[return-value]


def tool_list(tools: object, where: str) -> tuple[str, ...]:
    if isinstance(tools, str) or not isinstance(tools, Sequence):
        raise InvalidInput(f"{where} must be a list of tool ids")
    if len(tools) > MAX_PLAN:
        raise InvalidInput(f"{where} has {len(tools)} tools; at most {MAX_PLAN}")
    return tuple(check_tool_id(t, f"{where}[{i}]") for i, t in enumerate(tools))


def context_values(context: object) -> dict[str, Any]:
    """A lookup or check context: field -> scalar.  A number that is not finite (NaN,
    infinity) is refused: no condition could be evaluated against it."""
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise InvalidInput("context must be an object of field -> value")
    if len(context) > MAX_CONTEXT:
        raise InvalidInput(f"context has {len(context)} fields; at most {MAX_CONTEXT}")
    for key, value in context.items():
        if not isinstance(key, str) or not key:
            raise InvalidInput("context keys must be non-empty strings")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InvalidInput(f"context[{key!r}] must be a string, number, boolean or null")
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInput(f"context[{key!r}] must be a finite number, got {value!r}")
    return dict(context)
