"""Checking rows against a table's schema, the same way for every backend: a row one
backend accepts, every backend accepts (so an archive can move between them)."""

from __future__ import annotations

import re
from collections.abc import Collection, Container, Mapping, Sequence
from typing import Any

import pyarrow as pa

from cold_store.errors import SchemaError

SAFE_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")


def check_keys(rows: Sequence[Mapping[str, Any]], key: str) -> None:
    for row in rows:
        value = row.get(key)
        if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
            raise SchemaError(f"every row needs a {key!r} made of letters, digits and . _ : -")


def check_partition(rows: Sequence[Mapping[str, Any]], column: str) -> None:
    for row in rows:
        value = row.get(column)
        if not isinstance(value, str) or not SAFE_NAME.fullmatch(value) or ".." in value:
            raise SchemaError(
                f"{column!r} must be a string of letters, digits and . _ : -, got {value!r}"
            )


def fresh_rows(
    rows: Sequence[Mapping[str, Any]], key: str, stored: Container[str]
) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    """The rows whose key is neither stored nor repeated earlier in ``rows`` (by key, in
    order), and the keys skipped."""
    fresh: dict[str, Mapping[str, Any]] = {}
    skipped: list[str] = []
    for row in rows:
        value = row[key]
        if value in fresh or value in stored:
            skipped.append(value)
        else:
            fresh[value] = row
    return fresh, skipped


def to_arrow(
    rows: Sequence[Mapping[str, Any]], schema: pa.Schema, table: str, key: str
) -> pa.Table:
    """``rows`` as one contiguous Arrow table of ``schema``, or :class:`SchemaError`."""
    # the schema's questions asked once, not per row and field
    required = [f.name for f in schema if not f.nullable]
    lists = [f.name for f in schema if pa.types.is_list(f.type)]
    for row in rows:
        for name in required:
            if row.get(name) is None:
                raise SchemaError(
                    f"rows do not fit table {table!r}: {name} is required (row {row[key]!r})"
                )
        for name in lists:
            value = row.get(name)
            if value is not None and not isinstance(value, list | tuple):
                raise SchemaError(f"rows do not fit table {table!r}: {name} must be a list")
    try:
        arrow = pa.Table.from_pylist(list(rows), schema=schema)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise SchemaError(f"rows do not fit table {table!r}: {exc}") from exc
    # one contiguous chunk, so that row groups follow the writer's row count exactly
    return arrow.combine_chunks()


def complete(row: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    """A row read from an older file, with the nullable columns added since as ``None``
    (a schema only ever grows by nullable columns), in the schema's column order."""
    for f in schema:
        if f.name not in row and f.nullable:
            row[f.name] = None
    if list(row) != schema.names and set(schema.names) <= set(row):
        return {name: row[name] for name in schema.names}
    return row


def shares(
    batches: Sequence[tuple[object, Sequence[Mapping[str, Any]]]],
    key: str,
    written: Collection[str],
    files: tuple[str, ...],
) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    """Each batch's share of one append that stored ``written`` in ``files``: (keys
    written, keys skipped, files), a key written counted for the first batch naming it."""
    left = set(written)
    out: list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = []
    for _batch, part in batches:
        mine: list[str] = []
        other: list[str] = []
        for row in part:
            value = row[key]
            (mine if value in left else other).append(value)
            left.discard(value)
        out.append((tuple(mine), tuple(other), files if mine else ()))
    return out
