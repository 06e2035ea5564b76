"""Finishing what a crash interrupted, and being honest about it meanwhile.

The owner of a home finishes moves a crash (or an unwritable store) interrupted when it
opens, and retries them.  While they cannot finish it stays up, *degraded*: reads keep
working, writes that move tools fail with :class:`~sidecar.errors.Degraded`, and
readiness says why.
"""

from __future__ import annotations

import logging
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from cold_store import ColdStore, ColdStoreError
from indexes import ActiveIndex, ToolIndexError
from sidecar.errors import Busy, Degraded, InvalidInput, SidecarError
from sidecar.eviction import Evictor, Journal
from sidecar.faults import FAILURES, plain
from sidecar.results import Health
from sidecar.storage import DatabaseError
from sidecar.trust.redact import redact_text

T = TypeVar("T")
log = logging.getLogger("sidecar")


class Recovery:
    def __init__(self, journal: Journal, evictor: Evictor, read_only: bool) -> None:
        self._journal = journal
        self._evictor = evictor
        self._read_only = read_only
        self.degraded: str | None = None

    def maintain(self) -> int:
        """Finish moves a crash (or an unwritable store) interrupted, if this process
        owns the home; returns how many finished.  On failure the sidecar stays up,
        degraded: reads work, moves wait for the next try."""
        if self._read_only or not self._journal.unfinished():
            self.degraded = None
            return 0
        try:
            done = self._evictor.recover()
        except Busy:
            return 0  # another eviction is finishing them
        except FAILURES as exc:
            self.degraded = f"interrupted moves cannot finish: {plain(exc)}"
            log.warning("%s", self.degraded)
            return 0
        self.degraded = None
        return done

    def stranded(self, exc: BaseException) -> int:
        """After a move failed mid-way: how many moves it left unfinished.  With any
        left, the sidecar is degraded (the server retries them until they finish)."""
        try:
            left = len(self._journal.unfinished())
        except (DatabaseError, sqlite3.Error):
            return 0
        if left:
            self.degraded = f"interrupted moves cannot finish: {plain(exc)}"
            log.warning("%s", self.degraded)
        return left

    def writable(self) -> None:
        if self._read_only:
            raise InvalidInput("this sidecar was opened read-only")

    def moves_ready(self) -> None:
        """Before any write that moves tools: retry interrupted moves; refuse while they
        cannot finish."""
        self.writable()
        self.maintain()
        if self.degraded:
            raise Degraded(
                f"{self.degraded}; lookups and checks keep working, writes that move tools "
                "wait until the store is writable again"
            )

    def moving(self, run: Callable[[], T]) -> T:
        """Run moves; when they stop part-way, the sidecar is degraded and says so."""
        try:
            return run()
        except Busy:
            raise
        except FAILURES as exc:
            left = self.stranded(exc)
            if not left:
                raise
            raise Degraded(
                f"the eviction stopped with {left} move(s) unfinished "
                f"({redact_text(str(exc))}); "
                "lookups and checks keep working and never serve those tools, and the moves "
                "finish once the store is writable again"
            ) from exc

    def journal_check(self) -> str:
        if self.degraded and not self._journal.unfinished():
            self.degraded = None  # another replica finished the moves this one could not
        if self.degraded:
            return self.degraded
        if self._journal.unfinished() and not self._evictor.running():
            return f"{len(self._journal.unfinished())} unfinished move(s)"
        return "ok"


def health(
    index: Callable[[], ActiveIndex],
    expected: Callable[[], int],
    cold: ColdStore,
    home: Path,
    recovery: Recovery,
    publishing: str | None = None,
) -> Health:
    """Readiness: the hot index answers, the cold store and state are writable, no
    interrupted move is stuck."""
    checks: dict[str, str] = {"hot_index": _hot_check(index, expected)}
    checks["cold_store"] = cold.health()
    try:
        damaged = cold.verify()
    except ColdStoreError as exc:
        # a shared store (S3) that does not answer: not ready, and say why, rather than
        # fail the readiness probe itself with an internal error
        damaged = []
        checks["cold_store"] = f"unavailable: {plain(exc)}"
    if checks["cold_store"] == "ok" and damaged:
        checks["cold_store"] = f"{len(damaged)} file(s) not as published: {damaged[0].reason}"
    if checks["cold_store"] == "ok" and publishing:
        checks["cold_store"] = publishing  # acknowledged records wait for the archive
    checks["state"] = writable_dirs(home)
    checks["journal"] = recovery.journal_check()
    return Health(all(v == "ok" for v in checks.values()), checks)


def _hot_check(index: Callable[[], ActiveIndex], expected: Callable[[], int]) -> str:
    try:
        opened = index()
        count = opened.count()
        want = expected()
        if opened.files_lost():
            return (
                "its files were deleted under this process: restart it to rebuild the "
                "index from the state's records"
            )
        return "ok" if count >= want else f"{want - count} active tool(s) missing"
    except (ToolIndexError, SidecarError) as exc:
        return f"unavailable: {redact_text(str(exc))}"


def writable_dirs(*paths: Path) -> str:
    """``ok`` when a byte can be written to a new file in each folder, else which one
    cannot and why."""
    for path in paths:
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".ready-") as probe:
                probe.write(b"x")
                probe.flush()  # a full disk refuses the byte, not the empty file
        except OSError as exc:
            return f"not writable: {exc.strerror} ({path})"
    return "ok"
