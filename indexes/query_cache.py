"""A bounded cache of query vectors in front of any embedder.

Agents repeat themselves: the same lookup text comes back with other capitalisation,
spacing, or Unicode forms (full-width letters, ligatures, non-breaking spaces).  A query
is reduced to a key (Unicode NFKC, lower case, runs of whitespace to one space, trimmed)
and the *key* is embedded, so the vector of a query never depends on which of its forms
was seen first.  For all-MiniLM-L6-v2 case and whitespace change nothing (its tokenizer
lower-cases and splits on whitespace); NFKC folds forms the tokenizer would keep apart.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from indexes.embedder import Embedder, query_vector, query_vectors

_SPACES = re.compile(r"\s+")


def query_key(text: str) -> str:
    """The normal form a query is cached and embedded under."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text)).strip().lower()


class CachedEmbedder:
    """``inner`` with an LRU cache of up to ``size`` query vectors.

    :meth:`embed_query` is cached; :meth:`embed` (documents) goes straight to ``inner``.
    Cached vectors are read-only arrays shared between callers.  Safe to call from
    several threads: the cache is guarded by a lock that is never held while embedding
    (two threads missing on the same key at once both embed it, and agree).
    """

    def __init__(self, inner: Embedder, size: int = 4096) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._inner = inner
        self._size = size
        self._lock = threading.Lock()
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def inner(self) -> Embedder:
        return self._inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dim(self) -> int:
        return self._inner.dim

    def __len__(self) -> int:
        return len(self._vectors)

    def __bool__(self) -> bool:
        # an empty cache is still an embedder: ``embedder or default`` must keep it
        return True

    def __getattr__(self, attr: str) -> Any:
        # ``tokenizer_count`` and the like exist here exactly when the inner embedder
        # has them (callers probe with ``getattr(embedder, "tokenizer_count", None)``)
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._inner, attr)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        key = query_key(text)
        with self._lock:
            found = self._vectors.get(key)
            if found is not None:
                self._vectors.move_to_end(key)
                self.hits += 1
                return found
            self.misses += 1
        vector = np.array(query_vector(self._inner, key), dtype=np.float32)
        vector.setflags(write=False)
        with self._lock:
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self._size:
                self._vectors.popitem(last=False)
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed_query` of each text, the ones not cached embedded together."""
        keys = [query_key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for key in keys:
                vector = self._vectors.get(key)
                if vector is not None:
                    self._vectors.move_to_end(key)
                    self.hits += 1
                    found[key] = vector
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            self.misses += len(missing)
            fresh = np.array(query_vectors(self._inner, missing), dtype=np.float32)
            with self._lock:
                for key, vector in zip(missing, fresh, strict=True):
                    vector.setflags(write=False)
                    found[key] = vector
                    self._vectors[key] = vector
                    self._vectors.move_to_end(key)
                while len(self._vectors) > self._size:
                    self._vectors.popitem(last=False)
        return np.stack([found[k] for k in keys])

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()
