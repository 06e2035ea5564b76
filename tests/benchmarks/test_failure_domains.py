"""The generalization protocol of ``bench_failures``: the domains, the leave-one-domain-
out split, its replay, the same-situation guard, and a whole run on a small corpus (a
synthetic τ² file and the bfcl domain)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks import bench_failures
from benchmarks.bench_failures import lodo_replay, markdown, run, same_situation_variants
from benchmarks.failure_domains import (
    leave_one_domain_out,
    missing,
    parse_domains,
    pooled_splits,
)
from benchmarks.failure_figures import SAME_SITUATION, lodo_figures
from benchmarks.tau2 import FLAT, Corpus, Run
from sidecar.memory import Step, Thresholds
from tests.support.datasets import tau2_file

MISSING = "Error: Account not found"


def make_run(n: int, domain: str, task: str, fails: bool, email: str = "old9@x.com") -> Run:
    found = (
        Step("find_account", {"email": email}, None, MISSING)
        if fails
        else Step("find_account", {"email": f"u{n}@x.com"}, f"acct_{n}")
    )
    steps = (Step("open_ticket", {"ticket_id": f"T_{n}"}, "opened"), found)
    return Run(f"r{n}", domain, f"{domain}/{task}", "agent", 0.0 if fails else 1.0, steps,
               ("", ""))  # fmt: skip


def three_domains() -> list[Run]:
    """Three domains, several runs per task (a task's runs must stay on one side)."""
    runs: list[Run] = []
    n = 0
    for domain, tasks in (("a", 4), ("b", 6), ("c", 3)):
        for t in range(tasks):
            for _ in range(1 + t % 3):
                runs.append(make_run(n, domain, f"t{t}", fails=t % 2 == 0))
                n += 1
    return runs


@pytest.mark.parametrize("domain", ["a", "b", "c"])
def test_leave_one_domain_out_never_trains_on_a_test_task(domain: str) -> None:
    runs = three_domains()
    splits = leave_one_domain_out(runs, domain, 3, seeds=[1, 2])
    mine = {i for i, r in enumerate(runs) if r.domain == domain}
    others = set(range(len(runs))) - mine
    assert len(splits) == 6
    for seed in (1, 2):
        tested: list[int] = []
        for split in (s for s in splits if s.seed == seed):
            assert split.held_out == domain
            test_tasks = {runs[i].task for i in split.test}
            assert set(split.test) <= mine
            # no test-fold task in training, and the other domains wholly in training
            assert not test_tasks & {runs[i].task for i in split.training}
            assert others <= set(split.training)
            assert set(split.training) | set(split.test) == set(range(len(runs)))
            assert len(split.training) == len(set(split.training))
            tested += split.test
        # every run of the held-out domain is tested once per seed
        assert sorted(tested) == sorted(mine)
    assert leave_one_domain_out(runs, domain, 3, seeds=[1, 2]) == splits


def test_pooled_splits_hold_out_each_task_once_per_seed() -> None:
    runs = three_domains()
    splits = pooled_splits(runs, 4, seeds=[5])
    assert sorted(i for s in splits for i in s.test) == list(range(len(runs)))
    for split in splits:
        assert split.held_out is None
        assert not {runs[i].task for i in split.test} & {runs[i].task for i in split.training}


def test_parse_domains() -> None:
    assert parse_domains(None) == ("retail", "telecom", "bfcl", "apibank", "booking")
    assert parse_domains("bfcl,retail") == ("retail", "bfcl")
    assert parse_domains(["telecom"]) == ("telecom",)
    with pytest.raises(ValueError, match="airline"):
        parse_domains("retail,airline")
    with pytest.raises(ValueError):
        parse_domains("")


def test_missing_names_only_what_the_chosen_domains_need(tmp_path: Path) -> None:
    assert missing(tmp_path, ("bfcl",)) == []
    assert missing(tmp_path, ("retail", "bfcl")) == [str(FLAT)]


def test_a_domain_left_out_learns_from_the_other_domains() -> None:
    # domain "b" has one failing task: held out, only domain "a"'s failure can warn
    runs = [make_run(0, "a", "x", fails=True), make_run(1, "a", "y", fails=False)]
    runs += [make_run(2, "b", "z", fails=True)]
    runs += [make_run(3 + i, "b", f"ok{i}", fails=False) for i in range(3)]
    corpus = Corpus(runs)
    replayed = lodo_replay(corpus, ("a", "b"), seeds=[0], k=2, variants={})
    figures = lodo_figures(corpus, replayed, ("a", "b"), Thresholds())
    held_b = figures["systems"]["call_memory"]["by_domain"]["b"]
    assert held_b["repeats"] == 1 and held_b["repeats_caught"] == 1
    assert held_b["successful_runs"] == 3 and held_b["successful_runs_wrongly_blocked"] == 0
    assert set(figures["systems"]) == {"sequence_memory", "call_memory"}
    assert {row["held_out"] for row in figures["per_fold"]} == {"a", "b"}
    # the warning that caught it, by rule: learned on "a", it warned once on "b", rightly
    assert (held_b["warned_calls"], held_b["warning_precision"]) == (1, 1.0)
    (only,) = figures["warned_by_rule"]["b"]
    assert (only["tool"], only["warned_calls"], only["failed"]) == ("find_account", 1, 1)
    assert only["in_successful_runs"] == 0 and only["reason"].startswith("warn [")


def test_the_same_situation_variant_waits_for_the_learner_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    variants, note = same_situation_variants()
    if note is not None:
        assert variants == {} and "independence" in note

    @dataclass(frozen=True)
    class WithIndependence:
        independence: str = "situation"

    monkeypatch.setattr(bench_failures, "LearnParams", WithIndependence)
    variants, note = same_situation_variants()
    assert note is None
    assert variants == {SAME_SITUATION: WithIndependence("session")}


@pytest.mark.slow
def test_a_whole_run_reports_each_domain_and_each_domain_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_failures, "LEARN_SWEEP", {})
    tau2_file(tmp_path)
    result = run(True, dataset=tmp_path, folds=2, domains="retail,bfcl", bfcl_runs=1,
                 prequential="call_memory")  # fmt: skip
    assert result["params"]["domains"] == ["retail", "bfcl"]
    assert result["corpus"]["runs_by_domain"] == {"retail": 8, "bfcl": 130}
    assert set(result["per_domain"]) == {"retail", "bfcl"}
    lodo = result["leave_one_domain_out"]
    assert set(lodo["systems"]["call_memory"]["by_domain"]) == {"retail", "bfcl"}
    # every held-out call of a domain is scored once per seed
    pooled = result["per_domain"]["bfcl"]["call_memory"]["calls"]
    assert lodo["systems"]["call_memory"]["by_domain"]["bfcl"]["calls"] == pooled
    names = [t["target"] for t in result["targets"]]
    assert any("bfcl left out: block precision" in n for n in names)
    assert any("1,000 conditions" in n for n in names)
    assert result["timing"]["synthetic"]["1000"]["conditions"] == 1000
    text = markdown(result)
    assert "### Leave one domain out" in text and "### Targets by domain" in text
    assert "| bfcl | call_memory |" in text
    # the runs arriving one by one (through the library: tests/benchmarks/test_prequential.py)
    preq = result["prequential"]
    assert preq["through"] == "call_memory"
    streams = preq["streams"]
    assert set(streams) == {"retail alone", "bfcl alone", "retail after the others",
                            "bfcl after the others", "pooled"}  # fmt: skip
    bfcl_alone = streams["bfcl alone"]
    assert bfcl_alone["sessions"] == 130 and bfcl_alone["prior_sessions"] == 0
    assert [r["after"] for r in bfcl_alone["curve"]] == [10, 25, 50, 100, 130]
    last = bfcl_alone["curve"][-1]["cumulative"]
    assert last["repeats"] > 0 and last["catch_rate"] is not None
    assert streams["retail after the others"]["prior_sessions"] == 130
    assert bfcl_alone["firsts"][0]["first_repeat"] is not None
    assert any("first correct block" in n for n in names)
    assert "### Learning as it happens (prequential)" in text
    assert "| bfcl alone | 130 |" in text
    assert result["not_blocked"]["pooled_folds"] is not None
    assert isinstance(result["wrongly_blocked"]["pooled_folds"], list)
    assert "### Calls that did not fail and were blocked" in text
    by_rule = result["warned_by_rule"]
    assert set(by_rule["leave_one_domain_out"]) == {"retail", "bfcl"}
    assert all(len(rows) <= 10 for rows in by_rule["leave_one_domain_out"].values())
    assert all(r["warned_calls"] >= r["failed"] for r in by_rule["pooled_folds"])
    assert "warning_precision" in result["families"]["bad_value"]
    assert any("bfcl left out: warning precision" in n for n in names)
    assert "### Where the warnings come from: by family and by rule" in text
    single = run(True, dataset=tmp_path, folds=2, domains="bfcl", bfcl_runs=1,
                 prequential="none")  # fmt: skip
    assert "note" in single["leave_one_domain_out"]
    assert "nothing to leave out" in markdown(single)
    assert "not replayed" in markdown(single)
