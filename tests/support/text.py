"""Text in forms that normalisation must fold."""

from __future__ import annotations


def fullwidth(text: str) -> str:
    """``text`` in full-width Latin letters (U+FF21...)."""
    return "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalpha() else c for c in text)
