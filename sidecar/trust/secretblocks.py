"""Secrets that span lines, and a redactor for a text read one line at a time.

- **Private key blocks**: PEM (``-----BEGIN RSA PRIVATE KEY-----``, ``EC``, ``DSA``,
  ``ENCRYPTED``, PKCS#8's ``PRIVATE KEY``), OpenSSH and PGP (``-----BEGIN PGP PRIVATE KEY
  BLOCK-----``), from the BEGIN line through the END line: armour headers
  (``Version:``, ``Comment:``) and the checksum line (``=abcd``) with the body.  Public
  keys and certificates are no secret and are kept.
- **YAML values under their key**: a key alone on its line, bare (``password:``) or
  opening a block scalar (``password: |``, ``password: >-``, a tag or an anchor
  before it), holds the lines under it that are indented deeper than the key; each is
  masked whole, its indentation kept, and a blank line among them neither shown
  masked nor ending them.  Which keys hold a secret is the caller's to say
  (:func:`sidecar.trust.redact.line_redactor` uses the name rule of ``name: value``).

Alone, a line of base64 from the middle of a key or an indented word under a key looks
like nothing, so a redactor that sees one line at a time (an upstream's stderr, copied
as it comes) must remember the lines before it: :class:`LineRedactor` does, around the
whole-text redactor it is given.  It also reads a line ending in ``name:`` or ``name=``
together with the next, as the whole-text redactor reads a value across a line end
(``Your password:`` then the password).
"""

from __future__ import annotations

import re
from collections.abc import Callable

_LABEL = r"[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?"
KEY_BLOCK = rf"-----BEGIN {_LABEL}-----.*?(?:-----END {_LABEL}-----|$)"
"""A private key block in a whole text, to its END or, when it has none, to the end."""
_BEGIN = re.compile(rf"-----BEGIN {_LABEL}-----")
_END = re.compile(rf"-----END {_LABEL}-----")

_KEY_OVER_VALUE = (
    r"([ \t]*(?:-[ \t]+)?)([\"']?)([A-Za-z_][\w.\-]{0,63})\2[ \t]*:"
    r"(?:[ \t]+[!&][^\s#]{1,64})*(?:[ \t]+[|>][1-9+\-]{0,2})?[ \t]*(?:#.*)?"
)
KEY_OVER_VALUE = re.compile(rf"(?m)^{_KEY_OVER_VALUE}\r?\n")
"""A YAML key whose value starts on the next line, as found in a whole text."""
_KEY_LINE = re.compile(_KEY_OVER_VALUE)
_ENDS_WITH_NAME = re.compile(r"[A-Za-z][\w.\-]{0,63}[ \t]*[:=][ \t]*$")
Sensitive = Callable[[str], bool]


class _ValueUnderKey:
    """Where the value of the last sensitive YAML key alone on its line runs: the lines
    after it indented deeper than the key (the key's column, past a list's ``- ``)."""

    def __init__(self, sensitive: Sensitive) -> None:
        self._sensitive = sensitive
        self._column: int | None = None

    def holds(self, line: str) -> bool:
        """Whether ``line``, the next line, is part of that value; one that is not ends
        it, and may be a sensitive key opening another."""
        if self._column is not None:
            if not line.strip():
                return False
            if _indent(line) > self._column:
                return True
            self._column = None
        key = _KEY_LINE.fullmatch(line.rstrip("\r"))
        if key is not None and self._sensitive(key.group(3)):
            self._column = key.end(1)
        return False


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _masked_line(line: str, mask: str) -> str:
    return line[: _indent(line)] + mask + ("\r" if line.endswith("\r") else "")


def values_under_keys(text: str, sensitive: Sensitive, mask: str) -> str:
    """``text`` with every line of a YAML value under a ``sensitive`` key masked."""
    if KEY_OVER_VALUE.search(text) is None:
        return text
    under = _ValueUnderKey(sensitive)
    lines = text.split("\n")
    return "\n".join(_masked_line(line, mask) if under.holds(line) else line for line in lines)


def _opens_key(line: str) -> bool:
    """Whether ``line`` leaves a private key block open: its last BEGIN has no END."""
    begins = list(_BEGIN.finditer(line))
    return bool(begins) and _END.search(line, begins[-1].end()) is None


class LineRedactor:
    """Redacts a text given one line at a time as the whole-text redactor would redact it
    whole: each line goes through ``redact``; each line inside a private key block
    becomes ``mask``, and so does each line of a YAML value under a ``sensitive`` key.

    A block that never ends keeps every later line masked.  A bound would let the rest
    of a long key through (a PGP key with its subkeys runs to hundreds of lines), and
    what a lost END costs is the rest of an upstream's log, never a secret; the
    whole-text redactor masks such a block to the end of its text too.
    """

    def __init__(self, redact: Callable[[str], str], sensitive: Sensitive, mask: str) -> None:
        self._redact = redact
        self._mask = mask
        self._in_key = False
        self._under = _ValueUnderKey(sensitive)
        self._name_line: str | None = None

    def line(self, text: str) -> str:
        """``text`` (one line, without its end) as it may be shown."""
        if self._in_key:
            end = _END.search(text)
            if end is None:
                return self._mask
            self._in_key = False
            rest = text[end.end() :]
            return self._mask + (self.line(rest) if rest else "")
        if self._under.holds(text):
            shown = _masked_line(text, self._mask)
        elif self._name_line is not None:
            shown = self._after_name(self._name_line, text)
        else:
            shown = self._redact(text)
        self._in_key = _opens_key(text)
        self._name_line = text if _ENDS_WITH_NAME.search(text) else None
        return shown

    def _after_name(self, name_line: str, text: str) -> str:
        """``text`` redacted as the line after ``name_line`` in a whole text."""
        both = self._redact(f"{name_line}\n{text}")
        if both.count("\n") != 1:  # a mask took the line end: no telling what is whose
            return self._mask
        return both.partition("\n")[2]
