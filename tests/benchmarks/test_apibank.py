"""The apibank domain: the derived data is there, ground truths succeed, and each
mutation run ends with one refusal that the simulated service really makes, for the
reason its kind names."""

from __future__ import annotations

import json
from functools import cache

from benchmarks import apibank
from benchmarks.apibank_world import INVALID_TOKEN, KINDS

MESSAGES = json.loads((apibank.DATA / "world.json").read_text())


@cache
def built(seed: int = 0, runs: int = 2) -> list[apibank.Built]:
    return apibank.build(seed, runs)


def test_the_derived_data_is_in_the_repository() -> None:
    assert apibank.missing_files() == []
    dialogues = apibank.dialogues()
    assert len(dialogues) == 261  # 264 dialogues, 3 of which call nothing
    assert all(d.steps and len(d.told) == len(d.steps) for d in dialogues)
    assert all(s.error is None for d in dialogues for s in d.steps)
    assert sum(s.tool == "GetUserToken" for d in dialogues for s in d.steps) > 100


def test_every_mutation_run_ends_with_its_refusal() -> None:
    runs = built()
    kinds = {b.mutation.kind for b in runs if b.mutation}
    assert kinds == set(KINDS)
    for b in runs:
        run, mutation = b.run, b.mutation
        assert run.domain == "apibank" and run.task == f"apibank/{b.dialogue.dialogue_id}"
        if mutation is None:
            assert run.succeeded and run.steps == b.dialogue.steps
            continue
        assert not run.succeeded and run.agent == f"mutation:{mutation.kind}"
        *before, last = run.steps
        assert last.error and all(s.error is None for s in before)
        assert len(run.told_before) == len(run.steps)
        # the steps before the refusal are the ground truth's, in order (a subsequence)
        rest = iter(b.dialogue.steps)
        assert all(any(s == t for t in rest) for s in before)


def test_each_kind_refuses_for_its_reason() -> None:
    accounts = MESSAGES["accounts"]
    tokens = {a["token"] for a in accounts.values()}
    for b in built():
        if b.mutation is None:
            continue
        kind, last = b.mutation.kind, b.run.steps[-1]
        args = last.arguments
        if kind == "invented_token":
            assert args["token"] not in tokens and last.error in (
                INVALID_TOKEN,
                "The token is incorrect.",
            )
        elif kind == "wrong_password" and last.tool == "GetUserToken":
            assert args["password"] != accounts[args["username"]]["password"]
            assert last.error == "The password is incorrect."
        elif kind == "unknown_user":
            assert args["username"] not in accounts
            assert last.error == "The username does not exist."
        elif kind == "repeated_creation":
            assert b.run.steps[-2].arguments == args and b.run.steps[-2].tool == last.tool
        elif kind == "stale_password":
            changed = b.run.steps[-2]
            assert changed.tool == "ModifyPassword"
            assert args["password"] == changed.arguments["old_password"]
        elif kind == "after_account_deleted":
            assert any(s.tool == "DeleteAccount" for s in b.run.steps[:-1])
        elif kind == "skipped_step":
            assert last.tool == "ForgotPassword" and not any(
                s.tool == "ForgotPassword" for s in b.run.steps[:-1]
            )
        elif kind == "reversed_range":
            assert args["start_time"] > args["end_time"]


def test_the_same_seed_builds_the_same_runs_and_failures_repeat_across_dialogues() -> None:
    again = apibank.build(0, 2)
    assert [b.run for b in again] == [b.run for b in built()]
    other = apibank.build(1, 2)
    assert [b.run for b in other] != [b.run for b in built()]
    corpus = apibank.load(0, 1)
    assert corpus.notes["ground_truth_runs"] == 261 and corpus.notes["mutation_runs"] > 150
    # the same refusal of the same tool in several dialogues: repeats to learn
    failing: dict[tuple[str, str], set[str]] = {}
    for run in corpus.runs:
        for step in run.steps:
            if step.error:
                failing.setdefault((step.tool, step.error), set()).add(run.task)
    assert sum(len(tasks) >= 5 for tasks in failing.values()) >= 5
    assert {t.tool_id for t in corpus.tools} >= {"GetUserToken", "QueryRegistration"}
