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
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from indexes import LEXICAL_KEY, ActiveIndex, IndexRecord
from sidecar.catalog import check_credential
from sidecar.model import CredentialRef, Tool
from sidecar.redact import redact_schema, redact_text
from sidecar.state import StateStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS hot_tools (
    tool_id TEXT PRIMARY KEY, document TEXT NOT NULL, metadata TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tool_sources (
    tool_id TEXT PRIMARY KEY, source TEXT NOT NULL, gone_at REAL
);
"""

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
    """The ``hot_tools`` table."""

    def __init__(self, state: StateStore) -> None:
        self._state = state

    def put(self, records: Sequence[IndexRecord]) -> None:
        now = time.time()
        with self._state.tx() as db:
            db.executemany(
                "INSERT INTO hot_tools VALUES (?, ?, ?, ?) ON CONFLICT(tool_id) DO UPDATE "
                "SET document=excluded.document, metadata=excluded.metadata, "
                "updated_at=excluded.updated_at",
                [(r.id, r.document, json.dumps(dict(r.metadata)), now) for r in records],
            )

    def remove(self, ids: Iterable[str]) -> None:
        with self._state.tx() as db:
            db.executemany("DELETE FROM hot_tools WHERE tool_id=?", [(i,) for i in ids])

    def get(self, ids: Iterable[str]) -> dict[str, IndexRecord]:
        out: dict[str, IndexRecord] = {}
        wanted = list(dict.fromkeys(ids))
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = self._state.db.execute(
                "SELECT tool_id, document, metadata FROM hot_tools "
                f"WHERE tool_id IN ({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            for tool_id, document, metadata in rows:
                out[tool_id] = IndexRecord(tool_id, document, json.loads(metadata))
        return out

    def all(self) -> list[IndexRecord]:
        rows = self._state.db.execute(
            "SELECT tool_id, document, metadata FROM hot_tools ORDER BY tool_id"
        ).fetchall()
        return [IndexRecord(t, d, json.loads(m)) for t, d, m in rows]

    def ids(self) -> set[str]:
        return {r[0] for r in self._state.db.execute("SELECT tool_id FROM hot_tools")}

    def count(self) -> int:
        return int(self._state.db.execute("SELECT COUNT(*) FROM hot_tools").fetchone()[0])

    def of_source(self, source: str) -> set[str]:
        """The tools a catalog source brought that it has not dropped."""
        rows = self._state.db.execute(
            "SELECT tool_id FROM tool_sources WHERE source=? AND gone_at IS NULL", (source,)
        )
        return {r[0] for r in rows}

    def set_source(self, source: str, present: Sequence[str], gone: Sequence[str]) -> None:
        now = time.time()
        with self._state.tx() as db:
            db.executemany(
                "INSERT INTO tool_sources VALUES (?, ?, NULL) ON CONFLICT(tool_id) DO UPDATE "
                "SET source=excluded.source, gone_at=NULL",
                [(t, source) for t in present],
            )
            db.executemany(
                "UPDATE tool_sources SET gone_at=? WHERE tool_id=? AND source=?",
                [(now, t, source) for t in gone],
            )


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
    state: StateStore,
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
    for t in unique:
        state.set_credentials(t.tool_id, t.credentials)
    ids = [t.tool_id for t in unique]
    return AddToolsResult(
        tuple(i for i in ids if i not in existing), tuple(i for i in ids if i in existing)
    )
