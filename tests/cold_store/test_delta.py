"""What the Delta backend adds to the contract: exactly-once rows under racing writers,
outcomes of failed commits, files no commit names, the key cache across another
process's compaction, vacuum's retention, the schema growing, outages of the store."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from cold_store import (
    ColdStore,
    CommitFailed,
    CommitStateUnknown,
    SchemaError,
    StoreUnavailable,
)
from cold_store.delta import MIN_VACUUM_RETENTION, DeltaColdTable
from cold_store.delta.append import FAILED_ATTEMPTS, NONCE
from cold_store.delta.files import DataFiles
from cold_store.schemas import CHAINS
from tests.cold_store.backends import Backend, committed_rows, garbage
from tests.cold_store.helpers import chain_row, run_writers
from tests.cold_store.writer import own_keys, shared_keys

Commit = Callable[[pa.Table, list[str], str], None]


def delta_table(store: ColdStore, name: str = "chains") -> DeltaColdTable:
    table = store.table(name)
    assert isinstance(table, DeltaColdTable)
    return table


def inject(
    monkeypatch: pytest.MonkeyPatch,
    table: DeltaColdTable,
    fault: Callable[[Commit, pa.Table, list[str], str], None],
    times: int = 1,
) -> None:
    """Run ``fault(real_commit, data, batches, nonce)`` in place of the table's next
    ``times`` commits."""
    real = table._appender._commit
    left = [times]

    def once(data: pa.Table, batches: list[str], nonce: str) -> None:
        left[0] -= 1
        if left[0] == 0:
            monkeypatch.setattr(table._appender, "_commit", real)
        fault(real, data, batches, nonce)

    monkeypatch.setattr(table._appender, "_commit", once)


# ---- racing writers ---------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("workers", [2, 4])
def test_racing_processes_write_each_key_exactly_once(delta_backend: Backend, workers: int) -> None:
    batches, size = 3, 4
    delta_backend.open()

    written = run_writers(delta_backend, workers, batches, size)

    every = [k for keys in written for k in keys]
    assert len(every) == len(set(every)), "a key reported written by two processes"
    expected = {k for b in range(batches) for k in shared_keys(b, size)}
    expected |= {k for w in range(workers) for b in range(batches) for k in own_keys(w, b, size)}
    assert set(every) == expected
    assert committed_rows(delta_backend, "chains") == len(expected)  # no copy of any row


def test_an_append_that_loses_its_version_checks_its_keys_again(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = delta_backend.open(), delta_backend.open()
    ours.chains.append([chain_row("c0")])
    table = delta_table(ours)

    def another_writer_first(real: Commit, data: pa.Table, batches: list[str], nonce: str) -> None:
        theirs.chains.append([chain_row("c1"), chain_row("c2")])
        real(data, batches, nonce)  # written against a version that is no longer the latest

    inject(monkeypatch, table, another_writer_first)
    result = ours.chains.append([chain_row("c1"), chain_row("c3")])

    assert result.written == ("c3",) and result.skipped == ("c1",)
    assert sorted(ours.chains.all_keys()) == ["c0", "c1", "c2", "c3"]
    assert committed_rows(delta_backend, "chains") == 4


def test_a_batch_committed_by_another_process_meanwhile_is_a_no_op(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = delta_backend.open(), delta_backend.open()
    rows = [chain_row(f"c{i}") for i in range(3)]

    def same_batch_first(real: Commit, data: pa.Table, batches: list[str], nonce: str) -> None:
        theirs.chains.append(rows, batch="batch-7")
        real(data, batches, nonce)

    inject(monkeypatch, delta_table(ours), same_batch_first)
    result = ours.chains.append(rows, batch="batch-7")

    assert result.written == () and result.skipped == ("c0", "c1", "c2")
    assert committed_rows(delta_backend, "chains") == 3
    assert delta_table(theirs).committed("batch-7")


# ---- failed commits -----------------------------------------------------------------------
def test_a_commit_whose_reply_was_lost_is_found_committed(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = delta_backend.open()

    def reply_lost(real: Commit, data: pa.Table, batches: list[str], nonce: str) -> None:
        real(data, batches, nonce)
        raise OSError("connection reset by peer")

    inject(monkeypatch, delta_table(store), reply_lost)
    result = store.chains.append([chain_row("c1"), chain_row("c2")], batch="b1")

    assert result.written == ("c1", "c2")
    assert store.chains.append([chain_row("c1"), chain_row("c2")], batch="b1").written == ()
    assert committed_rows(delta_backend, "chains") == 2


def test_a_commit_whose_put_was_retried_into_already_exists_is_reported_written(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log entry's put landed but its reply was lost; the client's retry of the put
    was refused (the entry exists): a lost race to Delta, yet the entry is this
    attempt's, so its keys were written by this call, not found stored."""
    store = delta_backend.open()

    def retried_put(real: Commit, data: pa.Table, batches: list[str], nonce: str) -> None:
        real(data, batches, nonce)
        raise CommitFailedError("Failed to commit transaction: version already exists")

    inject(monkeypatch, delta_table(store), retried_put)
    result = store.chains.append([chain_row("c1"), chain_row("c2")], batch="b1")

    assert result.written == ("c1", "c2") and result.skipped == ()
    assert committed_rows(delta_backend, "chains") == 2


