"""One open trace, and the tool calls it holds once it closes.

A trace keeps, per span, the little the assembler needs (:class:`~sidecar.agents.otlp.
prepare.Node`).  When it closes, its spans are laid out as a tree (children usually
arrive before their parents, and a span may name a parent that never comes).  A tool
span nested in another tool span of the same tool (an agent's tool span around an MCP
client span around the MCP server's span) is one call, merged into the outermost; so
are spans sharing a ``gen_ai.tool.call.id``.  Each call's session hint is the nearest
one up its ancestry.  Pure functions over a trace: no lock, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.agents.otlp.prepare import Node
from sidecar.memory import Step


@dataclass
class SpanTree:
    serial: int
    source: str = ""
    nodes: dict[str, Node] = field(default_factory=dict)
    last_seen: float = 0.0
    root_at: float | None = None
    size: int = 0


@dataclass(frozen=True)
class TracedCall:
    start_ns: int
    node_id: str
    """The outermost span of the call (its session hint is looked up from there)."""
    step: Step
    merged: int
    """Spans merged into it beyond the first."""


def calls_of(trace: SpanTree) -> list[TracedCall]:
    """One entry per call, in start order: nested same-tool spans and shared call ids
    merged."""
    tops = _outermost_same_tool(trace)
    groups: dict[str, list[str]] = {}
    by_call_id: dict[str, str] = {}
    for node_id, node in trace.nodes.items():
        if node.step is None:
            continue
        top = tops[node_id]
        if node.call_id:
            top = by_call_id.setdefault(node.call_id, top)
        groups.setdefault(top, []).append(node_id)
    out: list[TracedCall] = []
    for top, members in groups.items():
        ordered = [top, *(m for m in members if m != top)]
        steps = [s for m in ordered if (s := trace.nodes[m].step) is not None]
        start = min(trace.nodes[m].start_ns for m in members)
        out.append(TracedCall(start, top, _merge(steps), len(members) - 1))
    return sorted(out, key=lambda c: (c.start_ns, c.node_id))


def hints_of(trace: SpanTree) -> dict[str, str | None]:
    """For each node, the nearest session hint up its ancestry (itself first)."""
    found: dict[str, str | None] = {}
    for node_id, parent in _walk(trace):
        hint = trace.nodes[node_id].hint
        found[node_id] = hint if hint else (found.get(parent) if parent is not None else None)
    return found


def _tree(trace: SpanTree) -> tuple[list[str], dict[str, list[str]]]:
    """The trace's nodes in an order where every parent comes before its children (a
    node whose parent is absent, or in a cycle, starts a tree of its own), and each
    node's children."""
    children: dict[str, list[str]] = {}
    roots: list[str] = []
    for node_id, node in trace.nodes.items():
        if node.parent is not None and node.parent in trace.nodes and node.parent != node_id:
            children.setdefault(node.parent, []).append(node_id)
        else:
            roots.append(node_id)
    order: list[str] = []
    seen: set[str] = set()
    for start in [*roots, *trace.nodes]:  # then whatever a cycle kept from every root
        if start in seen:
            continue
        stack = [start]
        while stack:
            node_id = stack.pop()
            if node_id in seen:
                continue
            seen.add(node_id)
            order.append(node_id)
            stack.extend(children.get(node_id, ()))
    return order, children


def _walk(trace: SpanTree) -> list[tuple[str, str | None]]:
    """(node, the node it descends from in the walk), parents before children."""
    order, children = _tree(trace)
    parent_in_walk: dict[str, str | None] = dict.fromkeys(order)
    placed: set[str] = set()
    for node_id in order:
        placed.add(node_id)
        for child in children.get(node_id, ()):
            if child not in placed:
                parent_in_walk[child] = node_id
    return [(n, parent_in_walk[n]) for n in order]


def _outermost_same_tool(trace: SpanTree) -> dict[str, str]:
    """For each tool span, its outermost ancestor calling the same tool (itself when
    none does), in one pass over the trace."""
    # per node, the outermost node of each tool on its path from the top
    outermost: dict[str, dict[str, str]] = {}
    tops: dict[str, str] = {}
    for node_id, parent in _walk(trace):
        above = outermost.get(parent, {}) if parent is not None else {}
        step = trace.nodes[node_id].step
        if step is not None and step.tool not in above:
            above = {**above, step.tool: node_id}
        outermost[node_id] = above
        if step is not None:
            tops[node_id] = above[step.tool]
    return tops


def _merge(steps: list[Step]) -> Step:
    """The outermost call, with what it lacks taken from the inner ones; failed if any
    of them failed."""
    top = steps[0]
    arguments = next((s.arguments for s in steps if s.arguments), {})
    error = next((s.error for s in steps if s.error is not None), None)
    output = (
        None if error is not None else next((s.output for s in steps if s.output is not None), None)
    )
    return Step(top.tool, arguments, output, error)
