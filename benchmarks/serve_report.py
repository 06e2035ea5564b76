"""The serve benchmark's page and plot (:mod:`benchmarks.bench_serve`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.harness.results import md_table, md_targets, pyplot, save_figure
from benchmarks.serve_process import READY_TARGET_S, READY_VARIANTS, VARIANTS


def markdown(result: dict[str, Any]) -> str:
    s = result["setup_s"]
    return "\n".join(
        [
            "## Serving with the default model path against torch",
            "",
            f"ONNX files built into a fresh cache in {s['onnx_files_built']} s; demo home "
            f"(62 tools) in {s['demo_home']} s.",
            "",
            *_ready_section(result["ready"]),
            *_add_section(result["add"], result["params"]["add_catalog"]),
            *_lookup_section(result["lookup"]),
            md_targets(result["targets"]),
            "",
        ]
    )


def _ready_section(r: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"{v} (`SIDECAR_EMBEDDER={r[v]['embedder_setting']}`)",
            r[v]["ready_s"]["median"],
            r[v]["ready_s"]["min"],
            r[v]["ready_s"]["max"],
            r[v]["url_s"]["median"],
            r[v]["first_search_s"]["median"],
            r[v]["first_search_after_ready_ms"]["median"],
            r[v]["not_ready_answers"],
        ]
        for v in READY_VARIANTS
    ]
    headers = ["embedder", "ready median", "min", "max", "URL announced"]
    firsts = ["first search answered", "first search after ready, ms"]
    return [
        f"### Ready time: `sidecar serve --port 0` to the first `/readyz` 200 (s, "
        f"{r['runs']} starts each, alternating)",
        "",
        md_table([*headers, *firsts, "/readyz not-ready answers"], rows),
        "",
        f"onnx / torch: ready {r['onnx_vs_torch_ready']}, first search "
        f"{r['onnx_vs_torch_first_search']}.  Over the hashing floor (no model): onnx "
        f"+{r['model_share_s']['onnx']} s, torch +{r['model_share_s']['torch']} s.",
        "",
    ]


def _add_section(a: dict[str, Any], catalog: str) -> list[str]:
    rows = [
        [
            v,
            a[v]["model_load_s"],
            a[v]["seconds"],
            a[v]["tools_per_s"],
            a[v]["seconds_per_1500_tools"],
            a[v]["cores_used"],
            ", ".join(f"{x:g}" for x in a[v]["chunk_tools_per_s"]),
        ]
        for v in VARIANTS
    ]
    headers = ["embedder", "model load s", "add s", "tools/s", "s per 1,500 tools"]
    return [
        f"### tools add: {a['tools']:,} tools ({catalog}), {a['chunks']} chunks, alternating",
        "",
        md_table([*headers, "cores used", "tools/s per chunk"], rows),
        "",
        f"onnx / torch: tools/s {a['onnx_vs_torch_tools_per_s']} (chunk by chunk, median "
        f"{a['onnx_vs_torch_tools_per_s_paired_median']}), time "
        f"{a['onnx_vs_torch_seconds']}; {a['document_tokens_mean']} tokens per document "
        "on average.  Cores used: CPU seconds of this process, every thread, per second.",
        "",
    ]


def _lookup_section(lk: dict[str, Any]) -> list[str]:
    names = ("library_new", "http_new", "library_repeated", "http_repeated", "livez")
    rows = [[n, lk[n]["p50_ms"], lk[n]["p99_ms"], lk[n]["mean_ms"]] for n in names]
    budget_rows = [
        [
            kind,
            lk[kind]["library_p50_ms"],
            lk[kind]["http_p50_ms"],
            lk[kind]["server_app_p50_ms"] if lk[kind]["server_app_p50_ms"] is not None else "-",
            lk[kind]["http_minus_library_ms"],
            lk[kind]["http_minus_library_in_livez"],
            lk[kind]["budget_ms"],
            "met" if lk[kind]["met"] else "**missed**",
        ]
        for kind in ("new", "repeated")
    ]
    budget = ["query text", "library p50", "HTTP p50", "server app p50", "HTTP - library"]
    cache = lk["library_query_cache_during_timing"]
    return [
        f"### Lookup at {lk['tools']:,} tools, {lk['constraints']} active constraints, "
        f"k = {lk['k']} (ms, {lk['rounds']} rounds)",
        "",
        md_table(["path", "p50", "p99", "mean"], rows),
        "",
        md_table([*budget, "in livez p50s", "budget", "verdict"], budget_rows),
        "",
        (
            f"`/livez` inside the server's app: p50 {lk['server_app']['livez']['p50_ms']} ms "
            "(server app: the server's request log, from the request reaching the app to "
            "its response leaving it)."
            if lk["server_app"]
            else "The server's request log did not line up with the requests."
        ),
        "",
        *_blas_lines(lk),
        f"Library and server agree on the hits: {lk['library_and_http_agree']}; "
        f"{lk['withheld_per_lookup']} withheld per lookup, {lk['blocked_tools_in_hits']} "
        f"blocked tools among hits; the library's query cache during the timing: "
        f"{cache['hits']} hits, {cache['misses']} misses.",
        "",
    ]


def _blas_lines(lk: Mapping[str, Any]) -> list[str]:
    one = lk.get("blas_one_thread")
    if not one:
        return []
    rows = [
        [
            kind,
            lk[kind]["library_p50_ms"],
            one[kind]["library_p50_ms"],
            lk[kind]["http_p50_ms"],
            one[kind]["http_p50_ms"],
            lk[kind]["server_app_p50_ms"] if lk[kind]["server_app_p50_ms"] is not None else "-",
            one[kind]["server_app_p50_ms"] if one[kind]["server_app_p50_ms"] is not None else "-",
            "met" if one[kind]["met"] else "**missed**",
        ]
        for kind in ("new", "repeated")
    ]
    rows.append(["livez", "", "", lk["livez"]["p50_ms"], one["livez"]["p50_ms"], "", "", ""])
    return [
        "Diagnostic, run after the main round robin: numpy's BLAS on one thread in both "
        "processes (`threadpoolctl` here, `OPENBLAS_NUM_THREADS=1` for the server), new "
        "texts, a new server; p50 ms:",
        "",
        md_table(
            [
                "query text",
                "library, default",
                "library, BLAS 1",
                "HTTP, default",
                "HTTP, BLAS 1",
                "server app, default",
                "server app, BLAS 1",
                "budget, BLAS 1",
            ],
            rows,
        ),
        "",
    ]


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    r, a, lk = result["ready"], result["add"], result["lookup"]
    ax = axes[0]
    ax.bar(list(READY_VARIANTS), [r[v]["ready_s"]["median"] for v in READY_VARIANTS])
    ax.axhline(READY_TARGET_S, color="grey", linestyle="--", label="target (onnx)")
    ax.set_ylabel("s, start to /readyz 200 (median)")
    ax.set_title("Server ready")
    ax.legend(loc="upper left")
    ax = axes[1]
    ax.bar(list(VARIANTS), [a[v]["tools_per_s"] for v in VARIANTS])
    ax.set_ylabel("tools / s")
    ax.set_title(f"tools add ({a['tools']:,} tools)")
    ax = axes[2]
    names = ("library_new", "http_new", "library_repeated", "http_repeated", "livez")
    ax.bar(
        [n.replace("_", "\n") for n in names],
        [lk[n]["p50_ms"] for n in names],
    )
    ax.set_ylabel("p50 ms")
    ax.set_title(f"Lookup, {lk['tools']:,} tools")
    ax.tick_params(axis="x", labelsize=8)
    return [save_figure(plt, fig, out_dir / "serve.png")]
