"""Question: from the steps a session has made so far, how well does the failure
memory's risk model (:mod:`sidecar.memory.risk`) tell the sessions that will end
abandoned, and how often does it alarm on sessions that succeed?

Protocol: the splits of :mod:`benchmarks.failure_domains`, by task.  For each domain D
left out, D's tasks are dealt into folds; a fresh model learns every run of the other
domains plus D's other folds (their outcomes: ``completed`` when the run's reward is 1,
else ``abandoned``) and scores every prefix of every held-out run: the steps before
each of its calls.  A prefix's label is whether its run was abandoned.  Also *D
unseen*: the model learns only the other domains' runs and scores all of D.

**The model's settings were chosen on retail alone** (its leave-one-domain-out AUPRC,
:data:`SWEEP`); telecom, bfcl and apibank are reported with them unchanged.  So the
retail figures are those of the domain the settings were chosen on; the others are
held out from that choice.

Figures, pooled and per domain left out: AUPRC (average precision, ties scored as one
threshold), ROC AUC, the base rate, a 10-bin calibration table with its ECE, and the
*first alert* at thresholds 0.5-0.8: the share of successful runs alerted at any prefix
(the false-alarm rate), the share of abandoned runs alerted, and how many steps before
the run's end the first alert came.  A prequential curve: a domain's runs arriving one
at a time from an empty model, each scored before it is learned; AUPRC over the runs
after 0, 25, 50 and 100 sessions.  Timing: a risk answer at 1,000 learned sessions,
through :meth:`sidecar.memory.FailureMemory.risk`.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.failure_domains import leave_one_domain_out
from benchmarks.tau2 import Corpus, Run
from sidecar.memory.risk import RiskModel, RiskParams, derive_risk

THRESHOLDS = (0.5, 0.6, 0.7, 0.8)
BINS = 10
CURVE = (0, 25, 50, 100)
AUPRC_GOAL = 0.71
GOAL_DOMAINS = ("retail", "telecom")

SWEEP: dict[str, RiskParams] = {
    "default": RiskParams(),
    "strength=2": RiskParams(strength=2.0),
    "strength=32": RiskParams(strength=32.0),
    "steps first": RiskParams(
        levels=(
            ("steps",),
            ("steps", "fails"),
            ("steps", "fails", "last"),
            ("steps", "fails", "last", "tool"),
        )
    ),
    "tool first": RiskParams(
        levels=(
            ("tool",),
            ("tool", "last"),
            ("tool", "last", "fails"),
            ("tool", "last", "fails", "repeat", "steps"),
        )
    ),
    "no tool": RiskParams(levels=(("last",), ("last", "fails"), ("last", "fails", "repeat"))),
}
"""The settings compared on retail (the only domain they were compared on)."""


@dataclass(frozen=True)
class Scored:
    """One held-out prefix: its run, its position (steps before the call), the run's
    length and label, and the model's probability."""

    run: int
    position: int
    length: int
    abandoned: bool
    score: float


