"""What the benchmarks share beyond the harness (:mod:`benchmarks.harness`): the
datasets' folder, the standalone modules' command lines, a sandboxed Sidecar and the
real model.

Nothing heavy is imported here at module level (no numpy, chromadb, torch, matplotlib):
``benchmarks.run`` imports this module to parse its arguments and must stay instant.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness.results import REPO_ROOT, emit

if TYPE_CHECKING:
    from indexes import Embedder
    from sidecar import Sidecar

DEFAULT_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


def quick_main(
    run: Callable[..., dict[str, Any]], doc: str | None, argv: list[str] | None, seeded: bool = True
) -> None:
    """``python -m benchmarks.bench_NAME [--quick] [--seed S] [--out FILE]`` for a benchmark
    whose ``run`` takes ``(quick, seed)`` (or ``(quick)`` when not ``seeded``)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--quick", action="store_true")
    if seeded:
        parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(run(args.quick, args.seed) if seeded else run(args.quick), args.out)


def dataset_main(
    run: Callable[..., dict[str, Any]], doc: str | None, argv: list[str] | None
) -> None:
    """``python -m benchmarks.bench_NAME [--full] [--seed S] [--dataset DIR] [--out FILE]``
    for a benchmark whose ``run`` takes ``(quick, seed, dataset)``; quick by default."""
    import argparse

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--full", action="store_true", help="the full sizes (quick by default)")
    parser.add_argument("--quick", action="store_true", help="the quick sizes (the default)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(run(not args.full, args.seed, args.dataset.resolve()), args.out)


def open_sidecar(home: Path, embedder: Embedder) -> Sidecar:
    """A Sidecar on ``home`` with default settings, whatever ``SIDECAR_*`` variables the
    caller's environment holds (a benchmark must not inherit, say, evict-on-report)."""
    from sidecar import Sidecar
    from sidecar.settings import Settings

    return Sidecar(Settings.load(env={}, home=home), embedder)


def model_embedder(name: str = "onnx", cache: Path | None = None) -> Embedder:
    """The real model as the sidecar runs it: ``onnx``, its default (onnxruntime, fp32
    documents, int8 queries, the ONNX build cached in ``cache``, else where
    ``SIDECAR_MODEL_CACHE`` or the user's cache says), or ``torch``, the reference.  No
    query cache: a benchmark times or counts every query."""
    from indexes import MiniLMEmbedder, OnnxMiniLMEmbedder
    from sidecar.settings import Settings

    if name == "torch":
        return MiniLMEmbedder()
    if name != "onnx":
        raise ValueError(f"embedder must be 'onnx' or 'torch', got {name!r}")
    return OnnxMiniLMEmbedder(cache if cache is not None else Settings.load().model_cache_path)