def test_a_log_entry_put_that_got_no_answer_is_retried_in_the_call(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = delta_backend.open()

    def put_failed(_real: Commit, _data: pa.Table, _batches: list[str], _nonce: str) -> None:
        raise CommitFailedError("Log storage error: Generic S3 error: connection reset")

    inject(monkeypatch, delta_table(store), put_failed)
    assert store.chains.append([chain_row("c1")], batch="b1").written == ("c1",)
    assert committed_rows(delta_backend, "chains") == 1


def test_an_attempt_that_lands_late_is_found_and_nothing_is_stored_twice(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt's put got no answer and landed only while the second attempt
    was being written: the second loses the race to it, and the call reports the rows
    written by the first."""
    store = delta_backend.open()
    table = delta_table(store)
    first: list[tuple[pa.Table, list[str], str]] = []

    def late(real: Commit, data: pa.Table, batches: list[str], nonce: str) -> None:
        if not first:
            first.append((data, batches, nonce))
            raise CommitFailedError("Log storage error: Generic S3 error: operation timed out")
        # the first attempt's entry lands now, as the version both were written against
        # plus one (as its own put would: through another handle on the table)
        (data1, batches1, nonce1) = first[0]
        other = DeltaTable(table.uri, storage_options=table._log.options)
        assert other.version() == table._log.version
        write_deltalake(
            other,
            data1,
            mode="append",
            commit_properties=CommitProperties(
                max_commit_retries=0,
                app_transactions=[Transaction(app_id=b, version=1) for b in batches1],
                custom_metadata={NONCE: nonce1},
            ),
        )
        real(data, batches, nonce)

    inject(monkeypatch, delta_table(store), late, times=2)
    result = store.chains.append([chain_row("c1"), chain_row("c2")], batch="b1")

    assert result.written == ("c1", "c2")
    assert committed_rows(delta_backend, "chains") == 2


def test_a_put_without_answer_then_an_unreadable_store_is_commit_state_unknown(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = delta_backend.open()
    table = delta_table(store)

    def put_failed(_real: Commit, _data: pa.Table, _batches: list[str], _nonce: str) -> None:
        def unreadable() -> None:
            raise StoreUnavailable("the store does not answer")

        monkeypatch.setattr(table._log, "refresh", unreadable)
        raise CommitFailedError("Log storage error: Generic S3 error: connection reset")

    inject(monkeypatch, table, put_failed)
    with pytest.raises(CommitStateUnknown, match="retry the same batch later"):
        store.chains.append([chain_row("c1")], batch="b1")

    monkeypatch.undo()
    # retried with the same batch: stored once
    assert store.chains.append([chain_row("c1")], batch="b1").written == ("c1",)
    assert committed_rows(delta_backend, "chains") == 1


def test_a_put_without_answer_each_time_is_commit_state_unknown(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = delta_backend.open()

    def put_failed(_real: Commit, _data: pa.Table, _batches: list[str], _nonce: str) -> None:
        raise CommitFailedError("Log storage error: Generic S3 error: connection reset")

    inject(monkeypatch, delta_table(store), put_failed, times=FAILED_ATTEMPTS)
    with pytest.raises(CommitStateUnknown, match="may still land"):
        store.chains.append([chain_row("c1")], batch="b1")
    assert store.chains.count() == 0


def test_a_failure_before_the_commit_is_retried_then_commit_failed(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = delta_backend.open()

    def upload_failed(_real: Commit, _data: pa.Table, _batches: list[str], _nonce: str) -> None:
        raise OSError("Generic S3 error: error sending request")

    inject(monkeypatch, delta_table(store), upload_failed)
    assert store.chains.append([chain_row("c1")]).written == ("c1",)  # once: retried

    inject(monkeypatch, delta_table(store), upload_failed, times=FAILED_ATTEMPTS)
    with pytest.raises(CommitFailed, match="nothing was committed"):
        store.chains.append([chain_row("c2")])
    assert store.chains.all_keys() == ["c1"]


# ---- what readers see ---------------------------------------------------------------------
def test_a_data_file_no_commit_names_is_never_read(delta_backend: Backend) -> None:
    store = delta_backend.open()
    store.chains.append([chain_row("c1")])
    stray = pa.Table.from_pylist([chain_row("ghost")], schema=CHAINS)
    sink = pa.BufferOutputStream()
    pq.write_table(stray, sink)
    stray_name = "chains/part-00000-stray-c000.zstd.parquet"
    delta_backend.write_bytes(stray_name, sink.getvalue().to_pybytes())

    reader = delta_backend.open()
    for s in (store, reader):
        assert not s.chains.contains("ghost")
        assert s.chains.count() == 1
        assert [r["chain_id"] for r in s.chains.scan()] == ["c1"]
    assert reader.chains.append([chain_row("ghost")]).written == ("ghost",)
    assert store.chains.get("ghost") == chain_row("ghost")


def test_a_store_follows_another_store_s_appends(delta_backend: Backend) -> None:
    writer, reader = delta_backend.open(), delta_backend.open()
    assert reader.chains.count() == 0

    writer.chains.append([chain_row("c1")])

    assert reader.chains.contains("c1")
    assert reader.chains.get("c1") == chain_row("c1")


def test_the_key_cache_follows_another_process_s_compaction(delta_backend: Backend) -> None:
    reader, maintainer = delta_backend.open(), delta_backend.open()
    for i in range(5):
        maintainer.chains.append([chain_row(f"c{i}")])
    assert reader.chains.get("c0") == chain_row("c0")  # cache built on the five files
    old_files = delta_backend.data_files("chains")

    (chains, _tools) = maintainer.compact()
    assert (chains.files_removed, chains.files_added) == (5, 1)
    # as a vacuum with a short retention would, once the old files are past it
    for name in old_files:
        delta_backend.delete(name)

    assert [reader.chains.get(f"c{i}") for i in range(5)] == [chain_row(f"c{i}") for i in range(5)]
    assert reader.chains.count() == 5
    assert reader.check_footers() == [] and reader.quarantined() == []
    (merged,) = delta_backend.data_files("chains")
    assert delta_table(reader)._cache.keys["c3"][0] == merged.removeprefix("chains/")


def test_a_reader_with_a_stale_cache_resolves_after_a_compaction(delta_backend: Backend) -> None:
    reader, maintainer = delta_backend.open(), delta_backend.open()
    maintainer.chains.append([chain_row("c1")])
    maintainer.chains.append([chain_row("c2")])
    assert reader.chains.count() == 2

    maintainer.compact()

    # the reader has not looked since: its cache names the compacted-away files,
    # which a vacuum keeps for the retention window, so they still read
    assert reader.chains.get("c2") == chain_row("c2")


# ---- maintenance --------------------------------------------------------------------------
def test_vacuum_refuses_a_retention_below_the_floor(delta_backend: Backend) -> None:
    store = delta_backend.open()
    with pytest.raises(Exception, match="below"):
        store.vacuum(MIN_VACUUM_RETENTION / 2)
    with pytest.raises(Exception, match="below"):
        store.vacuum(MIN_VACUUM_RETENTION * 0)


def test_vacuum_deletes_old_orphans_and_keeps_a_writer_s_fresh_file(tmp_path: Path) -> None:
    location = f"delta+file://{tmp_path / 'cold'}"
    store = ColdStore(location)
    try:
        store.chains.append([chain_row("c1")])
        folder = tmp_path / "cold" / "chains"
        for name, age_h in (("part-old-orphan.parquet", 200.0), ("part-fresh-upload.parquet", 0.1)):
            (folder / name).write_bytes(b"not yet committed")
            stamp = time.time() - age_h * 3600
            os.utime(folder / name, (stamp, stamp))

        (chains, _tools) = store.vacuum()

        assert chains.files_removed == 1
        assert not (folder / "part-old-orphan.parquet").exists()
        assert (folder / "part-fresh-upload.parquet").exists()  # a writer may still commit it
        assert store.chains.get("c1") == chain_row("c1")
    finally:
        store.close()


def test_checkpoint_lets_a_new_store_load_from_it(delta_backend: Backend) -> None:
    store = delta_backend.open()
    for i in range(4):
        store.chains.append([chain_row(f"c{i}")])

    (chains, _tools) = store.checkpoint()

    assert chains.version == 4
    log = delta_backend.data_files_under("chains/_delta_log")
    assert any(n.endswith(".checkpoint.parquet") for n in log), log
    assert sorted(delta_backend.open().chains.all_keys()) == [f"c{i}" for i in range(4)]


# ---- the schema grows ---------------------------------------------------------------------
def test_a_table_of_an_older_schema_gains_the_new_columns(tmp_path: Path) -> None:
    older = pa.schema([f for f in CHAINS if f.name not in ("steps_json", "task_input")])
    uri = tmp_path / "cold" / "chains"
    old_row = {k: v for k, v in chain_row("old").items() if k in older.names}
    write_deltalake(str(uri), pa.Table.from_pylist([old_row], schema=older), mode="append")

    store = ColdStore(f"delta+file://{tmp_path / 'cold'}")
    try:
        store.chains.append([chain_row("new")])

        assert store.chains.get("old") == {
            **chain_row("old"),
            "steps_json": None,
            "task_input": None,
        }
        assert store.chains.get("new") == chain_row("new")
        assert {"steps_json", "task_input"} <= set(DeltaTable(str(uri)).schema().to_arrow().names)
        with pytest.raises(SchemaError):
            store.chains.append([{**chain_row("bad"), "occurrences": "many"}])
    finally:
        store.close()


# ---- the store goes away --------------------------------------------------------------------
@pytest.mark.integration
def test_an_outage_fails_visibly_and_loses_nothing(s3_server: Any, tmp_path: Path) -> None:
    bucket = s3_server.new_bucket()
    store = ColdStore(f"s3://{bucket}/cold", s3=s3_server.options(max_retries=1, timeout_s=5))
    try:
        store.chains.append([chain_row("c1")])
        s3_server.stop()
        try:
            with pytest.raises(StoreUnavailable):
                store.chains.count()
            with pytest.raises(StoreUnavailable):
                store.chains.contains("c1")
            with pytest.raises(StoreUnavailable):  # the cache knows where: a data read
                store.chains.get("c1")
            with pytest.raises(StoreUnavailable):
                store.check_footers()
            with pytest.raises(CommitFailed, match="nothing was committed"):
                store.chains.append([chain_row("c2")])
            assert store.health().startswith("not writable")
        finally:
            s3_server.start()
        assert store.quarantined() == []  # a store that did not answer blames no file
        assert store.chains.get("c1") == chain_row("c1")
        assert store.chains.append([chain_row("c2")]).written == ("c2",)
        assert sorted(store.chains.all_keys()) == ["c1", "c2"]
        assert store.health() == "ok"
    finally:
        store.close()


# ---- the key snapshot -----------------------------------------------------------------------
def _counting_key_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The data files whose keys any table of this process reads from now on."""
    read: list[str] = []
    real = DataFiles._keys_of_file

    def counted(self: DataFiles, path: str) -> Any:
        read.append(path)
        return real(self, path)

    monkeypatch.setattr(DataFiles, "_keys_of_file", counted)
    return read


def test_a_store_opened_after_a_checkpoint_loads_the_keys_from_the_snapshot(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = delta_backend.open()
    for i in range(4):
        store.chains.append([chain_row(f"c{i}"), chain_row(f"d{i}")])
    store.checkpoint()
    store.chains.append([chain_row("late")])
    assert any(n.endswith(".parquet") for n in delta_backend.data_files_under("chains/_key_index"))
    late_file = delta_backend.file_holding("chains", "late").removeprefix("chains/")
    read = _counting_key_reads(monkeypatch)

    fresh = delta_backend.open()

    assert read == [late_file]  # only the file committed after the snapshot
    expected = [f"{p}{i}" for i in range(4) for p in "cd"] + ["late"]
    assert fresh.chains.all_keys() == expected
    assert fresh.chains.count() == 9 and fresh.chains.contains("d2")
    assert fresh.chains.get("d2") == chain_row("d2")
    assert sorted(r["chain_id"] for r in fresh.chains.scan(["chain_id"])) == sorted(expected)
    assert fresh.verify(deep=True) == []
    # and it appends as any store does
    assert fresh.chains.append([chain_row("c1"), chain_row("new")]).written == ("new",)


def test_a_snapshot_of_files_compacted_away_since_is_not_trusted_for_them(
    delta_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = delta_backend.open()
    for i in range(3):
        store.chains.append([chain_row(f"c{i}")])
    store.checkpoint()
    store.compact()  # the snapshot now names three files the table no longer has
    read = _counting_key_reads(monkeypatch)

    fresh = delta_backend.open()

    (merged,) = read  # the compacted file, the one file the table now names
    assert fresh.chains.count() == 3
    assert {delta_table(fresh)._cache.keys[f"c{i}"][0] for i in range(3)} == {merged}
    assert fresh.chains.get("c1") == chain_row("c1")


def test_a_damaged_snapshot_is_ignored(delta_backend: Backend) -> None:
    store = delta_backend.open()
    store.chains.append([chain_row("c1"), chain_row("c2")])
    store.checkpoint()
    (name,) = [
        n for n in delta_backend.data_files_under("chains/_key_index") if n.endswith("parquet")
    ]
    delta_backend.damage(f"chains/_key_index/{name}", garbage)

    fresh = delta_backend.open()

    assert sorted(fresh.chains.all_keys()) == ["c1", "c2"]
    assert fresh.chains.get("c2") == chain_row("c2")


def test_checkpoints_keep_the_two_newest_snapshots(delta_backend: Backend) -> None:
    store = delta_backend.open()
    for i in range(4):
        store.chains.append([chain_row(f"c{i}")])
        store.checkpoint()

    names = [
        n for n in delta_backend.data_files_under("chains/_key_index") if n.endswith("parquet")
    ]

    assert [int(n[:20]) for n in names] == [3, 4]


def test_vacuum_leaves_the_snapshot_alone(tmp_path: Path) -> None:
    store = ColdStore(f"delta+file://{tmp_path / 'cold'}")
    try:
        store.chains.append([chain_row("c1")])
        store.checkpoint()
        (snap,) = (tmp_path / "cold" / "chains" / "_key_index").glob("*.parquet")
        stamp = time.time() - 400 * 3600
        os.utime(snap, (stamp, stamp))

        store.vacuum()

        assert snap.exists()
    finally:
        store.close()
