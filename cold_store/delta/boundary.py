"""The one boundary between deltalake's and the object store's errors and this
package's, and what a failed read of a data file says about the file.

A commit that another writer won is :class:`Conflict` (retried by the appender); a
write that surely did not commit is :class:`~cold_store.errors.CommitFailed`; one whose
outcome cannot be learned is :class:`~cold_store.errors.CommitStateUnknown`; a store
that cannot be read is :class:`~cold_store.errors.StoreUnavailable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

import pyarrow as pa
from deltalake.exceptions import CommitFailedError, DeltaError

from cold_store.errors import ColdStoreError, CommitFailed, SchemaError, StoreUnavailable

STORE_ERRORS = (DeltaError, OSError, pa.ArrowException)
"""What deltalake, pyarrow and the object store raise.  Every pyarrow read here runs on
the calling thread (``use_threads=False``, no pre-buffering): the object store is reached
through a file system written in Python, and a pyarrow worker thread still calling into
Python while the interpreter exits aborts the process ("terminate called without an
active exception")."""

MISSING = "missing: the log names it but the store does not hold it"


class Conflict(Exception):
    """Another writer committed the version this append was written against."""


@dataclass(frozen=True)
class Damaged:
    """What is wrong with a data file that could not be read."""

    reason: str


def store_error(exc: BaseException, where: str) -> ColdStoreError | Conflict:
    """The one boundary between deltalake's and the object store's errors and ours."""
    if isinstance(exc, CommitFailedError):
        return Conflict(str(exc))
    if isinstance(exc, ColdStoreError):
        return exc
    if isinstance(exc, pa.ArrowInvalid):
        return SchemaError(f"{where}: {exc}")
    return StoreUnavailable(f"{where}: {type(exc).__name__}: {exc}")


def raise_store_error(exc: BaseException, where: str) -> NoReturn:
    mapped = store_error(exc, where)
    if isinstance(mapped, Conflict):  # outside an append a conflict is just a failure
        raise CommitFailed(f"{where}: {mapped}") from exc
    raise mapped from exc


def lost_race(exc: BaseException) -> bool:
    """Whether a failed commit failed only because the version it was written against
    was no longer the latest (deltalake reports every commit error as one exception
    class; the message tells which)."""
    text = str(exc)
    return "Failed to commit transaction" in text or "existing table version" in text
