"""Package boundaries: sidecar -> {indexes, cold_store}; those two never import sidecar
or each other; chromadb and the model runtimes (torch, sentence-transformers,
transformers, tokenizers, onnxruntime, onnx, safetensors) only in indexes, pyarrow and
deltalake only in cold_store, BM25 (bm25s, PyStemmer) only in indexes; the library never
imports its benchmarks or tests, and no benchmark imports a test."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL_RUNTIME = {
    "sentence_transformers",
    "torch",
    "transformers",
    "tokenizers",
    "onnxruntime",
    "onnx",
    "safetensors",
}
FORBIDDEN = {
    "indexes": {"sidecar", "cold_store", "pyarrow", "deltalake"},
    "cold_store": {"sidecar", "indexes", "chromadb", "bm25s", "Stemmer", *MODEL_RUNTIME},
    "sidecar": {
        "chromadb",
        "pyarrow",
        "deltalake",
        "benchmarks",
        "tests",
        "bm25s",
        "Stemmer",
        *MODEL_RUNTIME,
    },
    # tests may start what the benchmarks start (an S3 server, the Delta stress writers),
    # never the other way round
    "benchmarks": {"tests"},
}


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once per run (each check reads every file)."""
    return ast.parse(path.read_text(), str(path))


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_direction(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    offenders = {
        str(f.relative_to(ROOT)): sorted(imported_roots(f) & FORBIDDEN[package]) for f in files
    }
    assert {f: bad for f, bad in offenders.items() if bad} == {}


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize(("way_in", "other"), [("gateway", "otlp"), ("otlp", "gateway")])
def test_the_agents_ways_in_share_only_what_lives_beside_them(way_in: str, other: str) -> None:
    """The gateway and the OTLP intake share the step evidence and the outcome rule
    (``sidecar/agents/``), never each other's modules."""
    files = sorted((ROOT / "sidecar" / "agents" / way_in).rglob("*.py"))
    assert files
    sideways = {
        str(f.relative_to(ROOT)): sorted(
            m for m in imported_modules(f) if m.startswith(f"sidecar.agents.{other}")
        )
        for f in files
    }
    assert {f: bad for f, bad in sideways.items() if bad} == {}


def test_tests_share_through_the_support_package() -> None:
    """No test module imports another test module: what tests share lives in
    ``tests/support/`` (or a helper module beside them, never a ``test_`` one)."""
    importing = sorted(
        str(f.relative_to(ROOT))
        for f in (ROOT / "tests").rglob("*.py")
        if any(
            part.startswith("test_")
            for m in imported_modules(f)
            if m.startswith("tests.")
            for part in m.split(".")
        )
    )
    assert importing == []
