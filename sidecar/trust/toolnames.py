"""Tool names from outside as tool ids: the one mapping the MCP gateway (an upstream's
catalog) and the OTLP intake (a span's tool name) share.

A name within the grammar every store holds (1-128 of ``A-Z a-z 0-9 _ - .``) is its own
id.  Any other name gets an id of its own that no other name has: each run of other
characters becomes ``_``, and ``_`` plus six hex digits of the name's SHA-256 is
appended (cut to fit 128).  So a name made to look like a real tool never lands on it:
not one holding a zero-width or other format character (``refund`` + U+200B), not a
spelling in fullwidth letters or with a Cyrillic letter for a Latin one (any look-alike
of Unicode TR39's confusables outside the grammar), not ``get/order``, ``get:order`` or
``get order`` for ``get_order``.  Evidence about the look-alike is evidence about its own id.

Names that differ only within the grammar (``get_order`` and ``get-order``, ``l`` and
``1``) are different tools, as everywhere else in the sidecar: nothing folds them.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 128
VALID_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_INVALID_RUN = re.compile(r"[^A-Za-z0-9_.\-]+")
DIGEST_CHARS = 6


def tool_id_for(name: str) -> str:
    """``name`` when it is a valid tool id, else the distinct id it is mapped to."""
    if VALID_NAME.fullmatch(name):
        return name
    return suffixed(_INVALID_RUN.sub("_", name).strip("_") or "tool", name)


def suffixed(stem: str, whole: str) -> str:
    """``stem``, cut to fit, with ``_`` and the digest of ``whole``: an id that only
    ``whole`` maps to."""
    digest = hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
    return f"{stem[: MAX_NAME - DIGEST_CHARS - 1]}_{digest}"
