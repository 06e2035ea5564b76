"""The active tools: their definitions in the state database, their vectors in the hot
index.

The state's ``hot_tools`` table is the record of which tools are active and what they
are (the embedded text and the metadata a lookup shows); the hot index is the vector
index built from it.  So a lookup reads a hit's fields from this process's memory, a
listing never scans Chroma, and a hot index that lost records (a deleted ``chroma/``
folder) is detected against the records and rebuilt from them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from indexes import LEXICAL_KEY, ActiveIndex, IndexRecord
from sidecar.model import CredentialRef, Tool
from sidecar.storage.state import State
from sidecar.tools.catalog import check_credential
from sidecar.trust.redact import redact_schema, redact_text

ADD_BATCH = 256
"""Tools embedded and written per step of an add (a progress report each)."""
HIT_FIELDS = ("description", "tool_type")
"""The metadata a lookup hit shows."""


PARAMETERS_SHOWN = 20
"""Parameters of a tool whose names (and descriptions) its text carries, at most."""
PARAMETER_DESCRIPTION_CHARS = 200
"""Characters of one parameter's description its tool's text carries, at most."""


def embedding_text(tool: Tool, parameter_descriptions: bool = False) -> str:
    """What is embedded for a tool: its name in words, its description, and its
    parameters' names; with ``parameter_descriptions``, each parameter's description
    beside its name (flattened: ``name: description; ...``): :func:`lexical_text`."""
    words = tool.tool_id.replace("_", " ").replace("-", " ").replace(".", " ")
    text = f"{words}: {tool.description}"
    params = tool.input_schema.get("properties")
    if not isinstance(params, Mapping) or not params:
        return text
    shown = list(params.items())[:PARAMETERS_SHOWN]
    if not parameter_descriptions:
        return f"{text} (parameters: {', '.join(str(name) for name, _ in shown)})"
    parts = []
    for name, spec in shown:
        said = spec.get("description") if isinstance(spec, Mapping) else None
        said = " ".join(str(said).split())[:PARAMETER_DESCRIPTION_CHARS] if said else ""
        parts.append(f"{name}: {said}" if said else str(name))
    return f"{text} (parameters: {'; '.join(parts)})"


def lexical_text(tool: Tool) -> str:
    """What BM25 indexes for a tool: its embedded text with each parameter's description
    beside its name.  The descriptions say what a tool takes in the words a request uses
    ("the city to get the weather for"); they help BM25, whose length normalisation
    absorbs them, and dilute the embedding, whose mean over every token they would
    pull away from the tool's purpose (``benchmarks/bench_retrieval.py`` measures both;
    BENCHMARKS.md, section 11)."""
    return embedding_text(tool, parameter_descriptions=True)


def index_record(tool: Tool) -> IndexRecord:
    document = embedding_text(tool)
    metadata: dict[str, str | bool] = {
        "description": tool.description,
        "tool_type": tool.tool_type,
        "input_schema": json.dumps(dict(tool.input_schema), sort_keys=True),
        "pinned": tool.pinned,
        "source_format": tool.source_format,
    }
    lexical = lexical_text(tool)
    if lexical != document:
        metadata[LEXICAL_KEY] = lexical
    return IndexRecord(tool.tool_id, document, metadata)


def tool_from_record(rec: IndexRecord, creds: Sequence[CredentialRef] = ()) -> Tool:
    meta = rec.metadata
    return Tool(
        tool_id=rec.id,
        description=str(meta.get("description", "")),
        tool_type=str(meta.get("tool_type", "unspecified")),
        input_schema=json.loads(str(meta.get("input_schema", "{}"))),
        credentials=tuple(creds),
        pinned=bool(meta.get("pinned", False)),
        source_format=str(meta.get("source_format", "sidecar")),
    )


def redacted_tool(tool: Tool) -> Tool:
    """A definition safe to store: credential references checked, secrets masked."""
    for i, cred in enumerate(tool.credentials):
        check_credential(cred, f"tool {tool.tool_id!r} credentials[{i}]")
    return replace(
        tool,
        description=redact_text(tool.description),
        input_schema=redact_schema(dict(tool.input_schema)),
    )


@dataclass(frozen=True)
class SyncResult:
    """What a catalog sync changed: tools new to the hot index, tools whose definition
    changed (re-embedded), tools the source no longer has (gone from the hot index), and
    tools it still lists but that stay out (evicted)."""

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    gone: tuple[str, ...] = ()
    kept_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class AddToolsResult:
    added: tuple[str, ...]
    updated: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"added": list(self.added), "updated": list(self.updated)}
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


class ToolRecords:
    """The active tools' records (:class:`~sidecar.storage.tools.ToolRepository`), each
    write a transaction of its own."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._repo = state.tools

    def put(self, records: Sequence[IndexRecord]) -> None:
        with self._state.tx() as tx:
            self._repo.put(tx, records)

    def remove(self, ids: Iterable[str]) -> None:
        with self._state.tx() as tx:
            self._repo.remove(tx, ids)

    def get(self, ids: Iterable[str]) -> dict[str, IndexRecord]:
        return self._repo.get(ids)

    def all(self) -> list[IndexRecord]:
        return self._repo.all()

    def page(self, after: str | None, limit: int) -> list[IndexRecord]:
        """Up to ``limit`` records in id order, after the id ``after`` (from the start
        when ``None``)."""
        return self._repo.page("" if after is None else after, limit)

    def ids(self) -> set[str]:
        return self._repo.ids()

    def present(self, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` are active tools."""
        return self._repo.present(ids)

    def count(self) -> int:
        return self._repo.count()

    def of_source(self, source: str) -> set[str]:
        """The tools a catalog source brought that it has not dropped."""
        return self._repo.of_source(source)

    def set_source(self, source: str, present: Sequence[str], gone: Sequence[str]) -> None:
        with self._state.tx() as tx:
            self._repo.set_source(tx, source, present, gone)


class Fields:
    """The fields a lookup hit shows, for every active tool, held in memory and reloaded
    whenever the hot-index revision moves (a write by any process on the home)."""

    def __init__(self, records: ToolRecords) -> None:
        self._records = records
        self._lock = threading.Lock()
        self._rev = -1
        self._fields: dict[str, dict[str, Any]] = {}

    def at(self, revision: int) -> Mapping[str, Mapping[str, Any]]:
        with self._lock:
            if revision != self._rev:
                self._fields = {
                    r.id: {f: r.metadata.get(f) for f in HIT_FIELDS} for r in self._records.all()
                }
                self._rev = revision
            return self._fields


def add_tools(
    tools: Sequence[Tool],
    *,
    records: ToolRecords,
    index: ActiveIndex,
    state: State,
    refuse: Callable[[Sequence[str]], None],
    progress: Callable[[int], None] | None = None,
) -> AddToolsResult:
    """Upsert ``tools`` (their credentials go to the state, never to the index).

    ``refuse`` raises for ids that may not be added (evicted, or moving)."""
    unique = [redacted_tool(t) for t in {t.tool_id: t for t in tools}.values()]
    if not unique:
        return AddToolsResult((), ())
    refuse([t.tool_id for t in unique])
    existing = set(records.get(t.tool_id for t in unique))
    recs = [index_record(t) for t in unique]
    for start in range(0, len(recs), ADD_BATCH):
        chunk = recs[start : start + ADD_BATCH]
        index.upsert(chunk)
        records.put(chunk)
        if progress is not None:
            progress(start + len(chunk))
    with state.tx() as tx:
        for t in unique:
            state.credentials.replace(tx, t.tool_id, t.credentials)
    ids = [t.tool_id for t in unique]
    return AddToolsResult(
        tuple(i for i in ids if i not in existing), tuple(i for i in ids if i in existing)
    )
