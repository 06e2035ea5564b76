"""Secrets that span lines, and a redactor for a text read one line at a time.

- **Private key blocks**: PEM (``-----BEGIN RSA PRIVATE KEY-----``, ``EC``, ``DSA``,
  ``ENCRYPTED``, PKCS#8's ``PRIVATE KEY``), OpenSSH and PGP (``-----BEGIN PGP PRIVATE KEY
  BLOCK-----``), from the BEGIN line through the END line: armour headers
  (``Version:``, ``Comment:``) and the checksum line (``=abcd``) with the body.  Public
  keys and certificates are no secret and are kept.

Alone, a line of base64 from the middle of a key looks like nothing, so a redactor that
sees one line at a time (an upstream's stderr, copied as it comes) must remember the
lines before it: :class:`LineRedactor` does, around the whole-text redactor it is given
(:func:`sidecar.redact.line_redactor`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

_LABEL = r"[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?"
KEY_BLOCK = rf"-----BEGIN {_LABEL}-----.*?(?:-----END {_LABEL}-----|$)"
"""A private key block in a whole text, to its END or, when it has none, to the end."""
_BEGIN = re.compile(rf"-----BEGIN {_LABEL}-----")
_END = re.compile(rf"-----END {_LABEL}-----")


def _opens_key(line: str) -> bool:
    """Whether ``line`` leaves a private key block open: its last BEGIN has no END."""
    begins = list(_BEGIN.finditer(line))
    return bool(begins) and _END.search(line, begins[-1].end()) is None


class LineRedactor:
    """Redacts a text given one line at a time as the whole-text redactor would redact it
    whole: each line goes through ``redact``, and each line inside a private key block
    becomes ``mask``.

    A block that never ends keeps every later line masked.  A bound would let the rest
    of a long key through (a PGP key with its subkeys runs to hundreds of lines), and
    what a lost END costs is the rest of an upstream's log, never a secret; the
    whole-text redactor masks such a block to the end of its text too.
    """

    def __init__(self, redact: Callable[[str], str], mask: str) -> None:
        self._redact = redact
        self._mask = mask
        self._in_key = False

    def line(self, text: str) -> str:
        """``text`` (one line, without its end) as it may be shown."""
        if self._in_key:
            end = _END.search(text)
            if end is None:
                return self._mask
            self._in_key = False
            rest = text[end.end() :]
            return self._mask + (self.line(rest) if rest else "")
        self._in_key = _opens_key(text)
        return self._redact(text)
