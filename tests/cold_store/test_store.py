"""ColdStore: pointers, resolution that reads one file, reopening."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cold_store import (
    ColdStore,
    PointerError,
    RecordNotFound,
    make_pointer,
    parse_pointer,
)
from tests.cold_store.conftest import OpenStore
from tests.cold_store.helpers import OTHER_DAY, chain_row, corrupt, parquet_files, tear


# ---- pointers -------------------------------------------------------------------------
def test_make_pointer_format() -> None:
    assert make_pointer("chains", "abc123") == "cold://chains/abc123"


@pytest.mark.parametrize(
    ("table", "key"),
    [("chains", "abc123"), ("chains", "0f" * 16), ("t", "key-with.dots_and=eq")],
)
def test_make_and_parse_pointer_round_trip(table: str, key: str) -> None:
    assert parse_pointer(make_pointer(table, key)) == (table, key)


@pytest.mark.parametrize(
    "pointer",
    [
        "",
        "chains/abc",
        "cold:/chains/abc",
        "COLD://chains/abc",
        "s3://chains/abc",
        "cold://",
        "cold://chains",
        "cold://chains/",
        "cold:///abc",
        "cold://chains/a/b",
        "cold://chains/abc/",
    ],
)
def test_malformed_pointers_raise_pointer_error(pointer: str) -> None:
    with pytest.raises(PointerError) as info:
        parse_pointer(pointer)
    assert info.value.pointer == pointer


def test_resolve_rejects_malformed_pointers_and_unknown_tables(store: ColdStore) -> None:
    store.chains.append([chain_row("c1")])

    with pytest.raises(PointerError, match="must start with"):
        store.resolve("chains/c1")
    with pytest.raises(PointerError, match="unknown table 'models'"):
        store.resolve("cold://models/c1")


# ---- resolution -----------------------------------------------------------------------
def test_resolve_returns_the_full_record(store: ColdStore) -> None:
    rows = [chain_row("c1"), chain_row("c2", OTHER_DAY)]
    store.chains.append(rows)

    assert store.resolve("cold://chains/c1") == rows[0]
    assert store.resolve(make_pointer("chains", "c2")) == rows[1]
    assert store.table("chains") is store.chains


def test_resolve_of_an_unknown_key_raises_record_not_found(store: ColdStore) -> None:
    store.chains.append([chain_row("c1")])

    with pytest.raises(RecordNotFound) as info:
        store.resolve("cold://chains/nope")

    assert (info.value.table, info.value.key) == ("chains", "nope")


@pytest.mark.parametrize("damage", [corrupt, tear], ids=["garbage", "torn"])
def test_resolution_reads_only_the_file_holding_the_key(
    store: ColdStore, damage: Callable[[Path], None]
) -> None:
    store.chains.append([chain_row("healthy")])
    (doomed_rel,) = store.chains.append([chain_row("doomed-1"), chain_row("doomed-2")]).files
    store.chains.append([chain_row("also-healthy", OTHER_DAY)])
    doomed_file = store.chains.dir / doomed_rel
    damage(doomed_file)
    damaged_bytes = doomed_file.read_bytes()

    assert store.resolve("cold://chains/healthy") == chain_row("healthy")
    assert store.resolve("cold://chains/also-healthy") == chain_row("also-healthy", OTHER_DAY)

    # The damaged file was never opened by those lookups: still in place, untouched,
    # not quarantined, its keys still indexed.
    assert store.quarantined() == []
    assert doomed_file.read_bytes() == damaged_bytes
    assert store.chains.contains("doomed-1")
    assert len(parquet_files(store.root)) == 3


# ---- reopening ------------------------------------------------------------------------
def test_the_index_survives_reopening(open_store: OpenStore) -> None:
    first = open_store()
    first.chains.append([chain_row("c1"), chain_row("c2", OTHER_DAY)])
    first.chains.append([chain_row("c3")])
    first.close()

    second = open_store()

    assert second.chains.reconcile() == []  # nothing had to be re-indexed
    assert second.chains.count() == 3
    assert second.chains.all_keys() == ["c1", "c2", "c3"]
    assert second.resolve("cold://chains/c2") == chain_row("c2", OTHER_DAY)
    assert second.resolve("cold://chains/c3") == chain_row("c3")
    assert second.quarantined() == []


def test_appends_after_reopening_still_skip_known_keys(open_store: OpenStore) -> None:
    first = open_store()
    first.chains.append([chain_row("c1")])
    first.close()

    second = open_store()
    result = second.chains.append([chain_row("c1"), chain_row("c2")])

    assert result.written == ("c2",)
    assert result.skipped == ("c1",)
    assert len(parquet_files(second.root)) == 2
    assert second.chains.all_keys() == ["c1", "c2"]


def test_index_lives_at_the_documented_path(store: ColdStore, root: Path) -> None:
    store.chains.append([chain_row("c1")])

    assert (root / "chains.index.sqlite").is_file()
    assert (root / "chains").is_dir()


def test_evicted_tools_live_in_their_own_table(store: ColdStore) -> None:
    row = {
        "record_id": "m1",
        "archive_date": "2026-11-30",
        "evicted_at": datetime(2026, 11, 30, tzinfo=UTC),
        "tool_id": "html_parser",
        "tool_type": "parser",
        "description": "Parse HTML",
        "document": "html parser: Parse HTML",
        "input_schema_json": "{}",
        "metadata_json": "{}",
        "credentials_json": "[]",
        "chain_ids": ["c1"],
        "decision_json": "{}",
        "schema_bytes": 10,
        "schema_tokens": 3,
        "record_version": 1,
    }
    store.tools.append([row])
    assert store.resolve("cold://tools/m1") == row
    assert store.chains.count() == 0
    assert (store.root / "tools" / "archive_date=2026-11-30").is_dir()
