"""ParquetTable writes and reads: layout, round trips, dedup, schema errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cold_store import (
    AppendResult,
    ColdStore,
    CommitFailed,
    ParquetTable,
    RecordNotFound,
    SchemaError,
)
from cold_store.schemas import CHAINS
from tests.cold_store.conftest import OpenStore
from tests.cold_store.helpers import (
    DAY,
    OTHER_DAY,
    SMALL,
    all_files,
    chain_row,
    parquet_files,
)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[ParquetTable]:
    table = ParquetTable(tmp_path / "small", "t", SMALL, key="k", partition_by="p")
    yield table
    table.close()


def keys_in(path: Path, column: str = "chain_id") -> list[str]:
    return pq.read_table(path, columns=[column]).column(column).to_pylist()


# ---- construction ---------------------------------------------------------------------
@pytest.mark.parametrize(("key", "partition"), [("nope", "p"), ("k", "nope")])
def test_key_and_partition_must_be_columns(tmp_path: Path, key: str, partition: str) -> None:
    with pytest.raises(SchemaError, match="must be columns"):
        ParquetTable(tmp_path, "t", SMALL, key=key, partition_by=partition)


# ---- round trips ----------------------------------------------------------------------
def test_append_then_get_round_trips_every_column(store: ColdStore) -> None:
    full = chain_row("c-full")
    sparse = chain_row(
        "c-sparse",
        reported_at=None,
        session_id=None,
        error_json=None,
        tool_types=[],
        topology=["only", None, "x"],
        gapped=True,
        occurrences=2**40,
        record_version=7,
    )

    result = store.chains.append([full, sparse])

    assert result.written == ("c-full", "c-sparse")
    assert result.skipped == ()
    for row in (full, sparse):
        got = store.chains.get(row["chain_id"])
        assert got == row
        assert list(got) == CHAINS.names
    got = store.chains.get("c-full")
    for column in ("archived_at", "reported_at"):
        assert isinstance(got[column], datetime)
        assert got[column].utcoffset() is not None
        assert got[column].utcoffset().total_seconds() == 0
    assert got["archived_at"].microsecond == full["archived_at"].microsecond
    assert store.chains.get("c-sparse")["reported_at"] is None


def test_non_utc_aware_timestamps_are_stored_as_the_same_instant(store: ColdStore) -> None:
    plus2 = timezone(timedelta(hours=2))
    row = chain_row("c-tz", archived_at=datetime(2024, 5, 1, 14, 0, tzinfo=plus2))

    store.chains.append([row])

    got = store.chains.get("c-tz")["archived_at"]
    assert got == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert got.utcoffset().total_seconds() == 0


def test_small_table_round_trip_and_layout(small: ParquetTable) -> None:
    rows = [{"k": "a", "p": "x", "v": 1}, {"k": "b", "p": "x", "v": None}]

    result = small.append(rows)

    assert small.get("a") == rows[0]
    assert small.get("b") == rows[1]
    (rel,) = result.files
    assert rel.startswith("p=x/part-") and rel.endswith(".parquet")
    assert parquet_files(small.dir) == [small.dir / rel]


def test_rows_span_several_row_groups(tmp_path: Path) -> None:
    table = ParquetTable(tmp_path, "t", SMALL, key="k", partition_by="p", row_group_size=2)
    try:
        rows = [{"k": f"k{i}", "p": "x", "v": i} for i in range(7)]
        (rel,) = table.append(rows).files

        assert pq.ParquetFile(table.dir / rel).metadata.num_row_groups == 4
        for row in rows:
            assert table.get(row["k"]) == row
    finally:
        table.close()


# ---- layout ---------------------------------------------------------------------------
def test_rows_land_in_partition_folders(store: ColdStore) -> None:
    result = store.chains.append([chain_row("c1"), chain_row("c2")])

    files = parquet_files(store.root)
    assert len(files) == 1
    (path,) = files
    assert path.parent == store.root / "chains" / f"archive_date={DAY}"
    assert path.name.startswith("part-")
    assert path.suffix == ".parquet"
    assert result.files == (path.relative_to(store.root / "chains").as_posix(),)
    assert keys_in(path) == ["c1", "c2"]


def test_one_append_with_two_partition_values_makes_two_files(store: ColdStore) -> None:
    result = store.chains.append(
        [chain_row("c1", DAY), chain_row("c2", OTHER_DAY), chain_row("c3", DAY)]
    )

    assert len(result.files) == 2
    files = parquet_files(store.root)
    assert [p.parent.name for p in files] == [f"archive_date={DAY}", f"archive_date={OTHER_DAY}"]
    assert keys_in(files[0]) == ["c1", "c3"]
    assert keys_in(files[1]) == ["c2"]
    assert sorted(result.files) == sorted(
        p.relative_to(store.root / "chains").as_posix() for p in files
    )
    assert {r: store.chains.get(r)["archive_date"] for r in ("c1", "c2", "c3")} == {
        "c1": DAY,
        "c2": OTHER_DAY,
        "c3": DAY,
    }


def test_every_append_publishes_a_new_immutable_file(store: ColdStore) -> None:
    first = store.chains.append([chain_row("c1")])
    before = {p: p.read_bytes() for p in parquet_files(store.root)}

    second = store.chains.append([chain_row("c2")])

    assert first.files != second.files
    after = parquet_files(store.root)
    assert len(after) == 2
    for path, data in before.items():
        assert path.read_bytes() == data


# ---- dedup ----------------------------------------------------------------------------
def test_appending_an_existing_key_skips_it(store: ColdStore) -> None:
    store.chains.append([chain_row("c1")])

    result = store.chains.append([chain_row("c1", occurrences=99), chain_row("c2")])

    assert result == AppendResult(written=("c2",), skipped=("c1",), files=result.files)
    assert len(result.files) == 1
    assert store.chains.get("c1")["occurrences"] == chain_row("c1")["occurrences"]
    stored = [k for p in parquet_files(store.root) for k in keys_in(p)]
    assert sorted(stored) == ["c1", "c2"]
    assert store.chains.count() == 2


def test_appending_only_existing_keys_publishes_nothing(store: ColdStore) -> None:
    store.chains.append([chain_row("c1"), chain_row("c2")])
    before = parquet_files(store.root)

    result = store.chains.append([chain_row("c2"), chain_row("c1")])

    assert result == AppendResult(written=(), skipped=("c2", "c1"), files=())
    assert parquet_files(store.root) == before


def test_duplicates_within_one_call_are_written_once(store: ColdStore) -> None:
    first = chain_row("c1", rule="first")
    result = store.chains.append([first, chain_row("c2"), chain_row("c1", rule="second")])

    assert result.written == ("c1", "c2")
    assert result.skipped == ("c1",)
    (path,) = parquet_files(store.root)
    assert keys_in(path) == ["c1", "c2"]
    assert store.chains.get("c1") == first


def test_duplicates_within_one_call_across_partitions_are_written_once(store: ColdStore) -> None:
    result = store.chains.append([chain_row("c1", DAY), chain_row("c1", OTHER_DAY)])

    assert result.written == ("c1",)
    assert result.skipped == ("c1",)
    assert len(result.files) == 1
    stored = [k for p in parquet_files(store.root) for k in keys_in(p)]
    assert stored == ["c1"]
    assert store.chains.get("c1")["archive_date"] == DAY


# ---- contains / count / all_keys -------------------------------------------------------
def test_contains_count_and_all_keys_in_publication_order(store: ColdStore) -> None:
    assert store.chains.count() == 0
    assert store.chains.all_keys() == []
    assert not store.chains.contains("zeta")

    store.chains.append([chain_row("zeta"), chain_row("alpha")])
    store.chains.append([chain_row("mid")])
    store.chains.append([chain_row("beta", OTHER_DAY)])
    store.chains.append([chain_row("aaa")])

    assert store.chains.count() == 5
    assert store.chains.all_keys() == ["zeta", "alpha", "mid", "beta", "aaa"]
    for key in ("zeta", "alpha", "mid", "beta", "aaa"):
        assert store.chains.contains(key)
    assert not store.chains.contains("gamma")
    assert not store.chains.contains("")


def test_get_of_an_unknown_key_raises_record_not_found(store: ColdStore) -> None:
    store.chains.append([chain_row("c1")])

    with pytest.raises(RecordNotFound) as info:
        store.chains.get("c2")

    assert info.value.table == "chains"
    assert info.value.key == "c2"


def test_scan_yields_every_row_in_publication_order(store: ColdStore) -> None:
    rows = [chain_row("b"), chain_row("a", OTHER_DAY), chain_row("c")]
    store.chains.append(rows[:2])
    store.chains.append(rows[2:])

    assert list(store.chains.scan()) == [rows[0], rows[1], rows[2]]
    assert list(store.chains.scan(columns=["rule"])) == [
        {"rule": "never", "chain_id": k} for k in ("b", "a", "c")
    ]


# ---- schema errors --------------------------------------------------------------------
def _assert_nothing_published(store: ColdStore) -> None:
    assert parquet_files(store.root) == []
    assert all_files(store.root / "chains") == []
    assert store.chains.count() == 0
    assert store.chains.all_keys() == []


@pytest.mark.parametrize("bad_key", [None, "", 42, b"c1"])
def test_a_row_without_a_string_key_raises_schema_error(store: ColdStore, bad_key: object) -> None:
    bad = chain_row("c-bad")
    if bad_key is None:
        del bad["chain_id"]
    else:
        bad["chain_id"] = bad_key

    with pytest.raises(SchemaError, match="chain_id"):
        store.chains.append([chain_row("c-good"), bad])

    _assert_nothing_published(store)


@pytest.mark.parametrize(
    "overrides",
    [
        {"occurrences": "many"},
        {"topology": 5},
        {"rule": 5},
        {"archived_at": "yesterday"},
        {"record_version": 2**40},
    ],
    ids=["text-in-int", "int-in-list", "int-in-text", "text-in-timestamp", "int32-overflow"],
)
def test_a_row_not_fitting_the_schema_raises_schema_error(
    store: ColdStore, overrides: dict[str, object]
) -> None:
    with pytest.raises(SchemaError, match="do not fit"):
        store.chains.append([chain_row("c-good"), chain_row("c-bad", **overrides)])

    _assert_nothing_published(store)
    assert not store.chains.contains("c-good")


@pytest.mark.parametrize("how", ["missing", "null"])
def test_a_row_without_a_required_value_raises_schema_error(store: ColdStore, how: str) -> None:
    # BUG: pa.Table.from_pylist does not enforce nullable=False, so the bad row only
    # fails inside pq.write_table, which append() reports as CommitFailed ("nothing was
    # published; the append may be retried as is") instead of SchemaError.
    bad = chain_row("c-bad")
    if how == "missing":
        del bad["rule"]
    else:
        bad["rule"] = None

    with pytest.raises(SchemaError):
        store.chains.append([chain_row("c-good"), bad])

    _assert_nothing_published(store)


def test_a_row_missing_the_partition_column_raises_schema_error(store: ColdStore) -> None:
    # BUG: append() reads row[partition_by] unguarded and raises a bare KeyError.
    bad = chain_row("c-bad")
    del bad["archive_date"]

    with pytest.raises(SchemaError):
        store.chains.append([chain_row("c-good"), bad])

    _assert_nothing_published(store)


def test_a_bad_row_in_a_later_partition_publishes_nothing(store: ColdStore) -> None:
    # BUG: append() converts and publishes partition by partition, so the partitions
    # sorted before the bad row are already published and indexed when SchemaError
    # is raised.
    with pytest.raises(SchemaError):
        store.chains.append(
            [chain_row("c-good", DAY), chain_row("c-bad", OTHER_DAY, occurrences="many")]
        )

    assert not store.chains.contains("c-good")
    _assert_nothing_published(store)


def test_a_partition_value_cannot_place_files_outside_the_table(
    store: ColdStore, root: Path
) -> None:
    # BUG: partition values are pasted into the file path unchecked; "x/../../escape"
    # publishes into <root>/escape/, outside <root>/chains/, where reconcile never looks.
    with contextlib.suppress(SchemaError):
        store.chains.append([chain_row("c-esc", "x/../../escape")])
    outside = [p for p in parquet_files(root) if (root / "chains") not in p.parents]
    assert outside == []


# ---- commit failures ------------------------------------------------------------------
def test_a_failed_publication_raises_commit_failed_and_indexes_nothing(
    open_store: OpenStore,
) -> None:
    store = open_store()
    blocker = store.root / "chains" / f"archive_date={DAY}"
    blocker.write_bytes(b"a file where the partition folder should be")

    with pytest.raises(CommitFailed):
        store.chains.append([chain_row("c1")])

    assert not store.chains.contains("c1")
    assert store.chains.count() == 0
    assert parquet_files(store.root) == []

    blocker.unlink()
    result = store.chains.append([chain_row("c1")])  # retried as is
    assert result.written == ("c1",)
    assert store.chains.get("c1") == chain_row("c1")


def test_schema_is_the_chains_layout(store: ColdStore) -> None:
    store.chains.append([chain_row("c1")])
    (path,) = parquet_files(store.root)

    assert pq.read_schema(path).equals(CHAINS, check_metadata=False)
    assert pq.read_schema(path).field("archived_at").type == pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize("key", ["a/b", "with space", "", "x" * 201])
def test_keys_that_no_pointer_could_name_are_refused(store: ColdStore, key: str) -> None:
    with pytest.raises(SchemaError):
        store.chains.append([chain_row(key)])
    assert store.chains.count() == 0


def test_a_string_for_a_list_column_is_refused(store: ColdStore) -> None:
    with pytest.raises(SchemaError, match="topology must be a list"):
        store.chains.append([chain_row("c1", topology="abc")])


def test_a_file_written_before_a_nullable_column_was_added_reads_it_as_null(
    tmp_path: Path,
) -> None:
    old = pa.schema([f for f in SMALL if f.name != "v"])
    ParquetTable(tmp_path, "t", old, key="k", partition_by="p").append([{"k": "a", "p": "x"}])
    grown = ParquetTable(tmp_path, "t", SMALL, key="k", partition_by="p")
    grown.append([{"k": "b", "p": "x", "v": 2}])
    assert grown.get("a") == {"k": "a", "p": "x", "v": None}
    assert list(grown.scan()) == [{"k": "a", "p": "x", "v": None}, {"k": "b", "p": "x", "v": 2}]
    assert list(grown.scan(["v"])) == [{"v": None, "k": "a"}, {"v": 2, "k": "b"}]
    assert grown.quarantined() == []
