"""The embedders: the real all-MiniLM-L6-v2 model and the deterministic hashing stand-in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexes import Embedder, HashingEmbedder, MiniLMEmbedder

REPO = Path(__file__).resolve().parents[2]


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---- MiniLMEmbedder (real model) ----------------------------------------------------


def test_minilm_name_dim_and_protocol(minilm: MiniLMEmbedder) -> None:
    assert minilm.name == "all-MiniLM-L6-v2"
    assert minilm.dim == 384
    assert isinstance(minilm, Embedder)


def test_minilm_output_shape_dtype_and_unit_rows(minilm: MiniLMEmbedder) -> None:
    texts = [
        "Get the current weather for a city",
        "Look up the latest stock price for a ticker symbol",
        "x",
        "A considerably longer sentence " * 20,
    ]
    out = minilm.embed(texts)
    assert isinstance(out, np.ndarray)
    assert out.shape == (4, 384)
    assert out.dtype == np.float32
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    # distinct texts give distinct vectors (not a constant output)
    assert cos(out[0], out[1]) < 0.9


def test_minilm_empty_input(minilm: MiniLMEmbedder) -> None:
    out = minilm.embed([])
    assert out.shape == (0, 384)
    assert out.dtype == np.float32


def test_minilm_is_deterministic_and_batch_independent(minilm: MiniLMEmbedder) -> None:
    texts = ["send an email to a colleague", "convert euros to dollars", "book a flight"]
    batch = minilm.embed(texts)
    one_by_one = np.vstack([minilm.embed([t]) for t in texts])
    np.testing.assert_allclose(batch, one_by_one, atol=1e-5)
    np.testing.assert_allclose(minilm.embed(texts), batch, atol=1e-6)


@pytest.mark.parametrize(
    ("query", "closer", "farther"),
    [
        (
            "current weather in Paris",
            "Get the current weather conditions and temperature for a city",
            "Look up the latest stock price for a ticker symbol",
        ),
        (
            "how much is one Apple share worth right now",
            "Look up the latest stock price for a ticker symbol",
            "Get the current weather conditions and temperature for a city",
        ),
        (
            "say hello in Spanish",
            "Translate text from one language to another",
            "Resize and crop an image file",
        ),
        (
            "make this photo smaller",
            "Resize and crop an image file",
            "Translate text from one language to another",
        ),
        (
            "email my boss about the meeting",
            "Send an email message to a recipient",
            "Compute the route and driving directions between two places",
        ),
        (
            "how do I drive from Berlin to Munich",
            "Compute the route and driving directions between two places",
            "Send an email message to a recipient",
        ),
    ],
)
def test_minilm_semantic_sanity(
    minilm: MiniLMEmbedder, query: str, closer: str, farther: str
) -> None:
    q, near, far = minilm.embed([query, closer, farther])
    assert float(q @ near) > float(q @ far) + 0.05


def test_minilm_tokenizer_count(minilm: MiniLMEmbedder) -> None:
    short = minilm.tokenizer_count("weather")
    medium = minilm.tokenizer_count("get the current weather for a city")
    long = minilm.tokenizer_count("get the current weather for a city " * 100)
    for n in (short, medium, long):
        assert isinstance(n, int)
        assert n > 0
    assert short < medium < long
    # no truncation at the model's 256-token window, and no special tokens added
    assert long == 100 * medium
    assert minilm.tokenizer_count("") == 0


# ---- HashingEmbedder ----------------------------------------------------------------


def test_hashing_name_dim_and_protocol() -> None:
    emb = HashingEmbedder(64)
    assert emb.name == "hashing-64"
    assert emb.dim == 64
    assert isinstance(emb, Embedder)
    assert HashingEmbedder().dim == 384


def test_hashing_deterministic_across_instances(hashing: HashingEmbedder) -> None:
    texts = ["get weather for a city", "stock price lookup", "send_email to someone"]
    a = hashing.embed(texts)
    b = HashingEmbedder().embed(texts)
    assert a.shape == (3, 384)
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a, b)


def test_hashing_deterministic_across_processes(hashing: HashingEmbedder) -> None:
    """Feature hashing must not depend on Python's per-process string hash seed."""
    text = "get weather for a city and the stock price"
    code = (
        "import sys; from indexes import HashingEmbedder; "
        "sys.stdout.write(HashingEmbedder().embed([sys.argv[1]]).tobytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, text],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    other = np.frombuffer(bytes.fromhex(out), dtype=np.float32).reshape(1, 384)
    np.testing.assert_array_equal(other, hashing.embed([text]))


def test_hashing_rows_are_unit_norm(hashing: HashingEmbedder) -> None:
    texts = ["a", "weather weather weather", "one two three four five six", "", "!!!"]
    out = hashing.embed(texts)
    assert out.shape == (5, 384)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)


def test_hashing_empty_input(hashing: HashingEmbedder) -> None:
    assert hashing.embed([]).shape == (0, 384)


def test_hashing_shared_words_score_higher(hashing: HashingEmbedder) -> None:
    q, related, unrelated = hashing.embed(
        ["current weather forecast for paris", "weather forecast for a city", "stock price quote"]
    )
    assert float(q @ related) > float(q @ unrelated)
    assert float(q @ related) > 0.5
    assert float(q @ q) == pytest.approx(1.0, abs=1e-6)


def test_hashing_normalises_case_and_underscores(hashing: HashingEmbedder) -> None:
    a, b, c = hashing.embed(["get_weather", "Get Weather", "get stock"])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("dim", [-1, 0, 1, 7])
def test_hashing_rejects_small_dim(dim: int) -> None:
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim)


def test_hashing_accepts_dim_8() -> None:
    out = HashingEmbedder(8).embed(["hello world"])
    assert out.shape == (1, 8)
    assert float(np.linalg.norm(out[0])) == pytest.approx(1.0, abs=1e-6)
