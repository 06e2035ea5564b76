"""The views a call is checked under (:meth:`~sidecar.agents.gateway.proxy.catalog.Catalog.views`),
kept per session as its steps grow rather than rebuilt on every call.

A call is checked with the session's steps named as now, under every tool's plain name
and under every tool's prefixed name.  Renaming a session's steps costs one new step per
renamed step: rebuilt on every call, a session of 256 steps cost about 0.3 ms a call
before the check itself (BENCHMARKS.md, section 10).  A session only ever gains steps at
its end (a full one goes on under a new id), so the renamed copies are kept and extended
by the steps recorded since the last call; they are rebuilt when the session is another
one under the same key, or when the catalog renamed tools since.
What the memory is asked is the same as :meth:`Catalog.views` answers (a test holds the
two equal).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from sidecar.agents.gateway.guard.backend import Step
from sidecar.agents.gateway.proxy.catalog import Catalog

Stamp = tuple[str, int]
"""A session's id and how many steps it holds
(:meth:`~sidecar.agents.sessions.SessionBook.stamped_steps`)."""


@dataclass
class _Renamed:
    """A session's steps under one naming, and how many of them it renamed."""

    steps: deque[Step] = field(default_factory=deque)
    changed: deque[bool] = field(default_factory=deque)
    renamed: int = 0

    def append(self, step: Step, renamed: Step) -> None:
        moved = renamed is not step
        self.steps.append(renamed)
        self.changed.append(moved)
        self.renamed += moved

    def keep_last(self, n: int) -> None:
        while len(self.steps) > n:
            self.steps.popleft()
            self.renamed -= self.changed.popleft()


@dataclass
class _Kept:
    stamp: Stamp
    generation: int
    plain: _Renamed = field(default_factory=_Renamed)
    prefixed: _Renamed = field(default_factory=_Renamed)


class SessionViews:
    """The renamed views of the most recently checked sessions (at most ``capacity``)."""

    def __init__(self, catalog: Catalog, capacity: int) -> None:
        self._catalog = catalog
        self._capacity = max(capacity, 1)
        self._kept: OrderedDict[str, _Kept] = OrderedDict()

    def views(
        self, key: str, stamp: Stamp, steps: Sequence[Step], exposed: str
    ) -> list[tuple[list[Step], str]]:
        """What :meth:`Catalog.views` returns for ``steps`` (session ``key`` in the state
        ``stamp``) and a call of ``exposed``."""
        now = list(steps)
        route = self._catalog.route(exposed)
        if route is None:
            return [(now, exposed)]
        kept = self._update(key, stamp, now)
        out = [(now, exposed)]
        # a view with no step renamed names its steps as now: the same question as the
        # first when its tool is too (the distinct ones only, as Catalog.views asks)
        seen: set[tuple[str, str]] = {(exposed, "now")}
        for tool, view, label in (
            (route.plain, kept.plain, "plain"),
            (route.prefixed, kept.prefixed, "prefixed"),
        ):
            question = (tool, label if view.renamed else "now")
            if question not in seen:
                seen.add(question)
                out.append((list(view.steps), tool))
        return out

    def forget(self, key: str) -> None:
        self._kept.pop(key, None)

    def _update(self, key: str, stamp: Stamp, now: list[Step]) -> _Kept:
        generation = self._catalog.generation
        kept = self._kept.get(key)
        session, recorded = stamp
        if (
            kept is None
            or kept.generation != generation
            or kept.stamp[0] != session
            or recorded < kept.stamp[1]
        ):
            kept = _Kept(stamp, generation)
            new = now
        else:
            added = recorded - kept.stamp[1]
            new = now[len(now) - added :] if added else []
            if added > len(now):  # more steps recorded than a session keeps: start afresh
                kept = _Kept(stamp, generation)
                new = now
        renamed = self._catalog.renamed
        for step in new:
            kept.plain.append(step, renamed(step, True))
            kept.prefixed.append(step, renamed(step, False))
        kept.plain.keep_last(len(now))
        kept.prefixed.keep_last(len(now))
        kept.stamp = stamp
        self._kept[key] = kept
        self._kept.move_to_end(key)
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)
        return kept
