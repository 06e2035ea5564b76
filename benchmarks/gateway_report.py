"""The gateway benchmark's page and plot (:mod:`benchmarks.bench_gateway`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness.results import md_table, md_targets
from benchmarks.harness.timing import ratio


def markdown(result: dict[str, Any]) -> str:
    parts = ["## Targets", "", md_targets(result["targets"]), ""]
    for transport in ("http", "stdio") if "overhead" in result else ():
        parts += _overhead_section(transport, result["overhead"][transport])
    if result.get("schema_tokens"):
        parts += _tokens_section(result["schema_tokens"])
    if result.get("isolation"):
        parts += _isolation_section(result["isolation"])
    if result.get("otlp"):
        parts += _otlp_section(result["otlp"])
    return "\n".join(parts)


def _overhead_section(transport: str, o: dict[str, Any]) -> list[str]:
    rows = [
        [
            name,
            s["p50_ms"],
            s["p99_ms"],
            s["mean_ms"],
            ratio(s["p50_ms"], o["latency"]["direct"]["p50_ms"]),
        ]
        for name, s in o["latency"].items()
    ]
    return [
        f"## tools/call over {transport}",
        "",
        md_table(["path", "p50 ms", "p99 ms", "mean ms", "p50 / direct"], rows),
        "",
    ]


def _tokens_section(tokens: dict[str, Any]) -> list[str]:
    rows = [
        [
            name,
            t["tools"],
            t["all_listing_tokens"],
            t["search_listing_tokens"],
            t["search_answer_tokens_mean"],
            t["listing_saved_share"],
            t["saved_share_with_one_search"],
        ]
        for name, t in tokens.items()
        if isinstance(t, dict)
    ]
    headers = ["catalog", "tools", "expose=all listing", "expose=search listing"]
    saved = ["saved (listing)", "saved (listing + one search)"]
    return [
        f"## Schema tokens ({tokens['tokenizer']})",
        "",
        md_table([*headers, "one search_tools answer (k=5)", *saved], rows),
        "",
    ]


def _isolation_section(iso: dict[str, Any]) -> list[str]:
    quiet = iso["quiet"]

    def loop(row: dict[str, Any]) -> str:
        held = row.get("gateway_loop_busy") or {}
        return f"{held.get('p99_ms', '')} / {held.get('max_ms', '')}"

    rows = [["quiet (A idle)", quiet["n"], quiet["p50_ms"], quiet["p99_ms"], quiet["max_ms"],
             "", "", loop(quiet)]]  # fmt: skip
    for row in iso["flooded"].values():
        pace = row["a_pace_s"]
        label = f"A: one result every {pace:g} s" if pace else "A: back to back"
        rows.append(
            [f"{label} ({row['a_results_received']} results)", row["n"], row["p50_ms"],
             row["p99_ms"], row["max_ms"], row["added_p50_ms"], row["added_p99_ms"],
             loop(row)]
        )  # fmt: skip
    headers = ["phase", "calls", "p50 ms", "p99 ms", "max ms", "added p50", "added p99"]
    return [
        f"## Isolation: session B's calls while session A takes {iso['result_mb']:g} MB results",
        "",
        md_table([*headers, "gateway loop busy, p99 / max ms"], rows),
        "",
    ]


def _otlp_section(otlp: dict[str, Any]) -> list[str]:
    rows = [
        [
            kind,
            otlp[kind]["spans_per_s"],
            otlp[kind]["share"]["decode"],
            otlp[kind]["share"]["assemble"],
            otlp[kind]["share"]["report"],
            f"{otlp[kind]['baseline_parse']}: {otlp[kind]['baseline_parse_spans_per_s']:,}/s",
        ]
        for kind in ("protobuf", "json")
    ]
    return [
        f"## OTLP intake ({otlp['spans']:,} spans per round)",
        "",
        md_table(["encoding", "spans/s", "decode", "assemble", "report", "parse alone"], rows),
        "",
    ]


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    from benchmarks.harness.results import pyplot, save_figure

    plt = pyplot()
    if "overhead" not in result:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, transport in zip(axes, ("http", "stdio"), strict=True):
        latency = result["overhead"][transport]["latency"]
        ax.bar([n.replace("_", "\n") for n in latency], [s["p50_ms"] for s in latency.values()])
        ax.set_ylabel("tools/call p50 ms")
        ax.set_title(f"Gateway over {transport}")
        ax.tick_params(axis="x", labelsize=8)
    return [save_figure(plt, fig, out_dir / "gateway.png")]
