"""What a store may fail with, whichever it is, and how its message is shown; and the
named points of the crash-safe protocols, where a test may stop the process.

The library names each point of a move and of an intake's commit as it passes it
(:func:`passed`) and does nothing there; a test or a benchmark that wants the process
to die at one installs a hook (:func:`on_points`: ``benchmarks/crashing.py`` runs the
CLI with one that SIGKILLs the process at a named point)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable

from cold_store import ColdStoreError
from indexes import ToolIndexError
from sidecar.errors import SidecarError
from sidecar.trust.redact import redact_text

FAILURES = (SidecarError, ColdStoreError, ToolIndexError, sqlite3.Error, OSError)
"""What a write to the stores may fail with: retried later, or reported."""
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CRASH_POINTS = ("after_intent", "after_cold", "after_mandates", "after_hot_delete", "after_done")
"""The steps of an eviction move after which a test may kill the process."""
INTAKE_CRASH_POINTS = ("after_intake_staged",)
"""Where a test may kill the process while it takes in a batch: once the batch's state
transaction has committed, before its chains are appended to the cold archive."""
_HOOKS: list[Callable[[str], None]] = []


def on_points(hook: Callable[[str], None]) -> Callable[[], None]:
    """Call ``hook(point)`` at every named point this process passes; returns what
    removes it."""
    _HOOKS.append(hook)
    return lambda: _HOOKS.remove(hook)


def passed(point: str) -> None:
    """The process is past ``point`` (one of :data:`CRASH_POINTS` or
    :data:`INTAKE_CRASH_POINTS`)."""
    assert point in CRASH_POINTS or point in INTAKE_CRASH_POINTS, point
    for hook in list(_HOOKS):
        hook(point)


def plain(exc: BaseException) -> str:
    """An error's text, redacted and without terminal escape codes (the object store's
    client colours its messages)."""
    return redact_text(_ESCAPES.sub("", str(exc)))
