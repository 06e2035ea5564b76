"""The embed benchmark's page and plot (:mod:`benchmarks.bench_embed`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.embed_setup import (
    K,
)
from benchmarks.harness.results import md_table, md_targets, pyplot, save_figure


def markdown(result: dict[str, Any]) -> str:
    s, b = result["startup"], result["build"]
    return "\n".join(
        [
            "## Query embedding, lookup, quality and the exact tier",
            "",
            f"ONNX files built from the packaged weights: fp32 {b['fp32_build_s']} s "
            f"({b['fp32_mib']} MiB), int8 {b['int8_build_s']} s ({b['int8_mib']} MiB).",
            "",
            *_embedding_section(result["embedding"]),
            *_lookup_section(result["lookup"]),
            *_quality_section(result["quality"]),
            *_crossover_section(result["crossover"], result["crossover_size"]),
            "### Start-up: fresh process to its first query vector (ms, median)",
            "",
            md_table(
                ["process", "median ms", "min ms"],
                [[name, s["median_ms"][name], s["min_ms"][name]] for name in s["median_ms"]],
            ),
            "",
            f"ONNX / torch: {s['onnx_vs_torch']}.  Heavy modules imported by "
            f"`sidecar --help`: {', '.join(s['sidecar_help_imports']) or 'none'}.",
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def _embedding_section(e: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"{length} (~{e['tokens'][length]} tokens)",
            e[length]["torch"]["p50_ms"],
            e[length]["torch"]["p99_ms"],
            e[length]["onnx_fp32"]["p50_ms"],
            e[length]["onnx_fp32"]["p99_ms"],
            e[length]["onnx_int8"]["p50_ms"],
            e[length]["onnx_int8"]["p99_ms"],
            e[length]["onnx_fp32_vs_torch_p50"],
            e[length]["onnx_int8_vs_torch_p50"],
        ]
        for length in ("short", "long")
    ]
    headers = ["query", "torch p50", "torch p99", "fp32 p50", "fp32 p99", "int8 p50"]
    return [
        "### Query embedding (ms)",
        "",
        md_table([*headers, "int8 p99", "fp32 / torch", "int8 / torch"], rows),
        "",
    ]


def _lookup_section(lk: dict[str, Any]) -> list[str]:
    names = ("raw_chroma", "text_exact", "text_chroma", "text_repeated_cached")
    rows = [
        [
            name,
            lk[name]["p50_ms"],
            lk[name]["p99_ms"],
            1.0 if name == "raw_chroma" else lk["ratio_vs_raw_chroma_p50"][name],
        ]
        for name in (*names, "vector_exact", "embed_int8")
    ]
    torch_group = lk["raw_chroma_torch_group"]
    today = lk["text_torch_chroma"]
    rows += [
        ["raw_chroma (torch group)", torch_group["p50_ms"], torch_group["p99_ms"], 1.0],
        [
            "text_torch_chroma (today)",
            today["p50_ms"],
            today["p99_ms"],
            lk["text_torch_chroma_vs_raw_chroma_p50"],
        ],
    ]
    return [
        f"### Lookup at {lk['tools']:,} tools, k = {K} (ms)",
        "",
        md_table(["path", "p50", "p99", "p50 / raw Chroma"], rows),
        "",
        f"First lookup (loads the exact tier and the hit fields): "
        f"{lk['first_exact_lookup_ms']} ms.  Top-10 agreement of the exact tier with "
        f"Chroma on these queries: {lk['exact_vs_chroma_top10_agreement']}.",
        "",
    ]


def _quality_section(quality: dict[str, Any]) -> list[str]:
    agreement = [
        [name, config, r["top5_agreement"][config], r["top1_agreement"][config]]
        for name, r in quality.items()
        for config in r["top5_agreement"]
    ]
    cosines = [
        [name, config, c["mean"], c["min"]]
        for name, r in quality.items()
        for config, c in r["query_cosine_to_torch"].items()
    ]
    return [
        "### Retrieval quality against the torch reference",
        "",
        md_table(["catalog", "configuration", "top-5 agreement", "top-1 agreement"], agreement),
        "",
        md_table(["catalog", "query vectors", "cosine mean", "cosine min"], cosines),
        "",
    ]


def _crossover_section(crossover: dict[str, Any], size: int | None) -> list[str]:
    rows = [
        [
            int(n),
            r["raw_chroma"]["p50_ms"],
            r["chroma"]["p50_ms"],
            r["exact"]["p50_ms"],
            r["exact_vs_chroma_p50"],
            r["matrix_top_only"]["p50_ms"],
            r["recall_at_10"]["exact"],
            r["recall_at_10"]["chroma"],
            r["tier_load_ms_median"],
            r["matrix_mib"],
        ]
        for n, r in crossover.items()
    ]
    headers = ["tools", "raw Chroma p50", "Chroma via index p50", "exact p50", "exact / Chroma"]
    recall = ["matrix top-k only p50", "exact recall@10", "Chroma recall@10"]
    return [
        "### Exact tier against Chroma (synthetic clustered vectors)",
        "",
        md_table([*headers, *recall, "tier load ms", "matrix MiB"], rows),
        "",
        f"The exact tier is faster up to {size:,} tools (largest size measured where it wins)."
        if size
        else "The exact tier is faster at none of the measured sizes.",
        "",
    ]


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = [int(n) for n in result["crossover"]]
    for key, label in (("exact", "exact tier"), ("chroma", "Chroma"), ("raw_chroma", "raw Chroma")):
        p50 = [result["crossover"][str(n)][key]["p50_ms"] for n in sizes]
        ax.plot(sizes, p50, "o-", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.set_xlabel("tools in the index")
    ax.set_ylabel("lookup p50 ms (vector in, k = 10)")
    ax.set_title("Exact in-process ranking against Chroma")
    ax.legend()
    return [save_figure(plt, fig, out_dir / "embed.png")]
