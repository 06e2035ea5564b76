"""The retrieval benchmark's usage protocol, end to end at its smallest (the real model,
APIBench's TorchHub from the datasets folder): it learns from the training sessions, a
stream is what it says, and the cost is measured through a real index."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_retrieval import UsagePlan, usage_protocol
from benchmarks.common import model_embedder
from benchmarks.harness.results import REPO_ROOT
from benchmarks.retrieval_data import APIBENCH_DIR, apibench
from benchmarks.retrieval_rankers import Engine
from benchmarks.retrieval_report import usage_markdown
from benchmarks.retrieval_usage import ABANDONED_SHARE, stream

DATASETS = REPO_ROOT.parent / "shared" / "datasets"
if not (DATASETS / APIBENCH_DIR / "torchhub_train.json").is_file():  # another checkout layout
    DATASETS = Path("/work/shared/datasets")

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def torchhub() -> Engine:
    if not (DATASETS / APIBENCH_DIR / "torchhub_train.json").is_file():
        pytest.skip(f"the datasets are not at {DATASETS} (the usage protocol reads APIBench)")
    return Engine(apibench(DATASETS, "torchhub"), model_embedder("onnx"), {})


def test_a_stream_holds_every_training_request_and_a_share_of_wrong_tools(
    torchhub: Engine,
) -> None:
    train = torchhub.protocol.train[:60]
    sessions = stream(torchhub, train, ABANDONED_SHARE, 8, seed=7)
    done = [s for s in sessions if s.completed]
    assert sorted(s.text for s in done) == sorted(q.text for q in train)
    wrong = [s for s in sessions if not s.completed]
    assert len(wrong) == round(len(train) * ABANDONED_SHARE / (1 - ABANDONED_SHARE))
    relevant = {q.text: q.relevant for q in train}
    assert all(s.tools[0] not in relevant[s.text] for s in wrong)
    assert {s.source for s in sessions} <= {f"agent-{i}" for i in range(8)}
    assert stream(torchhub, train, ABANDONED_SHARE, 8, seed=7) == sessions


def test_the_quick_usage_protocol_learns_and_measures_its_cost(torchhub: Engine) -> None:
    plan = UsagePlan(("apibench_torchhub",), 40, (0, 300, None), (50, 500), 3, "apibench_torchhub")
    result = usage_protocol({"apibench_torchhub": torchhub}, plan, 7, torchhub.embedder)
    for config, curve in result["curves"]["apibench_torchhub"].items():
        points = curve["points"]
        assert list(points) == ["0", "300", "all"], config
        assert points["all"]["all"]["ndcg@5"] > points["0"]["all"]["ndcg@5"], config
        assert points["all"]["all"]["n"] == 40
    cost = result["cost"]
    assert set(cost["held"]) == {"50", "500"}
    assert cost["held"]["500"]["memory_measured"] and cost["held"]["500"]["kept_requests"] > 0
    for kind in ("short", "long"):
        assert set(cost[kind]["lookups"]) == {"plain", "hybrid", "usage 50", "usage 500"}
    text = usage_markdown(result)
    assert "Usage: learning curves" in text and "apibench_torchhub" in text
