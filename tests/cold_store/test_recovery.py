"""Quarantine of unreadable files, crash recovery, temp files left by dead writers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cold_store import ColdStore, QuarantinedFile, RecordNotFound, RecordQuarantined
from cold_store.local import STALE_TEMP_SECONDS
from tests.cold_store.conftest import OpenStore
from tests.cold_store.helpers import (
    DAY,
    OTHER_DAY,
    chain_row,
    corrupt,
    parquet_files,
    tear,
    write_parquet,
)

# Names in the table's own format, so they sort like real publications.
EARLY = "part-20000101T000000000000Z-00000000000000000000000000000000.parquet"
LATE = "part-29991231T235959999999Z-ffffffffffffffffffffffffffffffff.parquet"


def seed(store: ColdStore) -> list[str]:
    """Three healthy records in two files over two partitions; returns the file names."""
    a = store.chains.append([chain_row("c1"), chain_row("c2")])
    b = store.chains.append([chain_row("c3", OTHER_DAY)])
    return [*a.files, *b.files]


SEEDED = [chain_row("c1"), chain_row("c2"), chain_row("c3", OTHER_DAY)]


def index_files(root: Path) -> list[Path]:
    return [root / f"chains.index.sqlite{suffix}" for suffix in ("", "-wal", "-shm")]


# ---- quarantine on open ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["garbage", "torn", "empty"])
def test_an_unreadable_file_is_quarantined_on_open(open_store: OpenStore, kind: str) -> None:
    first = open_store()
    seed(first)
    first.close()
    bad = first.chains.dir / f"archive_date={DAY}" / EARLY
    if kind == "garbage":
        bad.write_bytes(b"this is not parquet at all" * 10)
    elif kind == "torn":
        write_parquet(bad, [chain_row("torn-1"), chain_row("torn-2")])
        tear(bad)
    else:
        bad.write_bytes(b"")
    bad_bytes = bad.read_bytes()

    store = open_store()

    rel = f"archive_date={DAY}/{EARLY}"
    target = store.root / "quarantine" / "chains" / rel
    assert not bad.exists()
    assert target.read_bytes() == bad_bytes
    (quarantined,) = store.quarantined()
    assert quarantined.name == rel
    assert quarantined.path == target
    assert "unreadable on reconcile" in quarantined.reason
    assert store.chains.count() == 3
    for row in SEEDED:
        assert store.chains.get(row["chain_id"]) == row
    assert list(store.chains.scan()) == SEEDED
    assert not store.chains.contains("torn-1")


def test_quarantine_is_remembered_across_reopening(open_store: OpenStore) -> None:
    first = open_store()
    seed(first)
    first.close()
    (first.chains.dir / f"archive_date={DAY}" / EARLY).write_bytes(b"junk")
    open_store().close()

    third = open_store()

    assert [q.name for q in third.quarantined()] == [f"archive_date={DAY}/{EARLY}"]
    assert third.chains.reconcile() == []
    assert third.chains.count() == 3


# ---- quarantine on read ---------------------------------------------------------------
@pytest.mark.parametrize("damage", [corrupt, tear], ids=["garbage", "torn"])
def test_get_of_a_key_in_a_file_corrupted_after_indexing(
    store: ColdStore, damage: Callable[[Path], None]
) -> None:
    (bad_rel, good_rel) = seed(store)
    bad = store.chains.dir / bad_rel
    damage(bad)
    damaged = bad.read_bytes()

    with pytest.raises(RecordQuarantined) as info:
        store.chains.get("c1")

    target = store.root / "quarantine" / "chains" / bad_rel
    assert info.value.path == target
    assert (info.value.table, info.value.key) == ("chains", "c1")
    assert info.value.reason.startswith("unreadable")
    assert not bad.exists()
    assert target.read_bytes() == damaged
    assert store.quarantined() == [QuarantinedFile(bad_rel, target, info.value.reason)]

    # The sibling key of the same file is reported without touching the disk again.
    with pytest.raises(RecordQuarantined) as again:
        store.resolve("cold://chains/c2")
    assert again.value.path == target

    # Everything else is untouched.
    assert store.chains.get("c3") == SEEDED[2]
    assert (store.chains.dir / good_rel).is_file()
    assert list(store.chains.scan()) == [SEEDED[2]]


def test_get_quarantines_a_file_whose_rows_do_not_match_the_index(store: ColdStore) -> None:
    (rel, _) = seed(store)
    path = store.chains.dir / rel
    path.unlink()
    write_parquet(path, [chain_row("x1"), chain_row("x2")])  # same name, other keys

    with pytest.raises(RecordQuarantined, match="another key") as info:
        store.chains.get("c2")

    assert info.value.path == store.root / "quarantine" / "chains" / rel
    assert info.value.path.is_file()
    assert not path.exists()


def test_get_of_a_key_whose_file_vanished_raises_record_quarantined(store: ColdStore) -> None:
    (rel, _) = seed(store)
    (store.chains.dir / rel).unlink()

    with pytest.raises(RecordQuarantined):
        store.chains.get("c1")

    assert [q.name for q in store.quarantined()] == [rel]
    assert store.chains.get("c3") == SEEDED[2]


def test_scan_skips_and_quarantines_a_corrupt_file(store: ColdStore) -> None:
    store.chains.append([chain_row("a1")])
    (bad_rel,) = store.chains.append([chain_row("b1"), chain_row("b2")]).files
    store.chains.append([chain_row("c1", OTHER_DAY)])
    corrupt(store.chains.dir / bad_rel)

    rows = list(store.chains.scan())

    assert rows == [chain_row("a1"), chain_row("c1", OTHER_DAY)]
    (quarantined,) = store.quarantined()
    assert quarantined.name == bad_rel
    assert quarantined.path.is_file()
    assert "unreadable on scan" in quarantined.reason
    assert not (store.chains.dir / bad_rel).exists()
    assert list(store.chains.scan()) == rows  # stable afterwards
    with pytest.raises(RecordQuarantined):
        store.chains.get("b2")


# ---- crash recovery -------------------------------------------------------------------
def test_a_published_but_unindexed_file_is_indexed_on_open(open_store: OpenStore) -> None:
    first = open_store()
    seed(first)
    first.close()
    orphan_rows = [chain_row("o1"), chain_row("o2", reported_at=None, session_id=None)]
    write_parquet(first.chains.dir / f"archive_date={DAY}" / LATE, orphan_rows)

    store = open_store()

    assert store.chains.count() == 5
    assert store.chains.all_keys() == ["c1", "c2", "c3", "o1", "o2"]
    for row in [*SEEDED, *orphan_rows]:
        assert store.resolve(f"cold://chains/{row['chain_id']}") == row
    assert store.quarantined() == []
    assert store.chains.reconcile() == []


def test_reconcile_reports_the_files_it_indexed(store: ColdStore) -> None:
    seed(store)
    write_parquet(store.chains.dir / f"archive_date={OTHER_DAY}" / LATE, [chain_row("o1")])

    assert store.chains.reconcile() == [f"archive_date={OTHER_DAY}/{LATE}"]
    assert store.chains.reconcile() == []
    assert store.chains.get("o1") == chain_row("o1")


def test_a_lost_index_is_rebuilt_from_the_files(open_store: OpenStore, root: Path) -> None:
    first = open_store()
    seed(first)
    first.chains.append([chain_row("c4")])
    first.close()
    for path in index_files(root):
        path.unlink(missing_ok=True)
    assert not any(p.exists() for p in index_files(root))

    store = open_store()

    assert store.chains.count() == 4
    expected = [*SEEDED, chain_row("c4")]
    for row in expected:
        assert store.chains.get(row["chain_id"]) == row
    assert sorted(r["chain_id"] for r in store.chains.scan()) == ["c1", "c2", "c3", "c4"]
    assert store.quarantined() == []


def test_a_rebuilt_index_handles_files_with_other_row_groups(open_store: OpenStore) -> None:
    # BUG: reconcile() derives (row group, row) from the table's row_group_size
    # instead of the file's own metadata, so a file written with other row groups
    # (another row_group_size, an external writer) is mis-indexed and get()
    # quarantines a perfectly healthy file.
    first = open_store()
    first.close()
    rows = [chain_row(f"k{i}") for i in range(5)]
    path = first.chains.dir / f"archive_date={DAY}" / LATE
    write_parquet(path, rows, row_group_size=2)
    assert pq.ParquetFile(path).metadata.num_row_groups == 3

    store = open_store()

    assert store.chains.count() == 5
    for row in rows:
        assert store.chains.get(row["chain_id"]) == row
    assert store.quarantined() == []
    assert path.is_file()


@pytest.mark.parametrize("lose_index", [False, True], ids=["index-kept", "index-lost"])
@pytest.mark.parametrize("partition", [DAY, OTHER_DAY])
def test_a_key_in_two_files_is_returned_once_first_copy_wins(
    open_store: OpenStore, root: Path, lose_index: bool, partition: str
) -> None:
    first = open_store()
    first.chains.append([chain_row("dup"), chain_row("c1")])
    first.close()
    # A re-publication after a crash: the same key again, in a later file.
    copy = chain_row("dup", partition, rule="second copy")
    write_parquet(first.chains.dir / f"archive_date={partition}" / LATE, [copy, chain_row("c2")])
    if lose_index:
        for path in index_files(root):
            path.unlink(missing_ok=True)

    store = open_store()

    assert store.chains.get("dup") == chain_row("dup")
    scanned = list(store.chains.scan())
    assert [r["chain_id"] for r in scanned] == ["dup", "c1", "c2"]
    assert scanned[0] == chain_row("dup")
    assert store.chains.count() == 3
    assert store.chains.all_keys().count("dup") == 1
    assert store.chains.append([chain_row("dup")]).skipped == ("dup",)


# ---- temp files -----------------------------------------------------------------------
def test_dot_prefixed_files_are_ignored_by_readers(open_store: OpenStore) -> None:
    first = open_store()
    seed(first)
    first.close()
    folder = first.chains.dir / f"archive_date={DAY}"
    ghost_temp = folder / f".{LATE}.0123abcd.tmp"
    ghost_parquet = folder / ".ghost.parquet"
    garbage_temp = folder / f".{EARLY}.deadbeef.tmp"
    write_parquet(ghost_temp, [chain_row("ghost-1")])
    write_parquet(ghost_parquet, [chain_row("ghost-2")])
    garbage_temp.write_bytes(b"half written")

    store = open_store()

    assert not store.chains.contains("ghost-1")
    assert not store.chains.contains("ghost-2")
    with pytest.raises(RecordNotFound):
        store.resolve("cold://chains/ghost-2")
    assert store.chains.count() == 3
    assert list(store.chains.scan()) == SEEDED
    assert store.quarantined() == []
    assert ghost_temp.exists() and ghost_parquet.exists() and garbage_temp.exists()


def test_stale_temp_files_are_removed_on_open_fresh_ones_kept(open_store: OpenStore) -> None:
    first = open_store()
    seed(first)
    first.close()
    folder = first.chains.dir / f"archive_date={DAY}"
    now = time.time()
    stale = folder / f".{EARLY}.aaaa.tmp"
    almost_stale = folder / f".{EARLY}.bbbb.tmp"
    fresh = folder / f".{LATE}.cccc.tmp"
    for path in (stale, almost_stale, fresh):
        path.write_bytes(b"partial bytes of a dead writer")
    old = now - STALE_TEMP_SECONDS - 60
    os.utime(stale, (old, old))
    young = now - STALE_TEMP_SECONDS + 60
    os.utime(almost_stale, (young, young))
    # An old *published* file is data, never a stale temp.
    old_data = first.chains.dir / f"archive_date={OTHER_DAY}" / EARLY
    write_parquet(old_data, [chain_row("old", OTHER_DAY)])
    os.utime(old_data, (old, old))

    store = open_store()

    assert not stale.exists()
    assert almost_stale.exists()
    assert fresh.exists()
    assert old_data.exists()
    assert store.chains.get("old") == chain_row("old", OTHER_DAY)
    assert store.chains.count() == 4
    assert store.quarantined() == []


def test_a_successful_append_leaves_no_temp_file(store: ColdStore) -> None:
    seed(store)

    leftovers = [p for p in store.root.rglob("*") if p.is_file() and p.name.startswith(".")]
    assert leftovers == []
    assert len(parquet_files(store.root)) == 2


def test_a_quarantined_record_can_be_archived_again(store: ColdStore) -> None:
    (bad_rel, _good_rel) = seed(store)
    corrupt(store.chains.dir / bad_rel)
    with pytest.raises(RecordQuarantined):
        store.chains.get("c1")
    assert not store.chains.contains("c1")
    assert "c1" not in store.chains.all_keys()
    result = store.chains.append([SEEDED[0]])
    assert result.written == ("c1",)
    assert store.chains.get("c1") == SEEDED[0]
    assert store.chains.count() == 2  # c1 again, c3; c2 stays quarantined
