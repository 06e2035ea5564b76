"""An in-memory :class:`~sidecar.agents.gateway.guard.backend.GatewayBackend`: small, deterministic,
and honest about what it knows.  For tests, demonstrations and benchmarks of the gateway
and the OTLP intake; the sidecar library is the real one.

What it learns.  The *facts* before a call are the top-level scalar fields of every
earlier step's output (``get_order.status = pending``) and the call's own arguments
(``arg.order_id = #W1``).  Each reported session in which a tool failed with an error is
one *sighting* of ``(tool, error)``, with the facts that held before the failing call.
The *condition* of a failure is what all of its sightings share.  A proposed call whose
facts include the condition is:

- blocked once ``block_after`` distinct sessions have sighted the failure and no
  reported success of the tool happened under the same condition;
- warned about when fewer sightings, or a success, stand behind it.

A condition must be non-empty: a tool that failed under no shared fact is never blocked.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.agents.gateway.guard.backend import (
    Decision,
    GuardReason,
    GuardVerdict,
    Hit,
    Outcome,
    Step,
    SyncedTools,
)

Fact = tuple[str, str, str]
_WORD = re.compile(r"[a-z0-9]+")


def facts_before(steps: Sequence[Step], arguments: Mapping[str, Any]) -> frozenset[Fact]:
    """What held before a call: earlier outputs' top-level scalars, the call's arguments."""
    out: set[Fact] = set()
    for step in steps:
        out.update(_output_facts(step))
    return frozenset(out | _argument_facts(arguments))


def _output_facts(step: Step) -> set[Fact]:
    if not isinstance(step.output, Mapping):
        return set()
    return {(step.tool, str(k), _scalar(v)) for k, v in step.output.items() if _is_scalar(v)}


def _argument_facts(arguments: Mapping[str, Any]) -> set[Fact]:
    return {("arg", str(k), _scalar(v)) for k, v in arguments.items() if _is_scalar(v)}


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) and len(str(value)) <= 200


def _scalar(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class _Failure:
    tool: str
    error: str
    sightings: dict[str, frozenset[Fact]] = field(default_factory=dict)  # session -> facts

    def condition(self) -> frozenset[Fact]:
        sets = list(self.sightings.values())
        return frozenset.intersection(*sets) if sets else frozenset()


@dataclass(frozen=True)
class Report:
    session_id: str
    steps: tuple[Step, ...]
    outcome: Outcome
    task_input: str | None


class StandaloneBackend:
    checks_in_memory = True
    """Its checks are a few dictionary reads: the gateway asks them on its event loop
    (:func:`sidecar.agents.gateway.guard.backend.checks_in_memory`)."""

    def __init__(self, block_after: int = 2) -> None:
        if block_after < 1:
            raise ValueError("block_after must be at least 1")
        self.block_after = block_after
        self.tools: dict[str, dict[str, Any]] = {}
        self.sources: dict[str, set[str]] = {}
        self.gone: set[str] = set()
        self.hidden: set[str] = set()
        self.reports: list[Report] = []
        self._reported: dict[str, tuple[int, int]] = {}
        """Per session: where its report is in :attr:`reports`, and how many of its steps
        were taken in."""
        self.syncs: list[tuple[str, SyncedTools]] = []
        self.checks = 0
        self._failures: dict[tuple[str, str], _Failure] = {}
        self._by_tool: dict[str, list[_Failure]] = {}
        self._successes: dict[str, list[frozenset[Fact]]] = {}
        self._lock = threading.Lock()

    # ---- the protocol --------------------------------------------------------------
    def sync_tools(self, source: str, tools: list[dict[str, Any]]) -> SyncedTools:
        with self._lock:
            before = self.sources.get(source, set())
            now = {str(t["name"]) for t in tools}
            added = sorted(now - before)
            updated = sorted(
                str(t["name"]) for t in tools if t["name"] in before and self.tools[t["name"]] != t
            )
            gone = sorted(before - now)
            for t in tools:
                self.tools[str(t["name"])] = dict(t)
            self.gone |= set(gone)
            self.gone -= now
            self.sources[source] = now
            result = SyncedTools(tuple(added), tuple(updated), tuple(gone))
            self.syncs.append((source, result))
            return result

    def hidden_tools(self) -> set[str]:
        with self._lock:
            return set(self.hidden)

    def search(self, query: str, k: int, steps: list[Step], viewer: str | None = None) -> list[Hit]:
        words = set(_WORD.findall(query.lower()))
        with self._lock:
            scored = []
            for name, tool in self.tools.items():
                if name in self.hidden or name in self.gone:
                    continue
                text = f"{name.replace('_', ' ')} {tool.get('description', '')}".lower()
                vocab = _WORD.findall(text)
                overlap = len(words & set(vocab))
                if overlap:
                    scored.append((overlap / math.sqrt(len(vocab) or 1), name))
            scored.sort(key=lambda p: (-p[0], p[1]))
            return [
                Hit(
                    name,
                    round(score, 4),
                    str(self.tools[name].get("description", "")),
                    tuple(self._warnings(name)),
                )
                for score, name in scored[:k]
            ]

    def check_call(
        self, steps: list[Step], tool: str, arguments: dict[str, Any], viewer: str | None = None
    ) -> GuardVerdict:
        with self._lock:
            self.checks += 1
            failures = self._by_tool.get(tool)
            if not failures:
                return GuardVerdict.allow()  # nothing known against this tool: no facts needed
            current = facts_before(steps, arguments)
            reasons: list[tuple[bool, GuardReason]] = []
            for failure in failures:
                condition = failure.condition()
                if not condition or not condition <= current:
                    continue
                contested = any(condition <= s for s in self._successes.get(tool, []))
                seen = len(failure.sightings)
                blocks = seen >= self.block_after and not contested
                reasons.append((blocks, self._reason(failure, condition, seen, contested)))
        if not reasons:
            return GuardVerdict.allow()
        decision: Decision = "block" if any(b for b, _ in reasons) else "warn"
        ordered = [r for b, r in reasons if b] + [r for b, r in reasons if not b]
        return GuardVerdict(decision, tuple(ordered))

    def check_views(
        self,
        views: Sequence[tuple[list[Step], str]],
        arguments: dict[str, Any],
        viewer: str | None = None,
    ) -> GuardVerdict:
        """Each view checked, every reason once, the strictest first: any block blocks."""
        found = [self.check_call(steps, tool, arguments, viewer) for steps, tool in views]
        reasons: dict[tuple[str, str], tuple[bool, GuardReason]] = {}
        for verdict in sorted(found, key=lambda v: v.decision != "block"):
            for r in verdict.reasons:
                reasons.setdefault((r.rule, r.evidence), (verdict.decision == "block", r))
        if not reasons:
            return GuardVerdict.allow()
        decision: Decision = "block" if any(b for b, _ in reasons.values()) else "warn"
        return GuardVerdict(decision, tuple(r for _, r in reasons.values()))

    def report_session(
        self,
        session_id: str,
        steps: list[Step],
        outcome: Outcome,
        task_input: str | None,
        source: str = "",
        context_known: bool = True,
    ) -> None:
        with self._lock:
            # a session sent again longer (a call of it failed before it ended) replaces
            # its report, and only its new steps are evidence
            report = Report(session_id, tuple(steps), outcome, task_input)
            found = self._reported.get(session_id)
            if found is None:
                self._reported[session_id] = (len(self.reports), len(steps))
                self.reports.append(report)
                start = 0
            else:
                at, start = found
                self.reports[at] = report
                self._reported[session_id] = (at, max(start, len(steps)))
            before: set[Fact] = set()
            for position, step in enumerate(steps):
                facts = frozenset(before | _argument_facts(step.arguments))
                before |= _output_facts(step)
                if position < start:
                    continue
                if step.error is None:
                    self._successes.setdefault(step.tool, []).append(facts)
                    continue
                key = (step.tool, step.error)
                failure = self._failures.get(key)
                if failure is None:
                    failure = self._failures[key] = _Failure(step.tool, step.error)
                    self._by_tool.setdefault(step.tool, []).append(failure)
                failure.sightings.setdefault(session_id, facts)

    # ---- operator side -------------------------------------------------------------
    def hide(self, *tools: str) -> None:
        with self._lock:
            self.hidden.update(tools)

    # ---- internals -----------------------------------------------------------------
    def _reason(
        self, failure: _Failure, condition: frozenset[Fact], seen: int, contested: bool
    ) -> GuardReason:
        when = _describe(condition)
        note = "; a success under the same condition contests it" if contested else ""
        return GuardReason(
            rule=f"{failure.tool} fails when {when}",
            explanation=f"Seen in {seen} reported session(s){note}.",
            evidence=failure.error,
            pointer=f"memory://failures/{failure.tool}/{_short_hash(failure.error)}",
            rule_id=f"{failure.tool}/{_short_hash(failure.error)}",
        )

    def _warnings(self, tool: str) -> Iterable[str]:
        for (name, _error), failure in self._failures.items():
            condition = failure.condition()
            if name == tool and condition:
                yield f"failed in {len(failure.sightings)} session(s) when {_describe(condition)}"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _describe(condition: frozenset[Fact]) -> str:
    return " and ".join(f"{t}.{k} = {v}" for t, k, v in sorted(condition))
