"""The hot index as the sidecar opens it: the embedder the settings name, the Chroma
store (embedded under the home, or a server), opened on first use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from urllib.parse import urlparse

from indexes import ActiveIndex, Embedder, IndexMissing, ToolIndexError
from sidecar.errors import IndexUnavailable
from sidecar.eviction import approximate_tokens
from sidecar.settings import Settings
from sidecar.tools.active import REBUILD


def make_embedder(settings: Settings) -> Embedder:
    """The embedder ``settings`` name: all-MiniLM-L6-v2 under onnxruntime by default
    (documents through the fp32 graph, whose vectors are the torch model's, so homes
    built by either share one index; queries through the int8 graph), or under torch,
    the reference; queries go through a cache of recent vectors."""
    from indexes import CachedEmbedder, HashingEmbedder, MiniLMEmbedder, OnnxMiniLMEmbedder

    name = settings.embedder
    inner: Embedder
    if name == "hashing":
        inner = HashingEmbedder()
    elif name == "minilm-torch":
        inner = MiniLMEmbedder()
    else:
        inner = OnnxMiniLMEmbedder(settings.model_cache_path)
    return CachedEmbedder(inner, settings.query_cache) if settings.query_cache else inner


class HotIndex:
    """Opens the hot index on first use.  ``on_open`` runs once on the opened index
    before anyone uses it: the owner keeps it in step with the state's records, a
    reader checks it is complete (a reader cannot rebuild it)."""

    def __init__(
        self,
        settings: Settings,
        read_only: bool,
        embedder: Embedder | None,
        on_open: Callable[[ActiveIndex], None],
    ) -> None:
        self._settings = settings
        self._read_only = read_only
        self._embedder = embedder
        self._on_open = on_open
        self._index: ActiveIndex | None = None
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = make_embedder(self._settings)
        return self._embedder

    def get(self) -> ActiveIndex:
        with self._lock:
            if self._index is None:
                index = self._open()
                self._on_open(index)
                self._index = index
            return self._index

    def close(self) -> None:
        with self._lock:
            index, self._index = self._index, None
        if index is not None:
            index.close()

    def warm_up(self, documents: bool = True) -> int:
        """Open the index and load the model now; returns the number of active tools.
        ``documents=False``: only what a lookup runs (an embedder with a graph of its
        own for documents loads it on first use)."""
        count = self.get().count()
        warm = getattr(self.embedder, "warm", None)
        if callable(warm):
            warm(documents=documents)
        else:  # one model for documents and queries alike
            self.embedder.embed(["warm up"])
        return count

    def token_counter(self) -> tuple[str, Callable[[str], int]]:
        """The tokenizer's name and counter, for the reclaimed-context figures."""
        counter = getattr(self.embedder, "tokenizer_count", None)
        if counter is not None:
            return f"{self.embedder.name} tokenizer", counter
        return "approximate (words and punctuation)", approximate_tokens

    def _open(self) -> ActiveIndex:
        s = self._settings
        if s.chroma_url:
            url = urlparse(s.chroma_url)
            return ActiveIndex.http(
                url.hostname or "127.0.0.1",
                url.port or (443 if url.scheme == "https" else 8000),
                self.embedder,
                s.collection,
                ssl=url.scheme == "https",
                exact_limit=s.exact_limit,
                lexical=s.hybrid,
            )
        try:
            # a reader never creates a store: an empty one would be served as if no tool
            # were active
            return ActiveIndex.persistent(
                s.chroma_path,
                self.embedder,
                s.collection,
                create=not self._read_only,
                exact_limit=s.exact_limit,
                lexical=s.hybrid,
            )
        except IndexMissing as exc:
            raise IndexUnavailable(f"the hot index {s.chroma_path} is missing: {REBUILD}") from exc
        except ToolIndexError as exc:
            if not self._read_only:
                raise
            raise IndexUnavailable(
                f"the hot index {s.chroma_path} cannot be opened here ({exc}): the embedded "
                "Chroma store writes as it opens, so lookups need a writable disk with space "
                "(or a server on the home, --url); checks, audits and listings still work"
            ) from exc
