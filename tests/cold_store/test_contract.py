"""The contract every cold store backend keeps, run over each: the local Parquet folder,
a Delta table on a local folder, a Delta table on S3 (a real moto server over HTTP).

Appends are idempotent (by key, and a replayed batch writes nothing), records round-trip
every column, reads see each key once, stores opened later or by other processes see
everything, concurrent writer processes lose nothing, and damaged files are found by
status checks and skipped by reads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from cold_store import (
    ColdStore,
    CommitFailed,
    RecordNotFound,
    RecordQuarantined,
    SchemaError,
)
from cold_store.schemas import CHAINS
from tests.cold_store.backends import Backend, garbage, torn
from tests.cold_store.helpers import OTHER_DAY, chain_row, run_writers
from tests.cold_store.writer import own_keys, shared_keys


def tool_row(record_id: str) -> dict[str, object]:
    return {
        "record_id": record_id,
        "archive_date": "2026-11-30",
        "evicted_at": datetime(2026, 11, 30, 8, 0, 1, 250, tzinfo=UTC),
        "tool_id": f"tool-{record_id}",
        "tool_type": "parser",
        "description": "Parse HTML",
        "document": "html parser: Parse HTML",
        "input_schema_json": "{}",
        "metadata_json": "{}",
        "credentials_json": "[]",
        "chain_ids": ["c1", "c2"],
        "decision_json": "{}",
        "schema_bytes": 10,
        "schema_tokens": 3,
        "record_version": 1,
    }


# ---- appends and reads ----------------------------------------------------------------
def test_append_then_get_round_trips_every_column(backend: Backend) -> None:
    store = backend.open()
    full = chain_row("c-full")
    sparse = chain_row(
        "c-sparse",
        reported_at=None,
        session_id=None,
        error_json=None,
        tool_types=[],
        topology=["only", None, "x"],
        occurrences=2**40,
        record_version=7,
    )

    result = store.chains.append([full, sparse])

    assert result.written == ("c-full", "c-sparse") and result.skipped == ()
    assert len(result.files) >= 1
    for row in (full, sparse):
        got = store.chains.get(str(row["chain_id"]))
        assert got == row
        assert list(got) == CHAINS.names
    stamp = store.chains.get("c-full")["archived_at"]
    assert stamp.utcoffset() is not None and stamp.utcoffset().total_seconds() == 0
    assert stamp.microsecond == full["archived_at"].microsecond


def test_tools_live_in_their_own_table(backend: Backend) -> None:
    store = backend.open()
    store.tools.append([tool_row("m1")])

    assert store.resolve("cold://tools/m1") == tool_row("m1")
    assert store.chains.count() == 0 and store.tools.count() == 1
    with pytest.raises(RecordNotFound):
        store.resolve("cold://chains/m1")


def test_stored_keys_and_repeats_within_a_call_are_skipped(backend: Backend) -> None:
    store = backend.open()
    store.chains.append([chain_row("c1"), chain_row("c2", OTHER_DAY)])

    again = store.chains.append([chain_row("c2"), chain_row("c3"), chain_row("c3")])

    assert again.written == ("c3",)
    assert again.skipped == ("c2", "c3")
    assert store.chains.count() == 3
    assert store.chains.get("c2") == chain_row("c2", OTHER_DAY)  # the first copy stays
    assert sorted(store.chains.all_keys()) == ["c1", "c2", "c3"]


def test_a_replayed_batch_writes_nothing(backend: Backend) -> None:
    store = backend.open()
    rows = [chain_row(f"c{i}") for i in range(5)]
    first = store.chains.append(rows, batch="batch-1")
    files_before = backend.data_files("chains")

    replay = store.chains.append(rows, batch="batch-1")

    assert first.written == tuple(f"c{i}" for i in range(5))
    assert replay.written == () and replay.files == ()
    assert replay.skipped == first.written
    assert backend.data_files("chains") == files_before
    assert store.chains.count() == 5


def test_an_append_of_only_stored_keys_publishes_no_file(backend: Backend) -> None:
    store = backend.open()
    store.chains.append([chain_row("c1")])
    files_before = backend.data_files("chains")

    result = store.chains.append([chain_row("c1")], batch="another-batch")

    assert (result.written, result.files) == ((), ())
    assert backend.data_files("chains") == files_before


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"chain_id": "bad/key"}, "letters, digits"),
        ({"chain_id": None}, "letters, digits"),
        ({"archive_date": "../up"}, "archive_date"),
        ({"topology": "not-a-list"}, "must be a list"),
        ({"rule": None}, "rule is required"),
        ({"occurrences": "many"}, "do not fit"),
    ],
)
def test_a_bad_row_raises_schema_error_and_nothing_is_written(
    backend: Backend, bad: dict[str, object], message: str
) -> None:
    store = backend.open()
    rows = [chain_row("good"), {**chain_row("bad"), **bad}]

    with pytest.raises(SchemaError, match=message):
        store.chains.append(rows)

    assert store.chains.count() == 0
    assert backend.data_files("chains") == []


def test_contains_count_and_unknown_keys(backend: Backend) -> None:
    store = backend.open()
    assert store.chains.count() == 0 and store.chains.all_keys() == []
    store.chains.append([chain_row("a"), chain_row("b")])
    store.chains.append([chain_row("c", OTHER_DAY)])

    assert store.chains.contains("a") and not store.chains.contains("z")
    assert store.chains.contains_many(["a", "c", "z", "a"]) == {"a", "c"}
    assert store.chains.count() == 3
    with pytest.raises(RecordNotFound) as info:
        store.chains.get("z")
    assert (info.value.table, info.value.key) == ("chains", "z")


def test_scan_yields_each_key_once_and_projects_columns(backend: Backend) -> None:
    store = backend.open()
    store.chains.append([chain_row(f"c{i}") for i in range(3)])
    store.chains.append([chain_row("c1"), chain_row("c9", OTHER_DAY)])

    full = list(store.chains.scan())
    some = list(store.chains.scan(["topology", "terminal_signature"]))

    assert sorted(r["chain_id"] for r in full) == ["c0", "c1", "c2", "c9"]
    assert {r["chain_id"]: r for r in full}["c9"] == chain_row("c9", OTHER_DAY)
    assert all(set(r) == {"topology", "terminal_signature", "chain_id"} for r in some)
    assert sorted(r["chain_id"] for r in some) == ["c0", "c1", "c2", "c9"]


def test_many_rows_span_several_row_groups_and_each_resolves(backend: Backend) -> None:
    store = backend.open()
    rows = [chain_row(f"c{i:04d}") for i in range(2500)]  # row groups of 1024
    store.chains.append(rows)

    for i in (0, 1023, 1024, 2047, 2048, 2499):
        assert store.chains.get(f"c{i:04d}") == rows[i]
    assert store.chains.count() == 2500


# ---- group commits: several callers' batches at once ---------------------------------------
def test_append_batches_stores_several_batches_at_once_and_reports_each(backend: Backend) -> None:
    store = backend.open()
    store.chains.append([chain_row("old")], batch="earlier")

    results = store.chains.append_batches(
        {
            "s1": [chain_row("a1"), chain_row("a2")],
            "s2": [chain_row("b1"), chain_row("old")],  # one key already stored
            "s3": [chain_row("a2"), chain_row("c1")],  # one key of an earlier batch
        }
    )

    assert {b: (r.written, r.skipped) for b, r in results.items()} == {
        "s1": (("a1", "a2"), ()),
        "s2": (("b1",), ("old",)),
        "s3": (("c1",), ("a2",)),
    }
    if backend.is_delta:  # one commit: one file holds every batch's rows
        assert len({f for r in results.values() for f in r.files}) == 1
    assert sorted(store.chains.all_keys()) == ["a1", "a2", "b1", "c1", "old"]
    assert store.chains.get("c1") == chain_row("c1")
    assert store.chains.committed_batches(["s1", "s2", "s3", "earlier", "never"]) == {
        "s1",
        "s2",
        "s3",
        "earlier",
    }
    # another process sees the same
    assert backend.open().chains.committed_batches(["s2", "never"]) == {"s2"}


def test_a_replayed_group_commit_writes_nothing(backend: Backend) -> None:
    store = backend.open()
    batches = {"s1": [chain_row("a1")], "s2": [chain_row("b1"), chain_row("b2")]}
    store.chains.append_batches(batches)

    again = store.chains.append_batches(batches)

    assert {b: r.written for b, r in again.items()} == {"s1": (), "s2": ()}
    assert {b: r.skipped for b, r in again.items()} == {"s1": ("a1",), "s2": ("b1", "b2")}
    assert store.chains.count() == 3


def test_a_bad_row_in_one_batch_of_a_group_commit_writes_no_batch(backend: Backend) -> None:
    store = backend.open()
    with pytest.raises(SchemaError):
        store.chains.append_batches(
            {"s1": [chain_row("a1")], "s2": [{**chain_row("b1"), "occurrences": "many"}]}
        )
    assert store.chains.count() == 0
    assert store.chains.committed_batches(["s1", "s2"]) == set()


# ---- other stores, other processes ------------------------------------------------------
def test_a_store_opened_later_sees_everything(backend: Backend) -> None:
    first = backend.open()
    first.chains.append([chain_row("c1"), chain_row("c2", OTHER_DAY)])
    first.tools.append([tool_row("m1")])
    first.close()

    second = backend.open()
    result = second.chains.append([chain_row("c1"), chain_row("c3")])

    assert result.written == ("c3",) and result.skipped == ("c1",)
    assert sorted(second.chains.all_keys()) == ["c1", "c2", "c3"]
    assert second.resolve("cold://chains/c2") == chain_row("c2", OTHER_DAY)
    assert second.resolve("cold://tools/m1") == tool_row("m1")


def test_a_read_only_store_reads_and_refuses_writes(backend: Backend) -> None:
    backend.open().chains.append([chain_row("c1")])

    reader = backend.open(writable=False)

    assert reader.chains.get("c1") == chain_row("c1")
    assert reader.chains.count() == 1
    with pytest.raises(CommitFailed, match="read-only"):
        reader.chains.append([chain_row("c2")])


def test_a_read_only_store_of_nothing_is_empty_and_creates_nothing(backend: Backend) -> None:
    reader = backend.open(writable=False)

    assert reader.chains.count() == 0 and reader.tools.count() == 0
    assert list(reader.chains.scan()) == []
    with pytest.raises(RecordNotFound):
        reader.chains.get("c1")
    assert backend.data_files("chains") == []


@pytest.mark.integration  # writer processes
def test_concurrent_writer_processes_lose_nothing(backend: Backend) -> None:
    workers, batches, size = 3, 4, 5
    backend.open()  # creates the tables, as the first sidecar to start would

    written = run_writers(backend, workers, batches, size)

    expected = {k for b in range(batches) for k in shared_keys(b, size)}
    expected |= {k for w in range(workers) for b in range(batches) for k in own_keys(w, b, size)}
    assert set().union(*map(set, written)) == expected
    store = backend.open()
    assert store.chains.count() == len(expected)
    scanned = [r["chain_id"] for r in store.chains.scan(["chain_id"])]
    assert sorted(scanned) == sorted(expected)
    for key in ("shared-0-0", "w2-3-4"):
        assert store.chains.get(key) == chain_row(key)


# ---- damage and status ----------------------------------------------------------------
def test_a_fresh_store_reports_nothing_wrong(backend: Backend) -> None:
    store = backend.open()
    store.chains.append([chain_row("c1")])

    assert store.check_footers() == []
    assert store.verify() == [] and store.verify(deep=True) == []
    assert store.quarantined() == []
    assert store.health() == "ok"


@pytest.mark.parametrize("damage", [garbage, torn], ids=["garbage", "torn"])
def test_a_damaged_file_is_found_by_check_footers_and_skipped(backend: Backend, damage) -> None:  # type: ignore[no-untyped-def]
    store = backend.open()
    store.chains.append([chain_row("healthy")])
    store.chains.append([chain_row("doomed-1"), chain_row("doomed-2")])
    doomed = backend.file_holding("chains", "doomed-1")
    backend.damage(doomed, damage)

    assert store.chains.get("healthy") == chain_row("healthy")  # another file: not read
    bad = store.check_footers()

    assert bad == [f"chains/{doomed.removeprefix('chains/')}"]
    (q,) = store.quarantined()
    assert Path(doomed).name in str(q.path)
    assert store.chains.count() == 1
    assert not store.chains.contains("doomed-1")
    assert [r["chain_id"] for r in store.chains.scan()] == ["healthy"]
    # the lost record can be archived again
    assert store.chains.append([chain_row("doomed-1")]).written == ("doomed-1",)
    assert store.chains.get("doomed-1") == chain_row("doomed-1")


def test_a_damaged_file_read_by_get_raises_record_quarantined(backend: Backend) -> None:
    store = backend.open()
    store.chains.append([chain_row("doomed")])
    backend.damage(backend.file_holding("chains", "doomed"), garbage)

    with pytest.raises(RecordQuarantined) as info:
        store.chains.get("doomed")
    assert info.value.key == "doomed"
    with pytest.raises(RecordQuarantined):
        store.chains.get("doomed")
    assert len(store.quarantined()) == 1


def test_verify_reports_files_not_as_published(backend: Backend) -> None:
    store = backend.open()
    store.chains.append([chain_row("c1")])
    store.chains.append([chain_row("c2")])
    same_size = backend.file_holding("chains", "c1")
    longer = backend.file_holding("chains", "c2")
    backend.damage(same_size, garbage)

    assert store.verify() == []  # sizes only: a same-size overwrite passes
    (deep,) = store.verify(deep=True)
    assert Path(same_size).name in str(deep.path)

    backend.damage(longer, lambda data: data + b"tail")
    shallow = store.verify()
    assert len(shallow) == 1 and "bytes where" in shallow[0].reason
    assert store.quarantined() == []  # reported, not moved aside


def test_a_file_gone_from_the_store_is_reported_missing(backend: Backend) -> None:
    store = backend.open()
    store.chains.append([chain_row("c1")])
    store.chains.append([chain_row("c2")])
    backend.delete(backend.file_holding("chains", "c2"))

    (gone,) = store.verify()
    assert gone.reason == "missing"
    assert store.chains.get("c1") == chain_row("c1")


# ---- maintenance ----------------------------------------------------------------------
def test_maintenance_keeps_every_record(backend: Backend) -> None:
    store = backend.open()
    for i in range(6):
        store.chains.append([chain_row(f"c{i}")])
    store.tools.append([tool_row("m1")])

    compacted = store.compact()
    store.checkpoint()
    vacuumed = store.vacuum()

    assert [m.table for m in compacted] == ["chains", "tools"]
    assert sum(m.files_removed for m in vacuumed) == 0  # nothing is old enough yet
    assert store.chains.count() == 6
    assert all(store.chains.get(f"c{i}") == chain_row(f"c{i}") for i in range(6))
    reopened: ColdStore = backend.open()
    assert sorted(reopened.chains.all_keys()) == [f"c{i}" for i in range(6)]
    assert reopened.resolve("cold://tools/m1") == tool_row("m1")
    assert reopened.chains.append([chain_row("c0"), chain_row("c6")]).written == ("c6",)
