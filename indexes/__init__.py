"""The active tool index (hot store): Chroma plus the all-MiniLM-L6-v2 embedder, under
sentence-transformers (the reference) or onnxruntime (the fast path); and the usage the
tools' finished sessions taught (:mod:`indexes.usage`, pure numpy).

This package never imports :mod:`sidecar` or :mod:`cold_store`, and it is the only one
that imports ``chromadb`` and the model runtimes (torch, sentence-transformers,
transformers, tokenizers, onnxruntime, onnx, safetensors).
"""

from indexes.active import EXACT_LIMIT, ID_KEY, ActiveIndex, IndexHit, IndexRecord
from indexes.embedder import (
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    query_vector,
    query_vectors,
)
from indexes.errors import (
    DeleteNotVerifiedError,
    EmbedderError,
    EmbedderMismatchError,
    IndexBackendError,
    IndexMissing,
    ToolIndexError,
)
from indexes.lexical import LexicalScores, LexicalTier, terms
from indexes.onnx_embedder import OnnxMiniLMEmbedder
from indexes.query_cache import CachedEmbedder, query_key
from indexes.records import LEXICAL_KEY
from indexes.usage import Added, Evidence, UsageBoost, UsageIndex, request_vector

__all__ = [
    "EXACT_LIMIT",
    "ID_KEY",
    "LEXICAL_KEY",
    "ActiveIndex",
    "Added",
    "CachedEmbedder",
    "DeleteNotVerifiedError",
    "Embedder",
    "EmbedderError",
    "EmbedderMismatchError",
    "Evidence",
    "HashingEmbedder",
    "IndexBackendError",
    "IndexHit",
    "IndexMissing",
    "IndexRecord",
    "LexicalScores",
    "LexicalTier",
    "MiniLMEmbedder",
    "OnnxMiniLMEmbedder",
    "ToolIndexError",
    "UsageBoost",
    "UsageIndex",
    "query_key",
    "query_vector",
    "query_vectors",
    "request_vector",
    "terms",
]
