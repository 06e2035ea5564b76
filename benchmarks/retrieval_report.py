"""``bench_retrieval``'s targets, its Markdown tables and its plot (the learning curve)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.results import md_table, md_targets, pyplot, save_figure, target

BASELINES = ("minilm", "multiview", "bm25")
"""The rankers the fusion must never fall below, per query class."""
PLOTTED = "apibench_torchhub"
USAGE_GAIN = 10.0


def _get(p: Mapping[str, Any], name: str, ranker: str, metric: str, split: str = "all") -> float:
    return float(p[name]["rankers"][ranker][split][metric])


def class_gaps(protocol: Mapping[str, Any], ranker: str = "hybrid") -> dict[str, float]:
    """Per query class, ``ranker``'s nDCG@5 minus the best baseline's."""
    rankers = protocol["rankers"]
    out = {}
    for split in ("single", "multi"):
        if split in rankers[ranker]:
            best = max(rankers[b][split]["ndcg@5"] for b in BASELINES)
            out[split] = round(rankers[ranker][split]["ndcg@5"] - best, 1)
    return out


def usage_at(curve: Mapping[str, Any], sessions: int = 1000) -> str:
    """The curve point of ``sessions`` sessions, or of all of them when the stream is
    shorter."""
    points = curve["points"]
    return str(sessions) if str(sessions) in points else "all"


def targets(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        *_absolute_targets(result),
        *_usage_targets(result),
        *_cost_targets(result),
    ]


def _absolute_targets(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    from sidecar.settings import DEFAULT_ABSTAIN_BELOW

    p = result["protocols"]
    out = []
    goals = {
        "stabletoolbench": {"ndcg@5": 75, "recall@5": 80, "comp@5": 60},
        "seal_tools": {"ndcg@5": 90, "recall@5": 90},
        "toolbench_completed": {"recall@5": 75},
    }
    for name, wanted in goals.items():
        if name not in p:
            continue
        for metric, goal in wanted.items():
            got = _get(p, name, "hybrid", metric)
            out.append(
                target(f"retrieval: {name} {metric} (hybrid)", f">= {goal}", got, got >= goal)
            )
    for name, protocol in p.items():
        gaps = class_gaps(protocol)
        worst = min(gaps.values())
        out.append(
            target(
                f"retrieval: {name}, hybrid nDCG@5 minus the best of MiniLM, multi-view "
                "and BM25, worst query class",
                ">= 0",
                gaps,
                worst >= 0,
            )
        )
    row = next(
        (r for r in result["abstention"]["thresholds"] if r["threshold"] == DEFAULT_ABSTAIN_BELOW),
        None,
    )
    if row is not None:
        out.append(
            target(
                "retrieval: out-of-scope queries abstained at "
                f"abstain_below={DEFAULT_ABSTAIN_BELOW}",
                ">= 80% at <= 1 point of in-scope recall@5 lost",
                f"{row['out_of_scope_abstained_pct']}% at {row['recall_lost_points']} points",
                row["out_of_scope_abstained_pct"] >= 80 and row["recall_lost_points"] <= 1,
            )
        )
    for name in ("short", "long"):
        got = result["latency"][name]["hybrid_vs_plain_p50"]
        out.append(
            target(
                f"retrieval: Sidecar.search p50, hybrid / plain ({name} queries)",
                "<= 1.3",
                got,
                got <= 1.3,
            )
        )
    return out


def _usage_targets(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, configs in result["usage"]["curves"].items():
        for config, curve in configs.items():
            at = usage_at(curve)
            zero = curve["points"]["0"]["all"]["ndcg@5"]
            got = curve["points"][at]["all"]["ndcg@5"]
            out.append(
                target(
                    f"retrieval usage: {name} ({config}), nDCG@5 after {at} sessions minus "
                    "zero-shot",
                    f">= {USAGE_GAIN:g}",
                    round(got - zero, 1),
                    got - zero >= USAGE_GAIN,
                )
            )
        worst = min(
            curve["points"][p][split]["ndcg@5"] - curve["points"]["0"][split]["ndcg@5"]
            for curve in configs.values()
            for p in curve["points"]
            for split in curve["points"]["0"]
        )
        out.append(
            target(
                f"retrieval usage: {name}, nDCG@5 minus zero-shot, worst query class, point "
                "and source",
                ">= 0",
                round(worst, 1),
                worst >= 0,
            )
        )
    return out


def _cost_targets(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    cost = result["usage"]["cost"]
    out = []
    sizes = cost["sizes"]
    for kind in ("short", "long"):
        got = cost[kind]["usage_vs_plain_p50"]
        out.append(
            target(
                f"retrieval usage: lookup p50 with the usage of {int(sizes[0]):,} sessions / "
                f"plain dense ({kind} queries)",
                "<= 1.3",
                got,
                got <= 1.3,
            )
        )
        got = cost[kind]["large_vs_small_usage_p50"]
        out.append(
            target(
                f"retrieval usage: lookup p50 at {int(sizes[1]):,} sessions / at "
                f"{int(sizes[0]):,} ({kind} queries)",
                "<= 1.1",
                got,
                got <= 1.1,
            )
        )
    return out


# ---- Markdown -------------------------------------------------------------------------
RANKER_HEADERS = [
    "ranker",
    "nDCG@1",
    "nDCG@5",
    "recall@5",
    "Comp@5",
    "single nDCG@5",
    "multi nDCG@5",
    "multi recall@5",
    "multi Comp@5",
]


def _ranker_row(name: str, by: Mapping[str, Mapping[str, float]]) -> list[Any]:
    a, s, m = by.get("all", {}), by.get("single", {}), by.get("multi", {})
    return [
        name,
        a.get("ndcg@1"),
        a.get("ndcg@5"),
        a.get("recall@5"),
        a.get("comp@5"),
        s.get("ndcg@5"),
        m.get("ndcg@5"),
        m.get("recall@5"),
        m.get("comp@5"),
    ]


def markdown(result: Mapping[str, Any]) -> str:
    lines = [*_fusion_lines(result), "", *_text_lines(result), ""]
    for name, r in result["protocols"].items():
        lines += [f"### {name}: {r['queries']} queries over {r['catalog']:,} tools", ""]
        rows = [
            _ranker_row(ranker, by) for ranker, by in r["rankers"].items() if ", " not in ranker
        ]
        lines += [md_table(RANKER_HEADERS, rows), ""]
        if r["after_first_tool"]:
            lines += ["After the first relevant tool (multi-tool queries, the rest relevant):", ""]
            lines.append(
                md_table(
                    ["ranker", "nDCG@5", "recall@5", "Comp@5", "n"],
                    [
                        [n, v.get("ndcg@5"), v.get("recall@5"), v.get("comp@5"), v.get("n")]
                        for n, v in r["after_first_tool"].items()
                    ],
                )
            )
            lines.append("")
    lines += [*_abstention_lines(result), *_latency_lines(result), *_usage_lines(result)]
    lines += ["", md_targets(result["targets"])]
    return "\n".join(lines)


def _fusion_lines(result: Mapping[str, Any]) -> list[str]:
    from benchmarks.retrieval_rankers import FUSIONS

    chosen = result["fusion"]
    names = list(result["protocols"])
    rows = []
    for fusion in [*FUSIONS, "hybrid"]:
        row: list[Any] = [fusion]
        for name in names:
            by = result["protocols"][name]["rankers"][fusion]
            gaps = class_gaps(result["protocols"][name], fusion)
            row.append(f"{by['all']['ndcg@5']} ({min(gaps.values()):+.1f})")
        rows.append(row)
    return [
        "### The fusion: chosen on one catalog, the others unretuned",
        "",
        f"nDCG@5 of each candidate (in brackets: its worst query class minus the best of "
        f"MiniLM, multi-view and BM25 for that class). Chosen on {chosen['tuned_on']}: its "
        f"best candidate is `{chosen['best_candidate']}`; `hybrid` is the lookup's fusion.",
        "",
        md_table(["fusion", *names], rows),
    ]


TEXTS = (
    "parameter names only",
    "descriptions embedded only",
    "descriptions embedded and in BM25",
)


def _text_lines(result: Mapping[str, Any]) -> list[str]:
    """nDCG@5 (all / single / multi) of MiniLM, BM25 and the hybrid per catalog text."""
    rows = []
    for name, r in result["protocols"].items():
        rankers = r["rankers"]
        for text in ("", *TEXTS):
            suffix = f", {text}" if text else ""
            if f"hybrid{suffix}" not in rankers:
                continue
            cells = [
                "/".join(
                    str(rankers[f"{ranker}{suffix}"].get(split, {}).get("ndcg@5", "-"))
                    for split in ("all", "single", "multi")
                )
                for ranker in ("minilm", "bm25", "hybrid")
            ]
            rows.append([name, text or "descriptions in BM25 only (the sidecar)", *cells])
    return [
        "### What the parameters' descriptions bring",
        "",
        "nDCG@5 all / single / multi, by the text each tool is embedded and indexed by.",
        "",
        md_table(["protocol", "text", "MiniLM", "BM25", "hybrid"], rows),
    ]


def _abstention_lines(result: Mapping[str, Any]) -> list[str]:
    rows = [
        [
            r["threshold"],
            r["in_scope_abstained_pct"],
            r["recall_lost_points"],
            r["cross_catalog_abstained_pct"],
            r["hand_made_abstained_pct"],
            r["out_of_scope_abstained_pct"],
        ]
        for r in result["abstention"]["thresholds"]
    ]
    headers = [
        "threshold",
        "in-scope abstained %",
        "recall@5 lost (points)",
        "cross-catalog %",
        "hand-made %",
        "out-of-scope %",
    ]
    return ["### Abstention", "", md_table(headers, rows)]


def _latency_lines(result: Mapping[str, Any]) -> list[str]:
    lat = result["latency"]
    rows = [
        [
            name,
            lat[name]["hybrid"]["p50_ms"],
            lat[name]["hybrid"]["p99_ms"],
            lat[name]["plain"]["p50_ms"],
            lat[name]["plain"]["p99_ms"],
            lat[name]["hybrid_vs_plain_p50"],
        ]
        for name in ("short", "long")
    ]
    headers = ["queries", "hybrid p50 ms", "hybrid p99 ms", "plain p50 ms", "plain p99 ms", "ratio"]
    return [
        "",
        f"### End to end: `Sidecar.search` over {lat['tools']:,} tools",
        "",
        "Top 5 of `sidecar.lookup.ranking.hybrid_ranked` over the home's index identical to this "
        f"benchmark's `hybrid`: {lat['hybrid_top5_same_as_benchmark_ranker']:.1%} of 100 "
        "queries.",
        "",
        md_table(headers, rows),
    ]


def _usage_lines(result: Mapping[str, Any]) -> list[str]:
    return usage_markdown(result["usage"]).splitlines()


def usage_markdown(usage: Mapping[str, Any]) -> str:
    """The learning curves and the cost of the usage protocol."""
    lines = ["", "### Usage: learning curves", ""]
    headers = ["sessions", "nDCG@5", "recall@5", "Comp@5", "hit@1", "single nDCG@5", "multi nDCG@5"]
    for name, configs in usage["curves"].items():
        for config, curve in configs.items():
            lines += [f"{name}, {config} ({curve['sessions_in_stream']} sessions in all):", ""]
            rows = []
            for point, by in curve["points"].items():
                a = by["all"]
                rows.append(
                    [
                        point,
                        a["ndcg@5"],
                        a["recall@5"],
                        a["comp@5"],
                        a["hit@1"],
                        by.get("single", {}).get("ndcg@5"),
                        by.get("multi", {}).get("ndcg@5"),
                    ]
                )
            lines += [md_table(headers, rows), ""]
    lines += _cost_lines(usage["cost"])
    lines += _intake_lines(usage.get("intake"))
    return "\n".join(lines)


def _intake_lines(intake: Mapping[str, Any] | None) -> list[str]:
    if not intake:
        return []
    reports = intake["reports"]
    rows = [[name, r["p50_ms"], r["p99_ms"]] for name, r in reports.items()]
    return [
        f"### Usage: intake through the library ({intake['tools']:,} tools)",
        "",
        md_table(["one completed session reported", "p50 ms", "p99 ms"], rows),
        "",
        f"With its task input / without, p50: {intake['with_vs_without_p50']}x; "
        f"{intake['sessions_with_task_input']} sessions with a task input left "
        f"{intake['usage_rows']} usage rows; the state: {intake['state_bytes']:,} bytes.",
        "",
    ]


def _cost_lines(cost: Mapping[str, Any]) -> list[str]:
    lines = [f"### Usage: cost over {cost['tools']:,} tools", ""]
    rows = []
    for kind in ("short", "long"):
        c = cost[kind]
        ratios = (c["usage_vs_plain_p50"], c["usage_vs_hybrid_p50"], c["large_vs_small_usage_p50"])
        rows.append([kind, *(s["p50_ms"] for s in c["lookups"].values()), *ratios])
    arms = list(cost["short"]["lookups"])
    headers = [
        "queries",
        *(f"{a} p50 ms" for a in arms),
        f"{arms[2]} / plain",
        f"{arms[2]} / hybrid",
        f"{arms[3]} / {arms[2]}",
    ]
    lines += [md_table(headers, rows), ""]
    held_headers = [
        "sessions",
        "evidence rows",
        "kept requests",
        "tools with usage",
        "memory MB (measured)",
        "SQLite MB, every row",
        "SQLite MB, kept rows",
        "adds/s",
    ]
    held = [
        [
            h["sessions"],
            h["evidence_rows"],
            h["kept_requests"],
            h["tools_with_usage"],
            f"{h['memory_mb']} ({'yes' if h['memory_measured'] else 'no'})",
            h["sqlite_mb_every_row"],
            h["sqlite_mb_kept_rows"],
            h["adds_per_s"],
        ]
        for h in cost["held"].values()
    ]
    return [*lines, md_table(held_headers, held)]


# ---- the plot -------------------------------------------------------------------------
def plot(result: Mapping[str, Any], out_dir: Path) -> list[Path]:
    curves = result.get("usage", {}).get("curves", {})
    if PLOTTED not in curves:
        return []
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric, label in zip(axes, ("ndcg@5", "hit@1"), ("nDCG@5", "hit@1"), strict=True):
        for config, curve in curves[PLOTTED].items():
            xs, ys = _series(curve, metric)
            ax.plot(xs, ys, marker="o", label=config)
        zero = next(iter(curves[PLOTTED].values()))["points"]["0"]["all"][metric]
        ax.axhline(zero, color="grey", linestyle=":", label="zero-shot")
        if metric == "ndcg@5":
            ax.axhline(zero + USAGE_GAIN, color="grey", linestyle="--", label="zero-shot + 10")
        ax.set_xlabel("training sessions learned (a fifth of them abandoned)")
        ax.set_ylabel(f"{label} (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Lookups learning from usage: {PLOTTED} (held-out instructions)")
    return [save_figure(plt, fig, out_dir / "retrieval_usage.png")]


def _series(curve: Mapping[str, Any], metric: str) -> tuple[Sequence[int], Sequence[float]]:
    xs, ys = [], []
    for point, by in curve["points"].items():
        xs.append(curve["sessions_in_stream"] if point == "all" else int(point))
        ys.append(by["all"][metric])
    return xs, ys
