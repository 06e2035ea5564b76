"""Errors raised by the active tool index.

ToolIndexError                 root of everything this package raises
├── IndexBackendError          Chroma failed or could not be reached (wraps the cause)
├── EmbedderError              the embedding model could not be loaded or run
├── EmbedderMismatchError      the collection was built with another embedder
├── IndexMissing               no store where one was to be opened, not created
└── DeleteNotVerifiedError     ids still present after a delete
"""

from __future__ import annotations


class ToolIndexError(Exception):
    """Root of every error raised by :mod:`indexes`."""


class IndexBackendError(ToolIndexError):
    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(f"tool index {operation} failed: {detail}")
        self.operation = operation
        self.detail = detail


class EmbedderError(ToolIndexError):
    pass


class EmbedderMismatchError(ToolIndexError):
    def __init__(self, collection: str, stored: str, given: str) -> None:
        super().__init__(
            f"collection {collection!r} was built with embedder {stored!r}, not {given!r}; "
            "use the same embedder or rebuild the index in a fresh home"
        )
        self.collection = collection
        self.stored = stored
        self.given = given


class IndexMissing(ToolIndexError):
    def __init__(self, path: str) -> None:
        super().__init__(f"no tool index at {path}")
        self.path = path


class DeleteNotVerifiedError(ToolIndexError):
    def __init__(self, remaining: list[str]) -> None:
        super().__init__(
            f"delete not verified: {len(remaining)} id(s) still present: {remaining[:5]}"
        )
        self.remaining = remaining
