"""What the active index stores and answers: records, hits and their metadata."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MetadataValue = str | int | float | bool
ID_KEY = "tool_id"
"""Metadata key that repeats the record id, so that ``where`` filters can use it
(Chroma ignores ``where`` on ``#id`` in the embedded client)."""


LEXICAL_KEY = "lexical_document"
"""Metadata key of a record's text for BM25 when it is not its embedded ``document``
(:attr:`IndexRecord.lexical`)."""


@dataclass(frozen=True)
class IndexRecord:
    id: str
    document: str
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)

    @property
    def lexical(self) -> str:
        """The text BM25 indexes: :data:`LEXICAL_KEY` of the metadata, else the
        embedded document."""
        text = self.metadata.get(LEXICAL_KEY)
        return text if isinstance(text, str) else self.document


@dataclass(frozen=True)
class IndexHit:
    id: str
    score: float
    """Cosine similarity to the query, in [-1, 1]; higher is closer."""
    document: str
    metadata: Mapping[str, MetadataValue]


def plain(meta: Any) -> dict[str, Any]:
    """Chroma's metadata mapping as a plain dict (``None`` as empty)."""
    return dict(meta or {})


def only(hit: IndexHit, fields: Sequence[str]) -> IndexHit:
    """``hit`` with no document and only the metadata ``fields``."""
    return IndexHit(
        hit.id, hit.score, "", {f: hit.metadata[f] for f in fields if f in hit.metadata}
    )
