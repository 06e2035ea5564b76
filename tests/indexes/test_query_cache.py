"""CachedEmbedder: normal forms, LRU bound, threads, delegation; the real model shows
that the folded forms are ones it does not tell apart."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from indexes import (
    ActiveIndex,
    CachedEmbedder,
    Embedder,
    HashingEmbedder,
    IndexRecord,
    MiniLMEmbedder,
    OnnxMiniLMEmbedder,
    query_key,
)


class Counting(HashingEmbedder):
    """The hashing embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.seen += list(texts)
        return super().embed(texts)


def wide(text: str) -> str:
    """``text`` in full-width forms (what some input methods type)."""
    return "".join(chr(ord(c) + 0xFEE0) for c in text)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("Weather in Paris", "weather in paris"),
        ("  weather\tin \n Paris  ", "weather in paris"),
        ("WEATHER IN PARIS", "weather in paris"),
        (f"{wide('weather')} in {wide('Paris')}", "weather in paris"),
        ("weather\u00a0in\u2003paris", "weather in paris"),  # no-break and em spaces
        ("ﬁle search", "file search"),  # ligature
        ("", ""),
    ],
)
def test_query_key(raw: str, key: str) -> None:
    assert query_key(raw) == key


def test_repeated_and_near_identical_queries_embed_once() -> None:
    inner = Counting()
    cached = CachedEmbedder(inner, size=8)
    first = cached.embed_query("Weather in Paris")
    for form in ("weather in paris", "  WEATHER   in Paris ", f"{wide('weather')} in Paris"):
        assert cached.embed_query(form) is first
    assert inner.seen == ["weather in paris"]  # the normal form is what gets embedded
    assert (cached.hits, cached.misses) == (3, 1)
    np.testing.assert_array_equal(first, inner.embed(["weather in paris"])[0])


def test_cached_vectors_are_read_only() -> None:
    vector = CachedEmbedder(HashingEmbedder()).embed_query("book a flight")
    with pytest.raises(ValueError):
        vector[0] = 1.0


def test_the_least_recently_used_query_leaves_first() -> None:
    inner = Counting()
    cached = CachedEmbedder(inner, size=2)
    cached.embed_query("a")
    cached.embed_query("b")
    cached.embed_query("a")  # a is now the most recent
    cached.embed_query("c")  # evicts b
    assert len(cached) == 2
    cached.embed_query("a")
    cached.embed_query("c")
    assert inner.seen == ["a", "b", "c"]
    cached.embed_query("b")
    assert inner.seen == ["a", "b", "c", "b"]
    assert len(cached) == 2


def test_documents_are_not_cached() -> None:
    inner = Counting()
    cached = CachedEmbedder(inner)
    cached.embed(["x", "y"])
    cached.embed(["x"])
    assert inner.seen == ["x", "y", "x"]
    assert len(cached) == 0


def test_identity_and_delegation() -> None:
    inner = HashingEmbedder(64)
    cached = CachedEmbedder(inner)
    assert isinstance(cached, Embedder)
    assert (cached.name, cached.dim, cached.inner) == (inner.name, 64, inner)
    # tokenizer_count exists exactly when the inner embedder has it
    assert getattr(cached, "tokenizer_count", None) is None
    with pytest.raises(ValueError):
        CachedEmbedder(inner, size=0)
    cached.embed_query("x")
    cached.clear()
    assert len(cached) == 0


def test_concurrent_lookups_stay_bounded_and_correct() -> None:
    inner = Counting()
    cached = CachedEmbedder(inner, size=16)
    texts = [f"query number {i}" for i in range(40)]
    expected = {t: inner.embed([t])[0] for t in texts}
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(400):
                t = texts[(i * 7 + offset) % len(texts)]
                np.testing.assert_array_equal(cached.embed_query(t.upper()), expected[t])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cached) <= 16
    assert cached.hits + cached.misses == 1600


def test_the_index_embeds_a_repeated_lookup_once(tmp_path: Path) -> None:
    inner = Counting()
    index = ActiveIndex.persistent(tmp_path / "chroma", CachedEmbedder(inner))
    index.upsert([IndexRecord("weather", "weather forecast"), IndexRecord("mail", "send email")])
    inner.seen.clear()
    first = index.search("Weather forecast", 1)
    again = index.search("  weather FORECAST ", 1)
    assert [h.id for h in first] == [h.id for h in again] == ["weather"]
    assert inner.seen == ["weather forecast"]


@pytest.mark.model
def test_the_model_cannot_tell_case_and_spacing_apart(
    minilm: MiniLMEmbedder, onnx_minilm: OnnxMiniLMEmbedder
) -> None:
    """Case and whitespace folding change nothing for all-MiniLM-L6-v2 (its tokenizer
    lower-cases and splits on whitespace): a cache hit returns what the model would."""
    for embedder in (minilm, onnx_minilm):
        cached = CachedEmbedder(embedder)
        raw = "  Find   the CHEAPEST flight\tto Lisbon "
        hit = cached.embed_query(raw)
        direct = (
            embedder.embed_query(raw)
            if isinstance(embedder, OnnxMiniLMEmbedder)
            else embedder.embed([raw])[0]
        )
        np.testing.assert_allclose(hit, direct, atol=1e-6)
        assert cached.tokenizer_count(raw) == embedder.tokenizer_count(raw)


def test_views_are_embedded_together_and_cached_each() -> None:
    inner = Counting()
    cached = CachedEmbedder(inner, size=8)
    rows = cached.embed_queries(["find flights", "book a hotel", "find flights"])
    assert rows.shape == (3, inner.dim)
    assert np.array_equal(rows[0], rows[2])
    assert np.array_equal(rows[1], cached.embed_query("book a hotel"))
    assert inner.seen == ["find flights", "book a hotel"]  # once each, in one call
    cached.embed_queries(["book a hotel", "rent a car"])
    assert inner.seen[-1:] == ["rent a car"]


@pytest.mark.model  # the real model, under onnxruntime
def test_onnx_views_are_the_single_query_vectors(tmp_path: Path) -> None:
    onnx = OnnxMiniLMEmbedder(tmp_path)
    texts = ["find flights to Rome", "book a hotel near the central station tonight"]
    together = onnx.embed_queries(texts)
    for row, text in zip(together, texts, strict=True):
        assert np.allclose(row, onnx.embed_query(text), atol=1e-5)
