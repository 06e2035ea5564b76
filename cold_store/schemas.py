"""Column layouts of the cold tables.

Nested, free-form parts of a record (error bodies, logs, schema snapshots) are stored
as JSON text: they are for human audit, and JSON keeps the Parquet schema stable while
the shapes inside evolve.
"""

from __future__ import annotations

import pyarrow as pa

_TS = pa.timestamp("us", tz="UTC")

CHAINS = pa.schema(
    [
        pa.field("chain_id", pa.string(), nullable=False),
        pa.field("archive_date", pa.string(), nullable=False),
        pa.field("archived_at", _TS, nullable=False),
        pa.field("reported_at", _TS),
        pa.field("session_id", pa.string()),
        pa.field("topology", pa.list_(pa.string()), nullable=False),
        pa.field("tool_types", pa.list_(pa.string()), nullable=False),
        pa.field("terminal_signature", pa.string(), nullable=False),
        pa.field("failure_kind", pa.string(), nullable=False),
        pa.field("classification", pa.string(), nullable=False),
        pa.field("error_json", pa.string()),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("condition_json", pa.string(), nullable=False),
        pa.field("gapped", pa.bool_(), nullable=False),
        pa.field("tool_snapshots_json", pa.string(), nullable=False),
        pa.field("credentials_json", pa.string(), nullable=False),
        pa.field("logs_json", pa.string(), nullable=False),
        pa.field("occurrences", pa.int64(), nullable=False),
        pa.field("record_version", pa.int32(), nullable=False),
        # version 2: a failing call reported with its session's steps
        pa.field("source", pa.string()),
        pa.field("normalized_signature", pa.string()),
        pa.field("steps_json", pa.string()),
        pa.field("task_input", pa.string()),
        pa.field("conditions_json", pa.string()),
    ]
)
"""Abandoned chains.  The schema only grows by nullable columns; rows of older files
read them as null."""

TOOLS = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("archive_date", pa.string(), nullable=False),
        pa.field("evicted_at", _TS, nullable=False),
        pa.field("tool_id", pa.string(), nullable=False),
        pa.field("tool_type", pa.string(), nullable=False),
        pa.field("description", pa.string(), nullable=False),
        pa.field("document", pa.string(), nullable=False),
        pa.field("input_schema_json", pa.string(), nullable=False),
        pa.field("metadata_json", pa.string(), nullable=False),
        pa.field("credentials_json", pa.string(), nullable=False),
        pa.field("chain_ids", pa.list_(pa.string()), nullable=False),
        pa.field("decision_json", pa.string(), nullable=False),
        pa.field("schema_bytes", pa.int64(), nullable=False),
        pa.field("schema_tokens", pa.int64(), nullable=False),
        pa.field("record_version", pa.int32(), nullable=False),
    ]
)
"""Evicted tools: the full hot record of a tool at the moment it left the active index."""