# ---- metrics -----------------------------------------------------------------------------
def average_precision(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Average precision, each distinct score one threshold (as scikit-learn's):
    sum over thresholds of precision times the recall gained; ``None`` without any
    positive."""
    positives = sum(labels)
    if not positives:
        return None
    pairs = sorted(zip(scores, labels, strict=True), key=lambda p: -p[0])
    total = hits = seen = 0
    ap = 0.0
    i = 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            hits += pairs[j][1]
            j += 1
        seen = j
        gained = hits - total
        ap += (gained / positives) * (hits / seen)
        total = hits
        i = j
    return ap


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """The chance a positive outscores a negative (ties count half)."""
    pos = sorted(s for s, y in zip(scores, labels, strict=True) if y)
    neg = sorted(s for s, y in zip(scores, labels, strict=True) if not y)
    if not pos or not neg:
        return None
    wins = 0.0
    for s in pos:
        below = _count_below(neg, s)
        ties = _count_below(neg, s, strict=False) - below
        wins += below + 0.5 * ties
    return wins / (len(pos) * len(neg))


def _count_below(values: Sequence[float], x: float, strict: bool = True) -> int:
    import bisect

    return bisect.bisect_left(values, x) if strict else bisect.bisect_right(values, x)


def calibration(
    scores: Sequence[float], labels: Sequence[bool], bins: int = BINS
) -> dict[str, Any]:
    """Equal-width bins of the predicted probability: each bin's count, mean predicted
    and observed rate; ECE, the count-weighted mean gap."""
    rows: list[dict[str, Any]] = []
    ece = 0.0
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        inside = [
            (s, y)
            for s, y in zip(scores, labels, strict=True)
            if low <= s < high or (b == bins - 1 and s == 1.0)
        ]
        if not inside:
            continue
        predicted = statistics.fmean(s for s, _ in inside)
        observed = sum(y for _, y in inside) / len(inside)
        ece += len(inside) / len(scores) * abs(predicted - observed)
        rows.append({"bin": f"{low:.1f}-{high:.1f}", "n": len(inside),
                     "predicted": round(predicted, 4), "observed": round(observed, 4)})  # fmt: skip
    return {"bins": rows, "ece": round(ece, 4) if scores else None}


def first_alerts(scored: Sequence[Scored], thresholds: Sequence[float] = THRESHOLDS) -> list[Any]:
    """Per threshold: successful runs alerted at any prefix (false alarms), abandoned
    runs alerted, and the steps left (the first alerted call and those after it) when
    an abandoned run's first alert came."""
    runs: dict[int, list[Scored]] = {}
    for s in scored:
        runs.setdefault(s.run, []).append(s)
    out = []
    for t in thresholds:
        ok = bad = ok_alerted = bad_alerted = 0
        left: list[int] = []
        for prefixes in runs.values():
            first = min((p.position for p in prefixes if p.score >= t), default=None)
            if prefixes[0].abandoned:
                bad += 1
                if first is not None:
                    bad_alerted += 1
                    left.append(prefixes[0].length - first)
            else:
                ok += 1
                ok_alerted += first is not None
        out.append({
            "threshold": t,
            "false_alarm_rate": round(ok_alerted / ok, 4) if ok else None,
            "abandoned_alerted": round(bad_alerted / bad, 4) if bad else None,
            "steps_left_median": statistics.median(left) if left else None,
            "steps_left_mean": round(statistics.fmean(left), 2) if left else None,
            "successful_runs": ok,
            "abandoned_runs": bad,
        })  # fmt: skip
    return out


def summary(scored: Sequence[Scored]) -> dict[str, Any]:
    """Every figure over a set of scored prefixes."""
    scores = [s.score for s in scored]
    labels = [s.abandoned for s in scored]
    ap = average_precision(scores, labels)
    auc = roc_auc(scores, labels)
    return {
        "prefixes": len(scored),
        "runs": len({s.run for s in scored}),
        "base_rate": round(sum(labels) / len(labels), 4) if labels else None,
        "auprc": round(ap, 4) if ap is not None else None,
        "roc_auc": round(auc, 4) if auc is not None else None,
        "calibration": calibration(scores, labels),
        "first_alert": first_alerts(scored),
    }


# ---- replay ------------------------------------------------------------------------------
def trained(runs: Sequence[Run], indexes: Sequence[int], params: RiskParams) -> RiskModel:
    model = RiskModel(params)
    for i in indexes:
        model.fold(derive_risk(params, runs[i].session()))
    return model


def score_runs(model: RiskModel, runs: Sequence[Run], indexes: Sequence[int]) -> list[Scored]:
    """Every prefix (the steps before each call) of each run, scored."""
    out = []
    for i in indexes:
        run = runs[i]
        for j in range(len(run.steps)):
            p = model.risk(run.steps[:j]).probability
            out.append(Scored(i, j, len(run.steps), not run.succeeded, p))
    return out


def lodo_scored(
    corpus: Corpus, domain: str, seeds: Sequence[int], folds: int, params: RiskParams
) -> list[Scored]:
    """``domain``'s held-out prefixes over every fold and seed (a run once per seed:
    the run's index is made unique per seed)."""
    out: list[Scored] = []
    runs = corpus.runs
    for split in leave_one_domain_out(runs, domain, folds, seeds):
        model = trained(runs, split.training, params)
        out += _per_seed(score_runs(model, runs, split.test), split.seed, len(runs))
    return out


def _per_seed(scored: Sequence[Scored], seed: int, runs: int) -> list[Scored]:
    """The same prefixes with their run's index made unique per seed (a run is held out
    once per seed, and its prefixes of one seed are one run's)."""
    return [Scored(s.run + seed * runs, s.position, s.length, s.abandoned, s.score)
            for s in scored]  # fmt: skip


def unseen_scored(corpus: Corpus, domain: str, params: RiskParams) -> list[Scored]:
    """``domain``'s prefixes scored by a model that learned only the other domains."""
    runs = corpus.runs
    others = [i for i, r in enumerate(runs) if r.domain != domain]
    mine = [i for i, r in enumerate(runs) if r.domain == domain]
    return score_runs(trained(runs, others, params), runs, mine)


def prequential(
    corpus: Corpus, domain: str, seeds: Sequence[int], params: RiskParams
) -> list[dict[str, Any]]:
    """``domain``'s runs arriving one at a time from an empty model, each scored before
    it is learned: AUPRC and ROC AUC over the runs after each of :data:`CURVE` (to the
    next one, or the end), pooled over seeds."""
    windows: dict[int, list[Scored]] = {n: [] for n in CURVE}
    runs = corpus.runs
    for seed in seeds:
        order = [i for i, r in enumerate(runs) if r.domain == domain]
        random.Random(f"risk:{seed}:{domain}").shuffle(order)
        model = RiskModel(params)
        for position, i in enumerate(order):
            window = max(n for n in CURVE if n <= position)
            windows[window] += _per_seed(score_runs(model, runs, [i]), seed, len(runs))
            model.fold(derive_risk(params, runs[i].session()))
    out = []
    for n, scored in windows.items():
        if scored:
            s = summary(scored)
            out.append({"after": n, "runs": s["runs"], "base_rate": s["base_rate"],
                        "auprc": s["auprc"], "roc_auc": s["roc_auc"]})  # fmt: skip
    return out


def risk_timing(corpus: Corpus, sessions: int = 1000, repeat: int = 200) -> dict[str, Any]:
    """A risk answer through :class:`~sidecar.memory.FailureMemory` after ``sessions``
    learned runs (the corpus cycled), for a 10-step and a 30-step prefix."""
    from sidecar.memory import FailureMemory

    memory = FailureMemory()
    runs = corpus.runs
    for n in range(sessions):
        run = runs[n % len(runs)]
        session = run.session()
        memory.fold({**memory.derive(session), "session": f"{run.run_id}#{n}"})
        memory.learn_outcome(memory.derive_outcome(session))
    # the run with the most failing calls: each failure's signature is part of the cost
    longest = max(runs, key=lambda r: (sum(s.error is not None for s in r.steps), r.run_id)).steps
    out: dict[str, Any] = {"sessions": sessions}
    for length in (10, 30):
        prefix = list((longest * 30)[:length])
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            memory.risk(prefix)
            times.append((time.perf_counter() - start) * 1000.0)
        out[f"risk_ms_p50_{length}_steps"] = round(statistics.median(times), 4)
        out[f"risk_ms_p99_{length}_steps"] = round(sorted(times)[int(0.99 * len(times))], 4)
    out["keys"] = len(memory.risk_model.counts)
    return out


# ---- the figures -------------------------------------------------------------------------
def figures(
    corpus: Corpus,
    domains: Sequence[str],
    seeds: Sequence[int],
    folds: int,
    params: RiskParams | None = None,
) -> dict[str, Any]:
    """Pooled and per domain left out, unseen domains, the prequential curves, the
    settings compared on retail, and timing."""
    chosen = params or RiskParams()
    per: dict[str, list[Scored]] = {
        d: lodo_scored(corpus, d, seeds, folds, chosen) for d in domains
    }
    pooled = [s for d in domains for s in per[d]]
    return {
        "protocol": "leave one domain out by task (the other domains plus the other folds "
        "learned); every prefix (the steps before each call) of each held-out run scored; "
        "label: the run was abandoned (reward < 1)",
        "params": {**vars(chosen), "levels": [list(v) for v in chosen.levels]},
        "chosen_on": "retail",
        "pooled": summary(pooled),
        "left_out": {d: summary(per[d]) for d in domains},
        "unseen": (
            {d: _short(summary(unseen_scored(corpus, d, chosen))) for d in domains}
            if len(domains) > 1
            else {}
        ),
        "prequential": {d: prequential(corpus, d, seeds, chosen) for d in domains},
        "sweep_on_retail": (
            {
                n: _short(summary(lodo_scored(corpus, "retail", seeds, folds, p)))
                for n, p in SWEEP.items()
            }
            if "retail" in domains
            else {}
        ),
        "timing": risk_timing(corpus),
    }


def _short(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: s[k] for k in ("prefixes", "runs", "base_rate", "auprc", "roc_auc")} | {
        "ece": s["calibration"]["ece"]
    }


def targets(risk: Mapping[str, Any]) -> list[dict[str, Any]]:
    """AUPRC >= 0.71 on each τ² domain left out."""
    from benchmarks.harness.results import target

    out = []
    for d in GOAL_DOMAINS:
        got = risk.get("left_out", {}).get(d)
        if got is None:
            continue
        name = f"session risk, {d} left out: AUPRC over every prefix"
        ap = got["auprc"]
        out.append(target(name, f">= {AUPRC_GOAL}", ap, ap is not None and ap >= AUPRC_GOAL,
                          "settings chosen on retail" if d == "retail" else ""))  # fmt: skip
    return out


def markdown_section(result: Mapping[str, Any]) -> list[str]:
    """The session-risk figures as Markdown (a section of the failures report)."""
    from benchmarks.harness.results import md_table

    risk = result.get("session_risk")
    if not risk:
        return []
    head = ["scope", "prefixes", "runs", "base rate", "AUPRC", "ROC AUC", "ECE"]

    def row(label: str, s: Mapping[str, Any]) -> list[Any]:
        ece = s["calibration"]["ece"] if "calibration" in s else s["ece"]
        return [label, s["prefixes"], s["runs"], *(_dash(v) for v in
                (s["base_rate"], s["auprc"], s["roc_auc"], ece))]  # fmt: skip

    scopes = [row("pooled", risk["pooled"])]
    scopes += [row(f"{d} left out", s) for d, s in risk["left_out"].items()]
    scopes += [row(f"{d} unseen", s) for d, s in risk["unseen"].items()]
    alerts = [[label, a["threshold"], *(_dash(a[k]) for k in ALERT_KEYS)]
              for label, s in [("pooled", risk["pooled"]), *risk["left_out"].items()]
              for a in s["first_alert"]]  # fmt: skip
    bins = [[b["bin"], b["n"], b["predicted"], b["observed"]]
            for b in risk["pooled"]["calibration"]["bins"]]  # fmt: skip
    curve = [[d, c["after"], c["runs"], *(_dash(c[k]) for k in ("base_rate", "auprc", "roc_auc"))]
             for d, rows in risk["prequential"].items() for c in rows]  # fmt: skip
    sweep = [row(n, s) for n, s in risk["sweep_on_retail"].items()]
    return [
        "### Session risk: abandoned or not, from the prefix",
        "",
        f"Protocol: {risk['protocol']}. Settings chosen on {risk['chosen_on']} alone "
        f"(the sweep below); the other domains reported with them unchanged.",
        "",
        md_table(head, scopes),
        "",
        "First alerts (a run alerted at any prefix at or above the threshold):",
        "",
        md_table(["scope", "threshold", *ALERT_KEYS], alerts),
        "",
        "Calibration, pooled:",
        "",
        md_table(["bin", "prefixes", "mean predicted", "observed"], bins),
        "",
        "Prequential (each domain alone, from an empty model; runs after N sessions):",
        "",
        md_table(["domain", "after", "runs", "base rate", "AUPRC", "ROC AUC"], curve),
        "",
        "Settings compared on retail (left out):",
        "",
        md_table(head, sweep),
        "",
        f"A risk answer at {risk['timing']['sessions']} sessions learned: p50 "
        f"{risk['timing']['risk_ms_p50_30_steps']} ms for a 30-step prefix "
        f"({risk['timing']['keys']} keys).",
        "",
    ]


ALERT_KEYS = ("false_alarm_rate", "abandoned_alerted", "steps_left_median", "steps_left_mean")


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def main(argv: list[str] | None = None) -> None:
    """The figures alone, as JSON (``bench_failures`` reports them with the rest)."""
    import argparse
    import json

    from benchmarks.common import DEFAULT_DATASETS
    from benchmarks.failure_domains import DOMAINS, load_domains, parse_domains

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default=str(DEFAULT_DATASETS))
    parser.add_argument("--domains", default=",".join(DOMAINS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args(argv)
    from pathlib import Path

    chosen = parse_domains(args.domains)
    corpus, _notes = load_domains(Path(args.dataset), chosen)
    seeds = [args.seed + i for i in range(args.seeds)]
    print(json.dumps(figures(corpus, chosen, seeds, args.folds), indent=1))


if __name__ == "__main__":
    main()
