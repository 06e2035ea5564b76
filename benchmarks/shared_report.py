"""The shared benchmark's page and plot (:mod:`benchmarks.bench_shared`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness.results import md_table, md_targets, pyplot, save_figure


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Shared cold store: {result['shared_cold']}.",
        *_lookup_section(result["lookup"]),
        *_intake_section(result),
        *_staleness_section(result["staleness"]),
        *_move_section(result["move"]),
    ]
    if result.get("delta"):
        from benchmarks.bench_delta import markdown as delta_markdown

        lines += ["## 5. Delta append and compaction (benchmarks/bench_delta.py)", ""]
        # bench_delta's page without its heading and its (here empty) target table
        page = delta_markdown(result["delta"]).replace("## Delta cold store\n", "")
        lines += [page.split("| target |")[0].rstrip(), ""]
    lines += [md_targets(result["targets"]), ""]
    return "\n".join(lines)


def _lookup_section(look: dict[str, Any]) -> list[str]:
    rows = [
        [
            op,
            v["embedded"]["p50_ms"],
            v["embedded"]["p99_ms"],
            v["shared"]["p50_ms"],
            v["shared"]["p99_ms"],
            v["p50_ratio"],
            v["p99_ratio"],
            v["shared_cached"]["p50_ms"],
            v["shared_cached"]["p99_ms"],
            v["cached_p50_ratio"],
            v["shared_leased"]["p50_ms"],
            v["shared_leased"]["p99_ms"],
            v["leased_p50_ratio"],
        ]
        for op, v in look["ops"].items()
    ]
    headers = [
        "op",
        "embedded p50 ms",
        "p99",
        "shared p50 ms",
        "p99",
        "p50 ratio",
        "p99 ratio",
        f"cached ({look['revision_cache_ms']:g} ms) p50 ms",
        "p99",
        "p50 ratio",
        "leased p50 ms",
        "p99",
        "p50 ratio",
    ]
    return [
        "",
        f"## 1. Lookup and check ({look['tools']:,} tools, {look['constraints']:,} fatal "
        f"continuations, embedder {look['embedder']}; same answers in both modes: "
        f"{look['same_answers']})",
        "",
        md_table(headers, rows),
    ]


def _intake_section(result: dict[str, Any]) -> list[str]:
    intake = result["intake"]
    rows = [
        [
            "embedded" if label == "embedded" else f"shared, {run['replicas']}",
            run["cold"],
            run["sessions"],
            run["wall_s"],
            run["sessions_per_s"],
            run["vs_one_shared_replica"],
            ", ".join(f"{k} {v}" for k, v in run["statuses"].items()),
            len(run["errors"]),
        ]
        for label, run in intake["runs"].items()
    ]
    headers = ["servers", "cold", "sessions", "wall s", "sessions/s", "vs 1 shared (S3)"]
    breakdown = [
        [b["backends"], b["n"], b["p50_ms"], b["p99_ms"], b["p50_vs_embedded"]]
        for b in result["intake_breakdown"].values()
    ]
    return [
        "",
        f"## 2. Intake ({intake['clients']} clients in parallel, "
        f"{intake['sessions_per_client']} sessions each, one per request, "
        f"{intake['rounds']} round(s))",
        "",
        md_table([*headers, "statuses", "errors"], rows),
        "",
        "One session reported at a time in this process, one backend changed at a time "
        "(one round robin):",
        "",
        md_table(["backends", "n", "report p50 ms", "p99 ms", "p50 vs embedded"], breakdown),
    ]


def _staleness_section(staleness: dict[str, Any]) -> list[str]:
    rows = [
        [
            label,
            {"evict": "tool evicted on A", "report": "failure reported on A"}[kind],
            {"other": "B (the other replica)", "same": "A itself (floor)"}[where],
            s["n"],
            s["p50_ms"],
            s["p99_ms"],
            s["max_ms"],
            s["stale_answers"],
            s["never"],
        ]
        for label, stale in (
            ("every request", staleness.get("uncached", staleness)),
            ("cached", staleness.get("cached")),
            ("leased", staleness.get("leased")),
        )
        if stale is not None
        for kind in ("evict", "report")
        for where, s in stale[kind].items()
    ]
    headers = ["revisions", "write", "watched on", "n", "p50 ms", "p99 ms", "max ms"]
    return [
        "",
        f"## 3. Staleness ({staleness['trials']} trials of each write, watchers "
        "alternating; the revisions read on every request, cached, or leased)",
        "",
        md_table([*headers, "stale answers", "never"], rows),
    ]


def _move_section(move: dict[str, Any]) -> list[str]:
    return [
        "",
        f"## 4. One-tool move ({move['trials']} each)",
        "",
        md_table(
            ["mode", "p50 ms", "p99 ms"],
            [[m, move[m]["p50_ms"], move[m]["p99_ms"]] for m in ("embedded", "shared")],
        ),
        "",
        f"Shared / embedded p50: {move['p50_ratio']}x.",
        "",
    ]


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    runs = result["intake"]["runs"]
    xs = sorted(int(k) for k in runs if k.isdigit())
    left.plot(xs, [runs[str(n)]["sessions_per_s"] for n in xs], "o-", label="shared replicas")
    left.axhline(runs["embedded"]["sessions_per_s"], linestyle="--", label="one embedded server")
    left.set_xticks(xs)
    left.set_xlabel("replica processes")
    left.set_ylabel("sessions / s (all clients)")
    left.set_title("intake throughput")
    left.legend()
    ops = list(result["lookup"]["ops"])
    width = 0.38
    for shift, mode in ((-width / 2, "embedded"), (width / 2, "shared")):
        right.bar(
            [i + shift for i in range(len(ops))],
            [result["lookup"]["ops"][op][mode]["p50_ms"] for op in ops],
            width,
            label=mode,
        )
    right.set_xticks(range(len(ops)))
    right.set_xticklabels(ops)
    right.set_ylabel("p50 ms")
    right.set_title("lookup and check")
    right.legend()
    return [save_figure(plt, fig, out_dir / "shared.png")]
