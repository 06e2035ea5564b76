"""The bfcl corpus builder on the installed ``bfcl-eval`` simulators: the filter that
keeps the reserved classes out, ground truths that succeed, mutations whose errors are
the simulator's own, and the same corpus for the same seed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from decimal import Decimal
from functools import cache
from itertools import pairwise

import pytest

from benchmarks import bfcl
from benchmarks.bfcl_mutations import KINDS, unknown_like
from benchmarks.bfcl_simulators import (
    RESERVED,
    SIMULATORS,
    World,
    allowed,
    data_dir,
    execute,
    jsonable,
    missing,
    outcome,
    read_scenarios,
)
from benchmarks.tau2 import Run

RESERVED_MODULES = ("vehicle_control", "ticket_api", "posting_api", "message_api")


@cache
def built(seed: int = 0) -> tuple[list[bfcl.Built], dict[str, int]]:
    return bfcl.build(seed)


def test_the_package_is_installed() -> None:
    # the Makefile installs it into the test environment: its absence is a failure
    assert missing() == []


def row(classes: list[str], path: list[str] | None = None, config: dict | None = None) -> dict:  # type: ignore[type-arg]
    return {"involved_classes": classes, "path": path or [], "initial_config": config or {}}


def test_filter_keeps_only_scenarios_of_the_four_classes() -> None:
    assert allowed(row(["TradingBot"]))
    assert allowed(row(["GorillaFileSystem", "MathAPI"], ["GorillaFileSystem.cd"]))
    for name in RESERVED:
        assert not allowed(row([name]))
        assert not allowed(row(["TravelAPI", name]))
        # named anywhere in the row, even when the classes field omits it
        assert not allowed(row(["TravelAPI"], [f"{name}.anything"]))
        assert not allowed(row(["TravelAPI"], config={name: {}}))
    assert not allowed(row(["WebSearchAPI"]))
    assert not allowed(row([]))


def test_read_scenarios_drops_every_scenario_touching_a_reserved_class() -> None:
    scenarios, notes = read_scenarios()
    assert notes["scenarios"] == len(scenarios) > 0
    assert notes["scenarios_reserved_dropped"] == notes["scenarios_in_category"] - len(scenarios)
    # what the filter decided, recounted from the question file's class fields
    path = data_dir() / "BFCL_v4_multi_turn_base.json"
    lines = path.read_text().splitlines()
    classes = [set(json.loads(line)["involved_classes"]) for line in lines if line.strip()]
    assert sum(c <= set(SIMULATORS) for c in classes) == len(scenarios)
    for scenario in scenarios:
        assert set(scenario.classes) <= set(SIMULATORS)
        assert not set(scenario.initial_config) & set(RESERVED)
    tools = {step.tool for b in built()[0] for step in b.run.steps}
    assert tools <= {t.tool_id for t in bfcl.load().tools}


def test_building_never_imports_a_reserved_simulator() -> None:
    code = (
        "import sys, json\n"
        "from benchmarks import bfcl\n"
        "bfcl.build(0)\n"
        "print(json.dumps(sorted(m for m in sys.modules if 'func_source_code.' in m)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert any(m.endswith(".trading_bot") for m in loaded)
    assert not [m for m in loaded if m.rsplit(".", 1)[-1] in RESERVED_MODULES]


def test_every_ground_truth_succeeds_on_the_simulator() -> None:
    runs, notes = built()
    truths = [b for b in runs if b.mutation is None]
    assert len(truths) == notes["ground_truth_runs"] == notes["scenarios"]
    assert notes["ground_truth_failing_calls"] == 0
    for b in truths:
        assert b.run.agent == "ground_truth" and b.run.succeeded
        assert [s.tool for s in b.run.steps] == [c.tool for c in b.scenario.calls]
        assert all(s.error is None for s in b.run.steps)
        # the recorded steps are what a fresh simulator answers again
        again, failed = execute(b.scenario, b.scenario.calls, stop_at_error=False)
        assert failed is None and again == list(b.run.steps)


# what each kind's refusals say, in the simulators' own words
EXPECTED = {
    "drop_prerequisite": ("No such file", "Invalid access token", "not authenticated"),
    "missing_state": ("User not authenticated", "Market is closed"),
    "undone_prerequisite": ("No such file", "User not authenticated"),
    "wrong_order": (
        "No such file",
        "not found",
        "Invalid access token",
        "File exists",
        "less than budget limit",
    ),
    "past_limit": ("Insufficient funds", "Exceeded budget limit", "less than budget limit"),
    "unknown_id": ("No such file", "not found", "not registered", "Invalid", "No available"),
    "invalid_value": ("must be", "Cannot", "Invalid", "Unsupported path", "No available"),
}


def mutation_runs() -> dict[str, list[bfcl.Built]]:
    out: dict[str, list[bfcl.Built]] = defaultdict(list)
    for seed in (0, 1, 2):
        for b in built(seed)[0]:
            if b.mutation is not None:
                out[b.mutation.kind].append(b)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_each_mutation_kind_yields_the_simulators_own_error(kind: str) -> None:
    runs = mutation_runs()[kind]
    assert runs, f"no {kind} run in three seeds"
    for b in runs:
        run, mutation = b.run, b.mutation
        assert mutation is not None and run.agent == f"mutation:{kind}" and not run.succeeded
        *before, last = run.steps
        assert all(s.error is None for s in before) and last.error is not None
        said = last.error.lower()
        assert any(w.lower() in said for w in EXPECTED[kind]), (mutation.detail, last.error)
        # replayed on fresh simulators (with the mutation's state), the same calls are
        # refused at the same step with the same text: the error is the simulator's
        world = World(b.scenario, mutation.state)
        replayed = [world.call(c) for c in mutation.calls[: len(run.steps)]]
        assert replayed == list(run.steps)
        # and the run differs from the ground truth, which succeeds
        assert mutation.calls != b.scenario.calls or mutation.state


def test_the_same_tool_fails_in_some_runs_and_succeeds_in_others() -> None:
    outcomes: dict[str, set[bool]] = defaultdict(set)
    for b in built()[0]:
        for step in b.run.steps:
            outcomes[step.tool].add(step.error is None)
    both = sorted(t for t, seen in outcomes.items() if seen == {True, False})
    assert {"place_order", "book_flight", "cd", "purchase_insurance"} <= set(both)


def test_argument_mutations_change_a_call_the_ground_truth_made_successfully() -> None:
    for kind in ("past_limit", "unknown_id", "invalid_value"):
        for b in mutation_runs()[kind]:
            assert b.mutation is not None
            site = b.mutation.site
            original, changed = b.scenario.calls[site], b.mutation.calls[site]
            assert original.tool == changed.tool and original.arguments != changed.arguments


def test_the_same_seed_builds_the_same_corpus_and_another_seed_another() -> None:
    first, notes = bfcl.build(0)
    again, notes_again = bfcl.build(0)
    assert [b.run for b in first] == [b.run for b in again] and notes == notes_again
    other = [b.run for b in built(1)[0]]
    assert [r.run_id for r in other if r.agent == "ground_truth"] == [
        b.run.run_id for b in first if b.mutation is None
    ]
    assert [r.steps for r in other] != [b.run.steps for b in first]


def test_load_gives_runs_of_the_tau2_types() -> None:
    corpus = bfcl.load()
    assert corpus.notes["runs"] == len(corpus.runs)
    assert corpus.notes["mutation_runs"] == sum(corpus.notes[f"mutation:{k}"] for k in KINDS)
    for run in corpus.runs:
        assert isinstance(run, Run) and run.domain == "bfcl" and run.task.startswith("bfcl/")
        assert len(run.told_before) == len(run.steps)
        # what the user said grows turn by turn
        assert all(b.startswith(a) for a, b in pairwise(run.told_before))
        session = run.session()
        assert session.outcome == ("completed" if run.succeeded else "abandoned")
    names = {t.tool_id for t in corpus.tools}
    assert {"place_order", "book_flight", "cd", "mean"} <= names


def test_outcome_reads_the_simulators_refusals() -> None:
    assert outcome({"error": "Booking not found"}) == (None, "Booking not found")
    refused = {"booking_status": False, "error": "Insufficient funds"}
    assert outcome(refused) == (None, "Insufficient funds")
    assert outcome([{"error": "User not authenticated."}]) == (None, "User not authenticated.")
    assert outcome(["Error: User not authenticated."]) == (None, "Error: User not authenticated.")
    assert outcome({"verification_status": False, "verification_failure": "x"})[1] is None
    assert outcome(["AAPL"]) == (["AAPL"], None)
    assert outcome(None) == (None, None)
    assert jsonable({12345: Decimal("1.5"), "a": (1, float("inf"))}) == {
        "12345": 1.5,
        "a": [1, "inf"],
    }


def test_unknown_values_keep_the_shape() -> None:
    import random

    rng = random.Random(3)
    assert len(str(unknown_like(12446, rng))) == 5
    symbol = unknown_like("AAPL", rng)
    assert len(symbol) == 4 and symbol.isupper()
    token = unknown_like("abc123xyz", rng)
    assert token[:3] == "abc" and token[-3:] == "xyz" and token[3:6].isdigit()
    name = unknown_like("report.txt", rng)
    assert name.startswith("report_") and name.endswith(".txt")
