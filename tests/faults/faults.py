"""How a fault is injected, whoever runs the suite.

Permission bits do not stop root, and CI runs as root: each fault tries the mechanism
that stops everyone first, falls back to one that needs no privilege, and says which one
ran (the tests print it, so ``pytest -s`` and the report show it).

- :func:`unwritable_folder`: ``chattr -R +i`` (stops root; needs CAP_LINUX_IMMUTABLE and
  a file system with the attribute), else the folder is set aside and a plain file put
  in its place (creating anything below it fails with ENOTDIR, for anyone).
- :func:`read_only_home`: a read-only bind mount (EROFS; needs CAP_SYS_ADMIN), else
  ``chattr -R +i``, else ``chmod -R a-w`` (enough for a user who is not root).
- :func:`small_disk`: a small tmpfs mounted as the home, when mounting is allowed; the
  caller falls back to injecting ENOSPC at the write layer when it is not.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _run(*argv: str) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def can_chattr(near: Path) -> bool:
    """Whether ``chattr +i`` works on the file system holding ``near`` for this user."""
    if shutil.which("chattr") is None:
        return False
    probe = Path(tempfile.mkdtemp(dir=near, prefix=".chattr-probe-"))
    try:
        if not _run("chattr", "+i", str(probe)):
            return False
        try:
            (probe / "x").touch()
            return False  # the attribute did not stop us
        except OSError:
            return True
        finally:
            _run("chattr", "-i", str(probe))
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


def unwritable_mechanism(folder: Path) -> str:
    """What :func:`unwritable_folder` will use for ``folder`` (probed once per file
    system, so that the fault itself lands within milliseconds)."""
    return "chattr -R +i" if can_chattr(folder.parent.resolve()) else "folder replaced by a file"


@contextlib.contextmanager
def unwritable_folder(folder: Path) -> Iterator[str]:
    """Nothing can be created in ``folder`` or below it while inside; existing files stay
    readable (with ``chattr``; a folder set aside cannot be read until it is back).
    Yields the mechanism's name."""
    if unwritable_mechanism(folder) == "chattr -R +i":
        assert _run("chattr", "-R", "+i", str(folder))
        try:
            yield "chattr -R +i"
        finally:
            assert _run("chattr", "-R", "-i", str(folder))
        return
    aside = folder.with_name(f".{folder.name}.aside")
    folder.rename(aside)
    folder.write_text("not a folder: creating anything below it fails\n")
    try:
        yield "folder replaced by a file"
    finally:
        folder.unlink()
        aside.rename(folder)


@contextlib.contextmanager
def read_only_home(home: Path) -> Iterator[str]:
    """``home`` cannot be written at all while inside.  Yields the mechanism's name."""
    if can_mount() and _run("mount", "--bind", str(home), str(home)):
        try:
            assert _run("mount", "-o", "remount,bind,ro", str(home))
            yield "read-only bind mount"
        finally:
            assert _run("umount", str(home)) or _run("umount", "-l", str(home))
        return
    if can_chattr(home.parent.resolve()):
        assert _run("chattr", "-R", "+i", str(home))
        try:
            yield "chattr -R +i"
        finally:
            assert _run("chattr", "-R", "-i", str(home))
        return
    if os.geteuid() == 0:
        # permission bits do not stop root: without either capability there is no way
        # to make the home read-only for it (reported by -ra, never silent)
        pytest.skip("running as root without CAP_SYS_ADMIN (mount) or CAP_LINUX_IMMUTABLE")
    modes = {p: p.stat().st_mode for p in [home, *home.rglob("*")]}
    for p in modes:
        p.chmod(stat.S_IMODE(modes[p]) & ~0o222)
    try:
        yield "chmod -R a-w"
    finally:
        for p, mode in modes.items():
            p.chmod(stat.S_IMODE(mode))


@contextlib.contextmanager
def small_disk(home: Path, size: str) -> Iterator[bool]:
    """Mount a tmpfs of ``size`` at ``home`` (an empty folder) when this machine allows
    it; yields whether it did."""
    home.mkdir(parents=True, exist_ok=True)
    mounted = can_mount() and _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(home))
    try:
        yield mounted
    finally:
        # this process may still hold files there (an embedded Chroma caches its
        # client): detach the mount now, the kernel frees it with the last file
        if mounted:
            assert _run("umount", str(home)) or _run("umount", "-l", str(home))
