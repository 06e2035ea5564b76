"""What the sidecar asks of a cold table, whichever backend stores it.

Two backends satisfy :class:`ColdTable`: :class:`cold_store.local.ParquetTable` (a folder
of immutable files and a SQLite key index, one writing process) and
:class:`cold_store.delta.DeltaColdTable` (a Delta table on a folder or on S3, any number
of writing processes).  :class:`cold_store.store.ColdStore` picks one from its location.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class AppendResult:
    written: tuple[str, ...]
    """Keys newly stored."""
    skipped: tuple[str, ...]
    """Keys already present (never written twice)."""
    files: tuple[str, ...]
    """Relative paths of the files published."""


@dataclass(frozen=True)
class QuarantinedFile:
    name: str
    path: Path | str
    """Where the file is now: a local path, or the object's URL."""
    reason: str


@dataclass(frozen=True)
class Maintenance:
    """What one maintenance step did to one table."""

    table: str
    files_added: int = 0
    files_removed: int = 0
    version: int | None = None
    """The table version after the step (``None``: the backend has no versions)."""


class ColdTable(Protocol):
    """One logical table of records keyed by one string column.

    Appends are idempotent: a key already stored is skipped, and an append that names a
    ``batch`` already committed writes nothing.  Records are immutable once stored."""

    name: str
    key: str

    def append(self, rows: Sequence[Mapping[str, Any]], batch: str | None = None) -> AppendResult:
        """Store the rows whose key is new, all or nothing.  ``batch`` names these rows:
        an append naming a batch already committed is a no-op, even when two processes
        race with it."""
        ...

    def append_batches(
        self, batches: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> dict[str, AppendResult]:
        """Store several callers' batches at once, each under its own id (on Delta: one
        commit, all or nothing), and return each batch's result.  A key already stored,
        or named by an earlier batch of the call, is skipped in that batch's result.
        The ids are recorded with the rows: after a :class:`CommitStateUnknown`,
        :meth:`committed_batches` tells which batches are stored (a batch whose rows
        were all stored already records nothing: a retry of it writes nothing)."""
        ...

    def committed_batches(self, batches: Iterable[str]) -> set[str]:
        """Those of ``batches`` an append has recorded."""
        ...

    def contains(self, key: str) -> bool: ...

    def contains_many(self, keys: Iterable[str]) -> set[str]: ...

    def count(self) -> int: ...

    def all_keys(self) -> list[str]: ...

    def get(self, key: str) -> dict[str, Any]:
        """The full row under ``key``, read from the one file that holds it."""
        ...

    def scan(self, columns: Sequence[str] | None = None) -> Iterator[dict[str, Any]]: ...

    def verify(self, deep: bool = False) -> list[QuarantinedFile]: ...

    def check_footers(self) -> list[str]: ...

    def quarantined(self) -> list[QuarantinedFile]: ...

    def compact(self) -> Maintenance: ...

    def checkpoint(self) -> Maintenance: ...

    def vacuum(self, retention: timedelta | None = None) -> Maintenance: ...

    def close(self) -> None: ...
