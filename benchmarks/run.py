"""The benchmark suite: ``python -m benchmarks.run NAME [--quick | --full] [--out-dir DIR]
[--json]`` with NAME one of pollution, failures, lookup, embed, serve, gateway, retrieval,
check, evict, store, delta, startup, state, otlp, shared, fleet, bounds, console, soak,
stated, all.

Each benchmark writes ``NAME.json``, a Markdown table ``NAME.md`` and PNG plot(s) into
the output folder (``benchmarks/results/`` by default, git-ignored); ``all`` runs every
one and adds ``all.json`` / ``all.md`` with every target's verdict.  ``--quick`` (the
default, what ``make bench`` runs) uses small sizes, ``--full`` the sizes of
``BENCHMARKS.md``.  Every speed figure is a ratio against a baseline measured in the
same run.

Importing this module is instant: each benchmark module, and everything heavy it needs
(numpy, Chroma, the model, pyarrow, matplotlib), is imported only when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_DATASETS
from benchmarks.harness.progress import progress, steps
from benchmarks.harness.results import (
    DEFAULT_OUT_DIR,
    machine,
    page,
    revision,
    summary_page,
    write_json,
)

MODULES = {
    "pollution": "benchmarks.bench_pollution",
    "lookup": "benchmarks.bench_lookup",
    "check": "benchmarks.bench_check",
    "evict": "benchmarks.bench_evict",
    "store": "benchmarks.bench_store",
    "delta": "benchmarks.bench_delta",
    "startup": "benchmarks.bench_startup",
    "failures": "benchmarks.bench_failures",
    "embed": "benchmarks.bench_embed",
    "serve": "benchmarks.bench_serve",
    "gateway": "benchmarks.bench_gateway",
    "state": "benchmarks.bench_state",
    "retrieval": "benchmarks.bench_retrieval",
    "otlp": "benchmarks.bench_otlp",
    "shared": "benchmarks.bench_shared",
    "fleet": "benchmarks.bench_fleet",
    "bounds": "benchmarks.bench_bounds",
    "console": "benchmarks.bench_console",
    "soak": "benchmarks.bench_soak",
    "stated": "benchmarks.stated_cost",
}
ALL_ORDER = (
    "startup",
    "check",
    "state",
    "failures",
    "stated",
    "store",
    "delta",
    "lookup",
    "evict",
    "embed",
    "serve",
    "gateway",
    "retrieval",
    "otlp",
    "bounds",
    "console",
    "shared",
    "fleet",
    "pollution",
    "soak",
)
DATASET_BENCHMARKS = ("pollution", "failures", "embed", "serve", "gateway", "retrieval")
"""Fast ones first: a broken environment shows up in seconds, not after the model."""

HELPS = {
    "pollution": "retrieval pollution on ToolBench trajectories and Seal-Tools (real model)",
    "lookup": "constrained lookup vs raw Chroma, Chroma $nin and exact numpy",
    "check": "compiled plan check vs the seed's linear scan, 1k to 1M chains",
    "evict": "batch eviction time as the archive grows",
    "store": "cold archive append throughput and pointer resolution",
    "delta": "Delta cold store (local, S3 on moto) vs the local Parquet table to 100k chains",
    "startup": "sidecar --help start-up time and lookup-process memory",
    "failures": "repeat failures caught before the call (folds, and runs arriving one by "
    "one): τ² runs, BFCL simulators, API-Bank dialogues",
    "embed": "ONNX query embedding, query cache and exact tier vs torch and raw Chroma",
    "serve": "server ready, tools add and HTTP vs library lookup: ONNX default vs torch",
    "gateway": "MCP gateway overhead, schema tokens saved by --expose search, OTLP intake",
    "state": "the state on PostgreSQL vs SQLite, and the cost of its write lock",
    "retrieval": "absolute lookup quality (nDCG, recall, Comp@5) on StableToolBench, "
    "Seal-Tools, ToolBench: hybrid vs MiniLM and BM25; abstention; end-to-end cost",
    "otlp": "OTLP intake isolation: a small exporter's latency beside a large one",
    "shared": "several sidecars on one memory (PostgreSQL, Chroma server, Delta on S3) "
    "vs one embedded: lookup, intake by replicas, staleness, moves",
    "fleet": "a fleet of simulated agents against one embedded sidecar and 1-3 shared "
    "replicas: offered vs achieved load, where it saturates and why",
    "bounds": "one agent token's steps on tools in no catalog against a running server: "
    "what the server and its state grow by, and ordinary reports after vs before",
    "console": "every page of the operator's console at 10,000 rules and 100,000 sessions "
    "(--full) against a near-empty home",
    "soak": "a server and a gateway under steady mixed traffic for an hour (--full) or "
    "four minutes: RSS and the home's size each minute",
    "stated": "the failure memory's search over the numbers a refusal states: cost per "
    "failure at worst-case sizes, and whether its work budget bounds it",
    "all": "every benchmark, fastest first",
}
"""What each benchmark answers: its help and its description."""


def build_parser() -> argparse.ArgumentParser:
    common, data = _common_options(), _data_options()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Run the sidecar's benchmarks (see BENCHMARKS.md).",
    )
    sub = parser.add_subparsers(dest="name", required=True, metavar="NAME")
    for name, text in HELPS.items():
        parents = [common, data] if name in (*DATASET_BENCHMARKS, "all") else [common]
        one = sub.add_parser(name, parents=parents, help=text, description=text)
        if name in ("failures", "all"):
            _domain_options(one)
        if name == "soak":
            one.add_argument(
                "--minutes", type=float, default=None, help="how long (default 4, --full 65)"
            )
        if name == "delta":
            mode = one.add_mutually_exclusive_group()
            mode.add_argument(
                "--commits",
                dest="delta_mode",
                action="store_const",
                const="commits",
                help="the cost of one append as the rows per commit grow, folder vs S3",
            )
            mode.add_argument(
                "--stress",
                dest="delta_mode",
                action="store_const",
                const="stress",
                help="many writers on S3 with faults injected at every step of a commit",
            )
    return parser


def _common_options() -> argparse.ArgumentParser:
    """What every benchmark takes: its size, where it writes, its seed."""
    common = argparse.ArgumentParser(add_help=False)
    size = common.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        dest="quick",
        action="store_true",
        default=True,
        help="small sizes (the default; what `make bench` runs)",
    )
    size.add_argument("--full", dest="quick", action="store_false", help="the full sizes")
    common.add_argument(
        "--out-dir",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help=f"where NAME.json, NAME.md and the plots go (default: {DEFAULT_OUT_DIR})",
    )
    common.add_argument("--json", action="store_true", help="print the JSON result")
    common.add_argument("--seed", type=int, default=7, help="seed of every random choice")
    return common


def _data_options() -> argparse.ArgumentParser:
    """What the benchmarks that read datasets take."""
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument(
        "--dataset",
        type=Path,
        default=DEFAULT_DATASETS,
        help=f"the datasets folder (default: {DEFAULT_DATASETS})",
    )
    data.add_argument("--k", type=int, default=5, help="lookups return the top k (default 5)")
    data.add_argument(
        "--seeds",
        type=int,
        help="pollution, failures: protocol seeds from --seed on (default 1 quick, 5 full)",
    )
    data.add_argument(
        "--embedder",
        choices=("onnx", "torch"),
        default="onnx",
        help="pollution: the sidecar's default model path (onnx) or the reference (torch)",
    )
    return data


def _domain_options(parser: argparse.ArgumentParser) -> None:
    """failures: ``--domains`` and the bfcl domain's size (without importing the
    benchmark: the names are repeated here and checked by ``parse_domains``)."""
    parser.add_argument(
        "--domains",
        default=None,
        help="failures: comma-separated, of retail,telecom,bfcl,apibank,booking (default: all; "
        "'retail' to choose defaults on retail alone)",
    )
    parser.add_argument(
        "--bfcl-runs", type=int, default=None, help="failures: bfcl mutation runs per scenario"
    )
    parser.add_argument(
        "--bfcl-seed", type=int, default=0, help="failures: bfcl, apibank and booking mutation seed"
    )
    parser.add_argument(
        "--apibank-runs",
        type=int,
        default=None,
        help="failures: apibank mutation runs per dialogue",
    )
    parser.add_argument(
        "--prequential",
        choices=("sidecar", "call_memory", "none"),
        default=None,
        help="failures: runs arriving one by one through the library (the default of --full), "
        "the memory alone (the default of --quick: ten times faster), or not replayed",
    )


def run_one(name: str, args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    module = importlib.import_module(MODULES[name])
    options: dict[str, Any] = {"seed": args.seed}
    if name == "pollution":
        options |= {
            "dataset": args.dataset.resolve(),
            "k": args.k,
            "seeds": args.seeds,
            "embedder_name": args.embedder,
        }
    elif name == "failures":
        options |= {
            "dataset": args.dataset.resolve(),
            "seeds": args.seeds,
            "domains": args.domains,
            "bfcl_runs": args.bfcl_runs,
            "bfcl_seed": args.bfcl_seed,
            "apibank_runs": args.apibank_runs,
            "prequential": args.prequential,
        }
    elif name == "delta" and getattr(args, "delta_mode", None):
        options |= {"mode": args.delta_mode}
    elif name == "soak":
        options |= {"minutes": getattr(args, "minutes", None)}
    elif name in ("embed", "serve", "gateway", "retrieval"):
        options |= {"dataset": args.dataset.resolve()}
    progress(f"{name} ({'quick' if args.quick else 'full'}) starting")
    library = revision()
    load_before = os.getloadavg()
    started = time.perf_counter()
    result: dict[str, Any] = module.run(args.quick, **options)
    result["mode"] = "quick" if args.quick else "full"
    result["library_revision"] = library
    # other work on the machine shows here: a 1-minute load above the core count
    # while a benchmark ran means its timings were contended
    result["load_average_1m"] = {
        "before": round(load_before[0], 2),
        "after": round(os.getloadavg()[0], 2),
    }
    result["command"] = " ".join(["python -m benchmarks.run", *argv])
    result["generated_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(module, result, out)
    result["plots"] = [p.name for p in plots]
    write_json(result, out / f"{name}.json")
    (out / f"{name}.md").write_text(page(name, result, module.markdown(result)))
    progress(f"{name} done in {result['elapsed_s']} s -> {out / (name + '.json')}")
    return result


def _plots(module: Any, result: dict[str, Any], out: Path) -> list[Path]:
    try:
        plots: list[Path] = module.plot(result, out)
    except ImportError as exc:  # matplotlib is in the `bench` extra
        progress(f"no plot ({exc}); install matplotlib for PNG plots")
        return []
    return plots


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    names = ALL_ORDER if args.name == "all" else (args.name,)
    if any(n in DATASET_BENCHMARKS for n in names) and not _inputs_present(args, names):
        return 2
    started = time.perf_counter()
    results = {name: run_one(name, args, argv) for name in steps("benchmarks", names)}
    if args.name == "all":
        combined = {
            "benchmark": "all",
            "mode": "quick" if args.quick else "full",
            "command": " ".join(["python -m benchmarks.run", *argv]),
            "library_revision": revision(),
            "machine": machine(),
            "elapsed_s": round(time.perf_counter() - started, 1),
            "targets": [t for r in results.values() for t in r.get("targets", [])],
            "benchmarks": results,
        }
        write_json(combined, args.out_dir / "all.json")
        (args.out_dir / "all.md").write_text(summary_page(combined))
        shown: dict[str, Any] = combined
    else:
        shown = results[args.name]
    if args.json:
        print(json.dumps(shown, indent=2))
    else:
        module = importlib.import_module(MODULES[args.name]) if args.name != "all" else None
        print(module.markdown(shown) if module else summary_page(shown))
    return 0


def _inputs_present(args: argparse.Namespace, names: Sequence[str]) -> bool:
    """Whether the datasets and packages the chosen benchmarks read are there; when not,
    what is missing is said on stderr.  Checked before anything runs: ``all`` would
    otherwise fail minutes in."""
    from benchmarks.datasets import missing_files
    from benchmarks.failure_domains import missing, parse_domains, uninstalled
    from benchmarks.retrieval_data import missing_files as missing_retrieval

    try:
        domains = parse_domains(args.domains) if "failures" in names else ()
    except ValueError as exc:
        print(f"benchmarks: --domains: {exc}", file=sys.stderr)
        return False
    lost = [
        *(
            missing_files(args.dataset.resolve())
            if {"pollution", "embed", "serve", "gateway"} & set(names)
            else []
        ),
        *missing(args.dataset.resolve(), domains),
        *(missing_retrieval(args.dataset.resolve()) if "retrieval" in names else []),
    ]
    packages = uninstalled(domains)
    for package in packages:
        # `make bench` and `make test` install it; `make run` does not
        print(
            f"benchmarks: failures: {package}; or leave its domain out (--domains "
            "retail,telecom,apibank,booking)",
            file=sys.stderr,
        )
    if lost:
        print(
            f"benchmarks: the datasets are not under {args.dataset.resolve()} (missing: "
            f"{', '.join(lost)}); pass --dataset DIR",
            file=sys.stderr,
        )
    return not (lost or packages)


if __name__ == "__main__":
    raise SystemExit(main())
