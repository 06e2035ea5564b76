"""``bench_failures``'s own logic on synthetic runs (the τ² data lives outside the
repository): the loader, the split by task, the replay of every system and the
figures."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.bench_failures import Call, hint_figures, metrics, replay
from benchmarks.failure_domains import folds_of
from benchmarks.failure_metrics import (
    GOALS,
    assess_targets,
    family_figures,
    headline,
    met,
    warned_by_rule,
)
from benchmarks.failure_systems import Check, decide
from benchmarks.tau2 import FLAT, Corpus, Run, load, missing_files
from sidecar.memory import FailureCondition, Predicate, Step, Thresholds

MISSING = "Error: Account not found"


def run(n: int, task: str, email: str, fails: bool) -> Run:
    found = Step("find_account", {"email": email}, f"acct_{n}")
    if fails:
        found = Step("find_account", {"email": email}, None, MISSING)
    steps = (Step("open_ticket", {"ticket_id": f"T_{n}"}, "opened"), found)
    return Run(f"r{n}", "shop", task, "agent", 0.0 if fails else 1.0, steps, ("", ""))


def corpus() -> Corpus:
    """Eight tasks: two where the user gives a stale email that is not found (so a held-out
    run of one repeats the other's failure), six that succeed."""
    runs = [run(0, "shop/a", "old9@x.com", True), run(1, "shop/b", "old9@x.com", True)]
    runs += [run(2 + i, f"shop/ok{i}", f"u{i}@x.com", False) for i in range(6)]
    return Corpus(runs)


def test_folds_keep_a_task_together_and_cover_every_run_once() -> None:
    runs = [run(i, f"shop/{i % 5}", "a@x.com", False) for i in range(20)]
    folds = folds_of(runs, 3, seed=1)
    assert sorted(i for fold in folds for i in fold) == list(range(20))
    for fold in folds:
        tasks = {runs[i].task for i in fold}
        others = {runs[i].task for f in folds if f is not fold for i in f}
        assert not tasks & others
    assert folds_of(runs, 3, seed=1) == folds


def test_replay_catches_a_remembered_failure_only_with_the_call_memory() -> None:
    # one task per fold: each stale-email run is held out with the other one learned
    result = replay(corpus(), seeds=[3], k=8)
    figures = {name: metrics(calls, [(c.check.decision, c.check.constraints) for c in calls])
               for name, calls in result.calls.items()}  # fmt: skip
    assert set(figures) == {
        "plain_index",
        "seed_prefix",
        "sequence_memory",
        "call_memory",
        "sidecar",
    }
    mine, plain = figures["call_memory"], figures["plain_index"]
    # the same memory through the public library answers the same
    assert figures["sidecar"] == mine
    assert mine["repeats"] == plain["repeats"] == 2
    assert plain["repeats_caught"] == 0
    # one failing session learned: a warning, not yet a block
    assert (mine["repeats_caught"], mine["repeats_blocked"]) == (2, 0)
    assert mine["successful_runs_wrongly_blocked"] == 0
    # a chain of two tools is archived, and its fatal sequence completes again
    assert figures["sequence_memory"]["repeats_blocked"] == 2


def call(**kw: object) -> Call:
    base = {"seed": 1, "fold": 0, "run": 0, "step": 0, "failed": False, "repeat": False,
            "run_succeeded": True, "check": Check("allow")}  # fmt: skip
    return Call(**{**base, **kw})  # type: ignore[arg-type]


def test_metrics() -> None:
    calls = [
        call(run=0, failed=True, repeat=True, run_succeeded=False),  # caught by a block
        call(run=0, step=1, failed=True, repeat=True, run_succeeded=False),  # missed
        call(run=1),  # blocked, did not fail: a successful run wrongly blocked
        call(run=1, step=1),  # warned
        call(run=2),
        call(run=2, step=1, failed=True),  # blocked, failed, in a successful run
    ]
    decisions = [("block", ("c1",)), ("allow", ()), ("block", ("c2",)), ("warn", ("c3",)),
                 ("allow", ()), ("block", ("c1",))]  # fmt: skip
    m = metrics(calls, decisions)
    assert (m["repeats"], m["repeats_caught"], m["repeats_blocked"]) == (2, 1, 1)
    assert (m["blocks"], m["blocks_failed"], m["block_precision"]) == (3, 2, round(2 / 3, 4))
    assert (m["successful_runs"], m["successful_runs_wrongly_blocked"]) == (2, 1)
    assert m["successful_runs_any_block"] == 2
    assert m["warned_share_in_successful_runs"] == 0.25
    assert m["constraints_contradicted_on_held_out"] == 1
    hints = hint_figures(
        [call(repeat=True, failed=True, hinted="block"), call(hinted="warn"), call()]
    )
    assert hints["any"]["repeats_hinted"] == 1
    assert hints["block_level"]["ok_calls_in_successful_runs_hinted_share"] == 0.0
    assert hints["any"]["ok_calls_in_successful_runs_hinted_share"] == 0.5


def test_loader_keeps_agent_calls_and_what_the_agent_was_told(tmp_path: Path) -> None:
    assert missing_files(tmp_path) == [str(FLAT)]
    (tmp_path / FLAT).parent.mkdir(parents=True)
    (tmp_path / FLAT.parent / "trajectories").mkdir()
    line = {
        "domain": "shop", "task_id": "7", "sim_id": "sim-1", "agent_model": "m", "reward": 1.0,
        "calls": [
            {"requestor": "assistant", "name": "find", "args": {"email": "a@x.com"},
             "output": "Error: User not found", "error": True, "msg_idx": 2},
            {"requestor": "user", "name": "toggle", "args": {}, "output": "ok", "error": False,
             "msg_idx": 3},
            {"requestor": "assistant", "name": "find", "args": {"email": "b@x.com"},
             "output": "acct_1", "error": False, "msg_idx": 5},
        ],
    }  # fmt: skip
    (tmp_path / FLAT).write_text(json.dumps(line) + "\n")
    results = {
        "tasks": [{"id": "7", "ticket": ""}],
        "simulations": [{"id": "sim-1", "task_id": "7", "messages": [
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "my email is a@x.com"},
            {"role": "assistant", "content": None},
            {"role": "tool", "content": "Error: User not found"},
            {"role": "user", "content": "sorry, b@x.com"},
        ]}],
    }  # fmt: skip
    (tmp_path / FLAT.parent / "trajectories" / "shop_m.json").write_text(json.dumps(results))
    loaded = load(tmp_path)
    assert assert_one(loaded)
    [only] = loaded.runs
    assert [s.tool for s in only.steps] == ["find", "find"]
    assert only.steps[0].error == "Error: User not found" and only.steps[0].output is None
    assert only.told_before == ("my email is a@x.com", "my email is a@x.com\nsorry, b@x.com")
    assert only.task == "shop/7" and only.succeeded
    assert loaded.notes["user_calls_dropped"] == 1
    session = only.session()
    assert session.outcome == "completed" and session.task_input == only.told_before[-1]


