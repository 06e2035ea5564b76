"""Property: adding a successful run to the evidence never turns an allow into a block
(nor makes any call's verdict more severe), for any call, under the default thresholds
and under the most eager ones."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.memory import FailureMemory, Session, Step, Thresholds, assess

IDS = ("#A1001", "#A1002", "#B77", "X_1", "1000000001", "1000000002")
STATES = ("open", "closed", "held")
ERRORS = (
    "Error: Item not found",
    "Error: Closed item cannot be changed",
    "Error: The counts should match",
    "HTTP 503 Service Unavailable",
    "it went sideways",
)
SEVERITY = {"allow": 0, "warn": 1, "block": 2}
EAGER = Thresholds(
    min_support_block=1,
    max_contradictions_block=3,
    min_confidence_block=0.0,
    min_confidence_warn=0.0,
)

ids = st.sampled_from(IDS)


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(("get", "change", "swap")))
    if tool == "get":
        return tool, {"item_id": draw(ids)}
    if tool == "change":
        return tool, {"item_id": draw(ids), "qty": draw(st.integers(0, 5))}
    return tool, {
        "item_ids": draw(st.lists(ids, max_size=3)),
        "new_ids": draw(st.lists(ids, max_size=3)),
    }


@st.composite
def outputs(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(("none", "text", "object")))
    if kind == "none":
        return None
    if kind == "text":
        return f"done with {draw(ids)}"
    obj = {
        "item_id": draw(ids),
        "state": draw(st.sampled_from(STATES)),
        "count": draw(st.integers(0, 4)),
        "parts": [{"part_id": p} for p in draw(st.lists(ids, max_size=2))],
    }
    return json.dumps(obj)


@st.composite
def steps(draw: st.DrawFn, succeed: bool = False) -> Step:
    tool, arguments = draw(calls())
    error = None if succeed else draw(st.one_of(st.none(), st.none(), st.sampled_from(ERRORS)))
    return Step(tool, arguments, None if error else draw(outputs()), error)


@st.composite
def sessions(draw: st.DrawFn, succeed: bool = False) -> Session:
    n = draw(st.integers(0, 10_000))
    body = draw(st.lists(steps(succeed=succeed), min_size=1, max_size=6))
    return Session(f"s{n}", tuple(body), "completed" if succeed else "unknown")


@st.composite
def probes(draw: st.DrawFn) -> tuple[list[Step], str, dict[str, Any]]:
    before = draw(st.lists(steps(), max_size=4))
    tool, arguments = draw(calls())
    return before, tool, arguments


Probe = tuple[list[Step], str, dict[str, Any]]


def severity(memory: FailureMemory, probe: Probe, t: Thresholds) -> int:
    before, tool, arguments = probe
    return SEVERITY[assess(memory.conditions(tool), before, tool, arguments, None, t).decision]


def holding(memory: FailureMemory, probe: Probe, t: Thresholds) -> dict[str, int]:
    """Condition id -> severity of its level, for the conditions that hold."""
    before, tool, arguments = probe
    verdict = assess(memory.conditions(tool), before, tool, arguments, None, t)
    out: dict[str, int] = {}
    for reason in verdict.reasons:
        out[reason.condition_id] = max(out.get(reason.condition_id, 0), SEVERITY[reason.level])
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.slow
@given(
    evidence=st.lists(sessions(), min_size=1, max_size=8),
    success=sessions(succeed=True),
    probe_list=st.lists(probes(), min_size=1, max_size=6),
)
def test_a_successful_run_never_makes_a_verdict_more_severe(
    evidence: list[Session],
    success: Session,
    probe_list: list[Probe],
) -> None:
    before, after = FailureMemory(), FailureMemory()
    for s in evidence:
        before.add_session(s)
        after.add_session(s)
    after.add_session(success)
    # the evidence's own calls are probes too: the likeliest to be near a condition
    own = [
        (list(s.steps[:i]), st_.tool, dict(st_.arguments))
        for s in evidence
        for i, st_ in enumerate(s.steps)
    ]
    for probe in [*probe_list, *own]:
        for t in (Thresholds(), EAGER):
            assert severity(after, probe, t) <= severity(before, probe, t), probe
            # and condition by condition: nothing holds after that did not hold before
            # at least as severely (a condition keeps its id as its evidence moves)
            was = holding(before, probe, t)
            for condition_id, level in holding(after, probe, t).items():
                assert was.get(condition_id, 0) >= level, (condition_id, probe)
