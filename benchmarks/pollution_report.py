"""The pollution benchmark's page and plot (:mod:`benchmarks.bench_pollution`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness.results import (
    md_table,
    md_targets,
    pyplot,
    save_figure,
)

SYSTEMS = ("plain", "seed_check", "sidecar")
"""The systems compared: no memory, the seed's check, the sidecar."""
ABLATIONS = ("constraints_only", "evict_3chains", "evict_1chain")

# ---- output ------------------------------------------------------------------------------
HEADLINE = (
    "reassembly_rate",
    "doomed_prefix_calls",
    "fatal_exposure",
    "dead_prefix_exposure",
    "viable_recall_at_k",
    "context_tokens_per_lookup",
)


def markdown(result: dict[str, Any]) -> str:
    parts = ["## Retrieval pollution", ""]
    for label, block in (
        ("ToolBench (real trajectories)", result["toolbench"]),
        ("Seal-Tools (scale, synthetic abandonment)", result["scale"]["seal_tools"]),
    ):
        parts += _dataset_section(label, block, result["params"]["k"])
    if len(result["params"]["seeds"]) > 1:
        parts += [
            f"### Across seeds {', '.join(map(str, result['params']['seeds']))} (min / mean / max)",
            "",
        ]
        for name, spread in result["across_seeds"].items():
            rows = [
                [name, s]
                + [
                    f"{spread[s][m]['min']} / {spread[s][m]['mean']} / {spread[s][m]['max']}"
                    for m in (*HEADLINE[:3], "viable_recall_vs_plain")
                ]
                for s in (*SYSTEMS, *ABLATIONS)
            ]
            parts += [
                md_table(["dataset", "system", *HEADLINE[:3], "viable recall / plain"], rows),
                "",
            ]
    parts += ["### Targets", "", md_targets(result["targets"]), ""]
    return "\n".join(parts)


def _dataset_section(label: str, block: dict[str, Any], k: int) -> list[str]:
    systems = block["systems"] | block["ablations"]
    rows = [
        [s if s in SYSTEMS else f"{s} (ablation)"]
        + [systems[s][m] for m in HEADLINE]
        + [
            systems[s]["reassembly"]["reassembled"],
            systems[s]["reassembly"]["successors"],
            systems[s]["collateral"]["viable_plans_blocked"],
            f"{systems[s]['heldout_reassembly']['reassembled']}"
            f"/{systems[s]['heldout_reassembly']['successors']}",
        ]
        for s in (*SYSTEMS, *ABLATIONS)
    ]
    ev = block["eviction"]
    counts = ["re-assembled", "successors", "viable plans blocked", "held-out re-assembled"]
    return [
        f"### {label}",
        "",
        f"{block['catalog_tools']:,} tools, {block['tasks']:,} tasks; "
        f"{block['archived_chains']} chains archived from the history half, "
        f"{ev['evicted_tools']} tools evicted, {ev['kept_with_constraint']} kept with a "
        f"constraint ({ev['reclaimed_schema_tokens']} schema tokens reclaimed); "
        f"`evict_3chains` evicted {ev['evict_3chains_evicted_tools']} "
        f"({ev['evict_3chains_reclaimed_schema_tokens']} tokens), `evict_1chain` "
        f"{ev['evict_1chain_evicted_tools']} ({ev['evict_1chain_reclaimed_schema_tokens']} "
        "tokens).",
        "",
        md_table(["system", *HEADLINE, *counts], rows),
        "",
        _notes(systems, block.get("hnsw_rebuild"), k),
        "",
    ]


def _notes(systems: dict[str, Any], rebuild: dict[str, Any] | None, k: int) -> str:
    seed_r = systems["seed_check"]["reassembly"]
    side_all = systems["sidecar"]["all_lookups"]
    notes = (
        f"The seed's check blocked {seed_r['plans_blocked']} of {seed_r['successors']} "
        f"successor plans ({seed_r['plans_blocked_without_fatal_sequence']} of them held "
        f"no fatal sequence) and {systems['seed_check']['collateral']['viable_plans_blocked']}"
        f" of {systems['seed_check']['collateral']['viable_plans']} viable plans; the "
        f"sidecar withheld {side_all['withheld_per_lookup']} tools per lookup and added "
        f"{side_all['warning_tokens_per_lookup']} warning tokens per lookup to "
        f"{side_all['schema_tokens_per_lookup']} schema tokens (plain: "
        f"{systems['plain']['all_lookups']['schema_tokens_per_lookup']})."
    )
    if rebuild:
        notes += (
            f" A second build of the same catalog with the same vectors answered "
            f"{rebuild['pages_that_differ']} of {rebuild['queries']} plain top-{k}"
            " pages differently (Chroma's HNSW build is not deterministic), hence one "
            "shared index for every system."
        )
    return notes


METRIC_LABELS = (
    "re-assembly\nrate",
    "fatal\nexposure",
    "dead-prefix\nexposure",
    "viable\nrecall@k",
)


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    blocks = [("ToolBench", result["toolbench"]), ("Seal-Tools", result["scale"]["seal_tools"])]
    metrics = ("reassembly_rate", "fatal_exposure", "dead_prefix_exposure", "viable_recall_at_k")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    width = 0.26
    for ax, (title, block) in zip(axes[:2], blocks, strict=True):
        for i, s in enumerate(SYSTEMS):
            values = [block["systems"][s][m] or 0 for m in metrics]
            xs = [j + (i - 1) * width for j in range(len(metrics))]
            ax.bar(xs, values, width, label=s)
        ax.set_xticks(range(len(metrics)), METRIC_LABELS, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{title} (k={result['params']['k']})")
        ax.legend(fontsize=8)
    ax = axes[2]
    for i, s in enumerate(SYSTEMS):
        values = [b["systems"][s]["context_tokens_per_lookup"] for _, b in blocks]
        ax.bar([j + (i - 1) * width for j in range(len(blocks))], values, width, label=s)
    ax.set_xticks(range(len(blocks)), [t for t, _ in blocks])
    ax.set_ylabel("schema + warning tokens per lookup")
    ax.set_title("context handed to the agent")
    ax.legend(fontsize=8)
    return [save_figure(plt, fig, out_dir / "pollution.png")]


SYSTEMS = ("plain", "seed_check", "sidecar")


ABLATIONS = ("constraints_only", "evict_3chains", "evict_1chain")
"""``constraints_only``: the sidecar's archive and constraint-aware lookup without the
eviction, to tell what the eviction costs from what the constraints cost.
``evict_3chains`` and ``evict_1chain``: the stricter and the looser policy,
``evict(min_chains=3)`` and ``evict(min_chains=1)``, around the default of 2 (1 was the
library's default before these measurements)."""
