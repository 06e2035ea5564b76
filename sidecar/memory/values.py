"""Argument values as the memory sees them: a canonical text, id-likeness and shape."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

MAX_VALUE_TEXT = 120
"""Longer canonical values are kept as a digest (a remembered value is never a blob)."""

Scalar = str | int | float | bool | None
FeatureValue = Scalar | list[Scalar]
"""A feature of a call: one value, or one per element of a list argument."""

ID_TOKEN = re.compile(r"(?=\S*[\d_@#])\S{3,100}")
"""An id-like token (see :func:`is_id_like`)."""


def canonical(value: Any) -> str:
    """One text per value: strings as they are, anything else as sorted compact JSON;
    long ones as a digest."""
    text = value if isinstance(value, str) else _json(value)
    if len(text) > MAX_VALUE_TEXT:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:24]
    return text


def _json(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def key_of(value: Any) -> str | None:
    """The text under which a scalar is matched against outputs (ints and their decimal
    strings are one value); ``None`` for values that are not matched."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    return None


def is_id_like(value: Any) -> bool:
    """A token that names something: no whitespace, 3-100 characters, and a digit, ``_``,
    ``@`` or ``#`` (``A1044``, ``#INV1``, ``acct_2044871``, ``a@b.com``; not ``Tea-Cup``);
    integers of 3 digits or more."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) >= 100
    return isinstance(value, str) and ID_TOKEN.fullmatch(value) is not None


def shape(value: str) -> str:
    """The character-class shape of a token: a run of capitals is ``A``, of small
    letters ``a``, of digits ``9`` with its length (``9{7}``), anything else as is:
    ``#R2044871`` -> ``#A9{7}``, ``#2044871`` -> ``#9{7}``, ``#QZX12345`` -> ``#A9{5}``."""
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        ch = value[i]
        if ch.isdigit():
            j = i
            while j < n and value[j].isdigit():
                j += 1
            out.append("9" if j - i == 1 else f"9{{{j - i}}}")
            i = j
            continue
        cls = "A" if ch.isupper() else "a" if ch.isalpha() else ch
        if not (out and cls in ("A", "a") and out[-1] == cls):
            out.append(cls)
        i += 1
    return "".join(out)
