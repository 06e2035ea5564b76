"""The active tool index (hot store): Chroma plus a sentence-transformers embedder.

This package never imports :mod:`sidecar` or :mod:`cold_store`, and it is the only one
that imports ``chromadb`` and ``sentence_transformers``.
"""

from indexes.active import ID_KEY, ActiveIndex, IndexHit, IndexRecord
from indexes.embedder import Embedder, HashingEmbedder, MiniLMEmbedder
from indexes.errors import (
    DeleteNotVerifiedError,
    EmbedderError,
    EmbedderMismatchError,
    IndexBackendError,
    IndexMissing,
    ToolIndexError,
)

__all__ = [
    "ID_KEY",
    "ActiveIndex",
    "DeleteNotVerifiedError",
    "Embedder",
    "EmbedderError",
    "EmbedderMismatchError",
    "HashingEmbedder",
    "IndexBackendError",
    "IndexHit",
    "IndexMissing",
    "IndexRecord",
    "MiniLMEmbedder",
    "ToolIndexError",
]
