"""Atomic publication of a file: temp name, fsync, rename, fsync of the folder.

pyarrow writes in place and never fsyncs, so a crash mid-write would leave a torn file
under its final name.  Here the bytes go to a dot-prefixed temp name (which readers
skip), are flushed to disk, and only then renamed; the folder is fsynced so that the
rename itself survives a power loss.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TEMP_PREFIX = "."


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that fsyncs each parent whose entries changed."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
        fsync_dir(folder.parent)


def publish(final: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``final`` atomically; ``write`` receives an open binary file."""
    make_dirs(final.parent)
    temp = final.parent / f"{TEMP_PREFIX}{final.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(temp, "xb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)


def is_temp(path: Path) -> bool:
    return path.name.startswith(TEMP_PREFIX)
