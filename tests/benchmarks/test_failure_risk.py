"""The session-risk benchmark's metrics against hand-computed values, and its replay on
a small corpus."""

from __future__ import annotations

import pytest

from benchmarks.failure_risk import (
    Scored,
    average_precision,
    calibration,
    first_alerts,
    prequential,
    roc_auc,
    score_runs,
    targets,
    trained,
)
from benchmarks.tau2 import Corpus, Run
from sidecar.memory import Step
from sidecar.memory.risk import RiskParams


def test_average_precision_by_hand() -> None:
    # ranks: +, -, +, -: precision 1 at the first positive, 2/3 at the second
    assert average_precision([0.9, 0.8, 0.7, 0.6], [True, False, True, False]) == pytest.approx(
        (1.0 + 2 / 3) / 2
    )
    # a tie is one threshold: 1 of 2 at 0.5, then 2 of 3
    assert average_precision([0.5, 0.5, 0.2], [True, False, True]) == pytest.approx(
        0.5 * 0.5 + 0.5 * 2 / 3
    )
    assert average_precision([0.3, 0.1], [False, False]) is None


def test_average_precision_agrees_with_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    import random

    rng = random.Random(3)
    scores = [round(rng.random(), 1) for _ in range(300)]
    labels = [rng.random() < s for s in scores]
    assert average_precision(scores, labels) == pytest.approx(
        metrics.average_precision_score(labels, scores)
    )
    assert roc_auc(scores, labels) == pytest.approx(metrics.roc_auc_score(labels, scores))


def test_roc_auc_by_hand() -> None:
    assert roc_auc([0.9, 0.8, 0.7, 0.6], [True, False, True, False]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5], [True, False]) == pytest.approx(0.5)
    assert roc_auc([0.5], [True]) is None


def test_calibration_table_and_ece_by_hand() -> None:
    table = calibration([0.1, 0.1, 0.9, 0.9, 1.0], [False, True, True, True, True])
    assert [(r["bin"], r["n"]) for r in table["bins"]] == [("0.1-0.2", 2), ("0.9-1.0", 3)]
    assert table["bins"][0]["observed"] == 0.5
    # |0.1 - 0.5| * 2/5 + |0.9333 - 1| * 3/5
    assert table["ece"] == pytest.approx(0.4 * 2 / 5 + (1 - 2.8 / 3) * 3 / 5, abs=1e-4)


def test_first_alerts_by_hand() -> None:
    scored = [
        # an abandoned run of 4 steps, alerted first before its third call (2 steps left)
        *(Scored(1, j, 4, True, s) for j, s in enumerate([0.2, 0.4, 0.65, 0.9])),
        # a successful run alerted once, at 0.55
        *(Scored(2, j, 3, False, s) for j, s in enumerate([0.1, 0.55, 0.3])),
        Scored(3, 0, 1, False, 0.1),
    ]
    rows = {r["threshold"]: r for r in first_alerts(scored)}
    assert rows[0.5]["false_alarm_rate"] == 0.5 and rows[0.5]["abandoned_alerted"] == 1.0
    assert rows[0.5]["steps_left_median"] == 2
    assert rows[0.6]["false_alarm_rate"] == 0.0 and rows[0.6]["steps_left_median"] == 2
    assert rows[0.8]["steps_left_median"] == 1
    assert rows[0.8]["successful_runs"] == 2 and rows[0.8]["abandoned_runs"] == 1


def shop_run(n: int, failing: bool) -> Run:
    steps = (
        Step("get_order", {"id": n}, {"status": "delivered"}),
        Step("cancel_order", {"id": n}, error="cannot be cancelled" if failing else None),
        Step("respond"),
    )
    reward = 0.0 if failing else 1.0
    return Run(f"r{n}", "shop", f"shop/{n % 7}", "agent", reward, steps, ("task",) * 3)


def test_a_failing_run_is_scored_riskier_and_the_curve_has_its_windows() -> None:
    corpus = Corpus([shop_run(n, n % 3 == 0) for n in range(130)])
    model = trained(corpus.runs, range(1, 130), RiskParams())
    scored = score_runs(model, corpus.runs, [0, 1])
    assert len(scored) == 6 and [s.position for s in scored[:3]] == [0, 1, 2]
    # after the refused call (position 2) the failing run is riskier than the clean one
    assert scored[2].score > scored[5].score
    curve = prequential(corpus, "shop", [7], RiskParams())
    assert [c["after"] for c in curve] == [0, 25, 50, 100]
    assert sum(c["runs"] for c in curve) == 130


def test_the_target_reads_the_tau2_domains_left_out() -> None:
    rows = targets({"left_out": {"retail": {"auprc": 0.8}, "telecom": {"auprc": 0.5}}})
    assert [(r["measured"], r["met"]) for r in rows] == [(0.8, True), (0.5, False)]
