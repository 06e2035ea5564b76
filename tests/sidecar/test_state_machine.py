"""A Hypothesis state machine against a plain model of which tool is where.

Rules add tools, report chains, evict (sometimes crashing at a named step, then
restarting the sidecar, which recovers), restore, and search.  After every step the
hot index and the evicted set match the model, and no lookup returns an evicted tool.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from indexes import HashingEmbedder
from sidecar import InvalidInput, Sidecar, Tool
from sidecar.faults import CRASH_POINTS
from tests.sidecar.helpers import abandoned, completed

POOL = ["alpha", "beta", "gamma", "delta", "eps", "pinned"]
tools = st.sampled_from(POOL)
chains = st.lists(tools, min_size=2, max_size=3, unique=True)


class Crash(BaseException):
    """Stands for SIGKILL: escapes every handler, leaves the journal as it was."""


class EvictionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="sidecar-sm-"))
        self.embedder = HashingEmbedder()
        self.sc = Sidecar.open(embedder=self.embedder, home=self.dir)
        self.where: dict[str, str] = {}  # tool -> "hot" | "cold"
        self.completed: set[str] = set()
        self.chains: list[tuple[list[str], int]] = []  # (topology, step archived)
        self.restored: dict[str, int] = {}  # tool -> step restored
        self.step = 0

    def teardown(self) -> None:
        self.sc.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _tick(self) -> int:
        self.step += 1
        return self.step

    def restart(self) -> None:
        self.sc.close()
        self.sc = Sidecar.open(embedder=self.embedder, home=self.dir)

    def expected_evictions(self) -> set[str]:
        out = set()
        for tool in {t for topo, _ in self.chains for t in topo[:-1]}:
            if self.where.get(tool) != "hot" or tool == "pinned" or tool in self.completed:
                continue
            # the default policy: two distinct abandoned chains before an eviction, and
            # after an operator's restore only the chains archived since count
            since = self.restored.get(tool, -1)
            if sum(s > since for topo, s in self.chains if tool in topo[:-1]) >= 2:
                out.add(tool)
        return out

    @rule(tool=tools)
    def add_tool(self, tool: str) -> None:
        definition = Tool(tool, f"{tool} does {tool} things", pinned=tool == "pinned")
        if self.where.get(tool) == "cold":
            try:
                self.sc.add_tools([definition])
            except InvalidInput:
                return
            raise AssertionError("an evicted tool was re-added")
        self.sc.add_tools([definition])
        self.where[tool] = "hot"

    @rule(topology=chains)
    def report_abandoned(self, topology: list[str]) -> None:
        result = self.sc.report(abandoned(topology, "HTTP 400 " + ">".join(topology)))
        assert result.status == "archived"
        if not any(t == topology for t, _ in self.chains):
            self.chains.append((topology, self._tick()))

    @rule(topology=chains)
    def report_completed(self, topology: list[str]) -> None:
        assert self.sc.report(completed(topology)).status == "recorded"
        self.completed.update(topology)

    @rule()
    def evict(self) -> None:
        expected = self.expected_evictions()
        report = self.sc.evict()
        assert {d.tool_id for d in report.evicted} == expected
        for tool in expected:
            self.where[tool] = "cold"
        self._tick()

    @rule(point=st.sampled_from(CRASH_POINTS))
    def evict_crash_restart(self, point: str) -> None:
        expected = self.expected_evictions()

        def crash(at: str) -> None:
            if at == point:
                raise Crash(at)

        self.sc.eviction._crash_hook = crash
        try:
            self.sc.evict()
        except Crash:
            pass
        else:
            assert not expected  # nothing to move, so no step was reached
        self.restart()  # recovery happens on open
        for tool in expected:
            self.where[tool] = "cold"
        self._tick()

    @rule(tool=tools)
    def restore(self, tool: str) -> None:
        if self.where.get(tool) != "cold":
            return
        self.sc.restore(tool, "fixed")
        self.where[tool] = "hot"
        self.restored[tool] = self._tick()

    @rule(query=tools, after=st.lists(tools, max_size=2))
    def search(self, query: str, after: list[str]) -> None:
        result = self.sc.search(query, k=len(POOL), after=after)
        returned = {h.tool_id for h in result.hits}
        assert not returned & {t for t, w in self.where.items() if w == "cold"}
        withheld = {w.tool_id for w in result.withheld}
        assert returned.isdisjoint(withheld)
        assert returned | withheld == {t for t, w in self.where.items() if w == "hot"}

    @invariant()
    def stores_match_the_model(self) -> None:
        hot = {r.id for r in self.sc.index.scan()}
        cold = set(self.sc.journal.evicted())
        assert hot == {t for t, w in self.where.items() if w == "hot"}
        assert cold == {t for t, w in self.where.items() if w == "cold"}
        assert self.sc.journal.unfinished() == []


TestEvictionMachine = pytest.mark.slow(EvictionMachine.TestCase)
TestEvictionMachine.settings = settings(max_examples=50, stateful_step_count=25, deadline=None)