def assert_one(loaded: Corpus) -> bool:
    return len(loaded.runs) == 1 and loaded.notes["runs"] == 1


def test_wrong_blocks_are_listed_by_tool_and_reason() -> None:
    from benchmarks.failure_metrics import wrongly_blocked
    from sidecar.memory import Thresholds

    data = corpus()
    calls = [
        call(run=2, step=1, check=Check("block")),  # did not fail, blocked
        call(run=3, step=1, check=Check("block"), run_succeeded=False),
        call(run=0, step=1, failed=True, check=Check("block")),  # failed: a right block
        call(run=4, step=1, check=Check("warn")),
    ]
    (row,) = wrongly_blocked(data, calls, Thresholds())
    assert (row["domain"], row["tool"]) == ("shop", "find_account")
    assert (row["blocks"], row["in_successful_runs"]) == (2, 1)
    assert row["reason"] == "no learned condition held"


def rule(name: str, family: str, manual: bool = False) -> FailureCondition:
    """A condition that warns under the default thresholds (a learned ``warn_only`` one,
    confident enough), or blocks (``manual``: a hand-written one)."""
    return FailureCondition(
        "find_account", MISSING, Predicate(f"arg:{name}", "==", "x"), family=family,
        confidence=0.8, support=2, warn_only=not manual, source="manual" if manual else "learned",
        chance=0.1,
        explanation=f"{name} is x",
    )  # fmt: skip


