"""cold_store.publish: atomic publication through a dot-prefixed temp file."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pytest

from cold_store.publish import TEMP_PREFIX, is_temp, make_dirs, publish
from tests.cold_store.helpers import all_files


class Boom(RuntimeError):
    pass


def test_publish_writes_final_and_leaves_no_temp(tmp_path: Path) -> None:
    final = tmp_path / "out" / "data.bin"

    publish(final, lambda handle: handle.write(b"payload"))

    assert final.read_bytes() == b"payload"
    assert all_files(tmp_path) == [final]


def test_publish_writes_through_a_dot_prefixed_temp_in_the_same_folder(tmp_path: Path) -> None:
    final = tmp_path / "data.bin"
    seen: dict[str, object] = {}

    def write(handle: BinaryIO) -> None:
        temp = Path(handle.name)
        seen["temp"] = temp
        seen["final_exists_during_write"] = final.exists()
        handle.write(b"abc")

    publish(final, write)

    temp = seen["temp"]
    assert isinstance(temp, Path)
    assert temp.parent == final.parent
    assert temp.name.startswith(TEMP_PREFIX)
    assert temp.name.startswith(".")
    assert temp != final
    assert seen["final_exists_during_write"] is False
    assert not temp.exists()
    assert final.read_bytes() == b"abc"


def test_publish_uses_a_fresh_temp_name_each_time(tmp_path: Path) -> None:
    final = tmp_path / "data.bin"
    temps: list[str] = []

    def write(handle: BinaryIO) -> None:
        temps.append(Path(handle.name).name)
        handle.write(b"x")

    publish(final, write)
    publish(final, write)

    assert len(set(temps)) == 2


def test_failed_write_leaves_neither_final_nor_temp(tmp_path: Path) -> None:
    final = tmp_path / "part" / "data.bin"
    temps: list[Path] = []

    def write(handle: BinaryIO) -> None:
        temps.append(Path(handle.name))
        handle.write(b"half a file")
        raise Boom("disk on fire")

    with pytest.raises(Boom, match="disk on fire"):
        publish(final, write)

    assert len(temps) == 1
    assert not temps[0].exists()
    assert not final.exists()
    assert all_files(tmp_path) == []


def test_failed_write_keeps_a_previously_published_file_intact(tmp_path: Path) -> None:
    final = tmp_path / "data.bin"
    publish(final, lambda handle: handle.write(b"old"))

    def write(handle: BinaryIO) -> None:
        handle.write(b"new but torn")
        raise Boom

    with pytest.raises(Boom):
        publish(final, write)

    assert final.read_bytes() == b"old"
    assert all_files(tmp_path) == [final]


def test_make_dirs_creates_nested_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"

    make_dirs(target)

    assert target.is_dir()
    make_dirs(target)  # already there: a no-op
    assert target.is_dir()
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "a",
        "a/b",
        "a/b/c",
    ]


def test_publish_creates_missing_parent_folders(tmp_path: Path) -> None:
    final = tmp_path / "x" / "y" / "z" / "data.bin"

    publish(final, lambda handle: handle.write(b"deep"))

    assert final.read_bytes() == b"deep"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (".part-1.parquet.abc.tmp", True),
        (".hidden.parquet", True),
        ("part-1.parquet", False),
        ("a.b.tmp", False),
    ],
)
def test_is_temp(name: str, expected: bool) -> None:
    assert is_temp(Path("/some/folder") / name) is expected
