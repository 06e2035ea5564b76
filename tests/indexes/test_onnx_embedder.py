"""The onnxruntime embedder against the sentence-transformers reference, with the real
all-MiniLM-L6-v2 weights: vectors, truncation, token counts, threads, index
compatibility, and a serving process that never imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from indexes import (
    ActiveIndex,
    Embedder,
    EmbedderMismatchError,
    IndexRecord,
    MiniLMEmbedder,
    OnnxMiniLMEmbedder,
)
from indexes.embedder import MINILM_NAME
from tests.support.catalog import CATALOG, QUERIES

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[2]
LONG = " ".join(f"word{i} fetches page{i} and parses it" for i in range(120))
TEXTS = [
    "Get the current weather for a city",
    "what's the weather in Lisbon",
    "  leading and trailing spaces  ",
    "x",
    "",
    "Ünïcödé café — ﬁle naïve 東京 😀",
    "TAB\tand\nnewlines",
    LONG,  # far beyond the 256-token window
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def demo_catalog() -> list[IndexRecord]:
    rows = [
        json.loads(line) for line in (REPO / "sidecar/demo/catalog.jsonl").read_text().splitlines()
    ]
    return [IndexRecord(r["tool_id"], f"{r['tool_id']}: {r['description']}") for r in rows]


def test_name_dim_variants_and_protocol(onnx_minilm: OnnxMiniLMEmbedder) -> None:
    assert isinstance(onnx_minilm, Embedder)
    assert onnx_minilm.name == MINILM_NAME  # fp32 documents: the reference's vectors
    assert onnx_minilm.dim == 384
    assert onnx_minilm.variants == {"documents": "fp32", "queries": "int8"}
    int8_docs = OnnxMiniLMEmbedder(onnx_minilm._cache_dir, documents="int8")
    assert int8_docs.name != MINILM_NAME


def test_bad_arguments_raise(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OnnxMiniLMEmbedder(tmp_path, documents="fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        OnnxMiniLMEmbedder(tmp_path, threads=0)
    with pytest.raises(ValueError):
        OnnxMiniLMEmbedder(tmp_path, workers=0)


def test_fp32_documents_are_the_reference_vectors(
    onnx_minilm: OnnxMiniLMEmbedder, minilm: MiniLMEmbedder
) -> None:
    ours, ref = onnx_minilm.embed(TEXTS), minilm.embed(TEXTS)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert cosines(ours, ref).min() > 0.99999
    np.testing.assert_allclose(ours, ref, atol=2e-4)


def test_int8_queries_stay_close_to_the_reference(
    onnx_minilm: OnnxMiniLMEmbedder, minilm: MiniLMEmbedder
) -> None:
    ours = np.vstack([onnx_minilm.embed_query(t) for t in TEXTS])
    ref = minilm.embed(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert cosines(ours, ref).min() > 0.998
    # not the fp32 graph under another name
    assert not np.allclose(ours, ref, atol=1e-4)


def test_truncation_matches_the_reference(
    onnx_minilm: OnnxMiniLMEmbedder, minilm: MiniLMEmbedder
) -> None:
    """Past 256 tokens, text is ignored, by both."""
    assert onnx_minilm.tokenizer_count(LONG) > 600
    other_tail = LONG + " an entirely different ending about invoices and payments"
    ours = onnx_minilm.embed([LONG, other_tail])
    np.testing.assert_allclose(ours[0], ours[1], atol=1e-6)
    np.testing.assert_allclose(ours, minilm.embed([LONG, other_tail]), atol=2e-4)
    np.testing.assert_allclose(onnx_minilm.embed_query(LONG), onnx_minilm.embed_query(other_tail))


def test_tokenizer_count_matches_the_reference(
    onnx_minilm: OnnxMiniLMEmbedder, minilm: MiniLMEmbedder
) -> None:
    schema = json.dumps({"name": "web_search", "inputSchema": {"type": "object"}})
    for text in [*TEXTS, schema]:
        assert onnx_minilm.tokenizer_count(text) == minilm.tokenizer_count(text), text


def test_vectors_do_not_depend_on_the_batch(onnx_minilm: OnnxMiniLMEmbedder) -> None:
    for variant in ("fp32", "int8"):
        embedder = OnnxMiniLMEmbedder(onnx_minilm._cache_dir, documents=variant, batch_size=3)
        batch = embedder.embed(TEXTS)
        alone = np.vstack([embedder.embed([t]) for t in TEXTS])
        np.testing.assert_allclose(batch, alone, atol=1e-5)
        np.testing.assert_allclose(embedder.embed(TEXTS[::-1])[::-1], batch, atol=1e-5)


def test_batches_run_at_once_give_the_same_vectors(onnx_minilm: OnnxMiniLMEmbedder) -> None:
    texts = [f"{t} ({i})" for i, t in enumerate(TEXTS * 6)]
    one = OnnxMiniLMEmbedder(onnx_minilm._cache_dir, batch_size=2, workers=1).embed(texts)
    many = OnnxMiniLMEmbedder(onnx_minilm._cache_dir, batch_size=2, workers=3).embed(texts)
    np.testing.assert_array_equal(one, many)
    assert np.isfinite(many).all() and len(many) == len(texts)


def test_empty_input(onnx_minilm: OnnxMiniLMEmbedder) -> None:
    out = onnx_minilm.embed([])
    assert out.shape == (0, 384) and out.dtype == np.float32


def test_concurrent_calls_give_the_sequential_answers(onnx_minilm: OnnxMiniLMEmbedder) -> None:
    texts = [f"{q} ({i})" for i, (q, _) in enumerate(QUERIES)]
    expected = {t: onnx_minilm.embed_query(t) for t in texts}
    expected_docs = onnx_minilm.embed(texts)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(len(texts)):
                t = texts[(i + offset) % len(texts)]
                np.testing.assert_array_equal(onnx_minilm.embed_query(t), expected[t])
            np.testing.assert_allclose(onnx_minilm.embed(texts), expected_docs, atol=1e-6)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n * 5,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_first_use_from_several_threads_loads_once(onnx_cache: Path) -> None:
    embedder = OnnxMiniLMEmbedder(onnx_cache)
    results: list[np.ndarray] = []
    threads = [
        threading.Thread(target=lambda: results.append(embedder.embed_query("book a hotel")))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    assert all(np.array_equal(r, results[0]) for r in results)
    assert set(embedder._sessions) == {"int8"}  # the document graph was never needed


def test_an_index_built_by_torch_is_the_same_index_for_onnx(
    tmp_path: Path, onnx_minilm: OnnxMiniLMEmbedder, minilm: MiniLMEmbedder
) -> None:
    """The reference and the fast embedder share a name because their document
    vectors are the same: an index built by one is ranked alike by the other."""
    records = demo_catalog()
    path = tmp_path / "chroma"
    ActiveIndex.persistent(path, minilm).upsert(records)
    by_torch = ActiveIndex.persistent(path, minilm, exact_limit=None)
    by_onnx = ActiveIndex.persistent(path, onnx_minilm, exact_limit=None)
    agreement = []
    for query, _ in QUERIES:
        reference = [h.id for h in by_torch.search(query, 5)]
        fast = [h.id for h in by_onnx.search(query, 5)]
        # the same query vector through the fp32 graph ranks exactly like torch
        exact = by_onnx.search(onnx_minilm.embed([query])[0], 5)
        assert [h.id for h in exact] == reference
        agreement.append(len(set(fast) & set(reference)) / 5)
    assert np.mean(agreement) >= 0.95


def test_int8_documents_refuse_an_fp32_index(
    tmp_path: Path, onnx_minilm: OnnxMiniLMEmbedder
) -> None:
    path = tmp_path / "chroma"
    ActiveIndex.persistent(path, onnx_minilm).upsert(demo_catalog()[:5])
    with pytest.raises(EmbedderMismatchError):
        ActiveIndex.persistent(path, OnnxMiniLMEmbedder(onnx_minilm._cache_dir, documents="int8"))


def test_semantic_retrieval_with_the_fast_path(
    tmp_path: Path, onnx_minilm: OnnxMiniLMEmbedder
) -> None:
    index = ActiveIndex.persistent(tmp_path / "chroma", onnx_minilm)
    index.upsert([IndexRecord(i, d) for i, d in CATALOG.items()])
    top1 = [index.search(query, 1)[0].id == expected for query, expected in QUERIES]
    assert sum(top1) / len(top1) >= 0.9


def test_a_serving_process_never_imports_torch(onnx_cache: Path) -> None:
    """With the files cached, embedding needs onnxruntime and tokenizers only: not
    torch, transformers or sentence-transformers, and not onnx (the build)."""
    code = (
        "import sys\n"
        "from indexes import OnnxMiniLMEmbedder\n"
        "e = OnnxMiniLMEmbedder(sys.argv[1])\n"
        "assert e.embed_query('weather in Paris').shape == (384,)\n"
        "assert e.embed(['a tool']).shape == (1, 384)\n"
        "heavy = {'torch', 'transformers', 'sentence_transformers', 'onnx', 'safetensors'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(onnx_cache)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stderr


def test_a_warm_up_for_lookups_loads_the_query_graph_only(
    onnx_cache: Path, onnx_minilm: OnnxMiniLMEmbedder
) -> None:
    """What ``sidecar serve`` loads before it is ready: lookups answer at once, and the
    document graph loads on the first document embedding, giving the same vectors."""
    embedder = OnnxMiniLMEmbedder(onnx_cache)
    embedder.warm(documents=False)
    assert set(embedder._sessions) == {"int8"}
    assert np.array_equal(
        embedder.embed_query("book a hotel"), onnx_minilm.embed_query("book a hotel")
    )
    assert np.array_equal(embedder.embed(["a tool"]), onnx_minilm.embed(["a tool"]))
    assert set(embedder._sessions) == {"int8", "fp32"}
    embedder = OnnxMiniLMEmbedder(onnx_cache)
    embedder.warm()
    assert set(embedder._sessions) == {"int8", "fp32"}
