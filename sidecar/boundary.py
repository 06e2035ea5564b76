"""The one place where the stores' errors become the library's (:func:`boundary`)."""

from __future__ import annotations

import errno
import functools
import sqlite3
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from cold_store import ColdStoreError, PointerError, RecordNotFound, RecordQuarantined
from indexes import ToolIndexError
from sidecar.errors import (
    ColdStoreUnavailable,
    IndexUnavailable,
    InvalidInput,
    NotFound,
    SidecarError,
    StateUnavailable,
)

P = ParamSpec("P")
R = TypeVar("R")


def boundary(fn: Callable[P, R]) -> Callable[P, R]:
    """The one place where the stores' errors become the library's: Chroma and the
    model (:class:`IndexUnavailable`), the Parquet archive (:class:`NotFound`,
    :class:`InvalidInput`, :class:`ColdStoreUnavailable`) and SQLite or the disk
    (:class:`StateUnavailable`; the state's backends raise it themselves, and the cold
    store's key index is SQLite too)."""

    @functools.wraps(fn)
    def mapped(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SidecarError:
            raise
        except ToolIndexError as exc:
            raise IndexUnavailable(str(exc)) from exc
        except RecordNotFound as exc:
            raise NotFound(str(exc)) from exc
        except PointerError as exc:
            raise InvalidInput(str(exc)) from exc
        except (RecordQuarantined, ColdStoreError) as exc:
            raise ColdStoreUnavailable(str(exc)) from exc
        except sqlite3.Error as exc:
            raise StateUnavailable(f"the state database cannot serve this: {exc}") from exc
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT):
                raise StateUnavailable(f"the home cannot be written: {exc.strerror}") from exc
            raise

    return mapped