def checked(*holding: FailureCondition) -> Check:
    decision, ids = decide(holding, Thresholds())
    return Check(decision, ids, holding)


def test_warning_precision_counts_the_warned_calls_that_failed() -> None:
    calls = [
        call(failed=True, run_succeeded=False),  # warned, failed
        call(step=1),  # warned, did not fail
        call(step=2, failed=True),  # warned, failed in a run that then succeeded
        call(step=3),  # warned, did not fail
        call(step=4, failed=True),  # blocked, failed
        call(step=5, failed=True),  # allowed, failed
    ]
    decisions = [("warn", ("a",)), ("warn", ("a",)), ("warn", ("b",)), ("warn", ("a", "b")),
                 ("block", ("c",)), ("allow", ())]  # fmt: skip
    m = metrics(calls, decisions)
    assert (m["warned_calls"], m["warned_calls_failed"], m["warning_precision"]) == (4, 2, 0.5)
    assert (m["blocks"], m["block_precision"]) == (1, 1.0)
    assert m["warned_calls_in_successful_runs"] == 3
    assert "warning_precision" in headline(m)
    assert metrics([call()], [("allow", ())])["warning_precision"] is None
    # the goals of the issue: warned calls in successful runs <= 3%, precision >= 0.5
    assert GOALS["warned_share_in_successful_runs"][0] == "<= 0.03"
    assert (met("warning_precision", 0.5), met("warning_precision", 0.49)) == (True, False)
    assert GOALS["successful_runs_wrongly_blocked_share"][0] == "<= 0.005"
    assert "warning precision" in [t["target"].split(": ")[1] for t in assess_targets(m)]


def test_warnings_by_rule_and_by_family() -> None:
    shape, prior = rule("email", "value_shape"), rule("ticket_id", "prerequisite")
    blocker = rule("email", "bad_value", manual=True)
    calls = [
        call(check=checked(shape)),  # ok call of a successful run
        call(step=1, check=checked(shape)),
        call(step=2, failed=True, run_succeeded=False, check=checked(shape, prior)),
        call(run=1, step=0, run_succeeded=False, check=checked(prior)),
        call(run=1, step=1, failed=True, run_succeeded=False, check=checked(shape, blocker)),
        call(run=2, step=0, check=checked()),
    ]
    rows = warned_by_rule(calls, Thresholds())
    assert [(r["condition_id"], r["family"]) for r in rows] == [
        (shape.condition_id, "value_shape"),
        (prior.condition_id, "prerequisite"),
    ]
    first, second = rows
    # the call the blocker blocked is no warning: the shape rule warned on three calls
    assert (first["warned_calls"], first["failed"], first["in_successful_runs"]) == (3, 1, 2)
    assert first["warning_precision"] == round(1 / 3, 4)
    assert (second["warned_calls"], second["failed"], second["in_successful_runs"]) == (2, 1, 0)
    assert first["tool"] == "find_account"
    assert first["reason"] == "warn [value_shape]: email is x"
    assert warned_by_rule(calls, Thresholds(), top=1) == [first]
    families = family_figures(calls, Thresholds())
    shapes = families["value_shape"]
    assert (shapes["warned_calls"], shapes["warned_calls_failed"]) == (3, 1)
    assert shapes["warned_calls_in_successful_runs"] == 2
    assert shapes["warning_precision"] == round(1 / 3, 4)
    # the family's strongest level on the calls that did not fail, whatever the decision
    assert shapes["warns_on_ok_calls_in_successful_runs"] == 2
    assert families["bad_value"]["block_precision"] == 1.0
    assert families["bad_value"]["warned_calls"] == 0
    assert families["bad_value"]["warning_precision"] is None
    assert families["prerequisite"]["warning_precision"] == 0.5
