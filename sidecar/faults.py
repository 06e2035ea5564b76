"""What a store may fail with, whichever it is, and how its message is shown."""

from __future__ import annotations

import re
import sqlite3

from cold_store import ColdStoreError
from indexes import ToolIndexError
from sidecar.errors import SidecarError
from sidecar.trust.redact import redact_text

FAILURES = (SidecarError, ColdStoreError, ToolIndexError, sqlite3.Error, OSError)
"""What a write to the stores may fail with: retried later, or reported."""
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain(exc: BaseException) -> str:
    """An error's text, redacted and without terminal escape codes (the object store's
    client colours its messages)."""
    return redact_text(_ESCAPES.sub("", str(exc)))
