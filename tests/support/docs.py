"""The user's documentation: the README (the front page) and the pages under ``docs/``
(``docs/design.md``, the design notes, included), read as one text or by section, and
its blocks as the tests that run them read them: a command block (```sh) split into
commands, each with the ``# `` lines after it (what it prints); in expected lines ``…``
and ``...`` stand for any text, and a line holding only ``...`` for any number of
lines."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
"""Every docs page, ``docs/design.md`` among them."""


def documentation() -> str:
    """The README and every docs page, one after the other."""
    return "\n\n".join(p.read_text() for p in [README, *PAGES])


def section(title: str) -> str:
    """The section whose heading starts with ``title``: ``## title`` up to the next
    ``## `` heading, or a page's own ``# title`` (the whole page)."""
    for page in [README, *PAGES]:
        text = "\n" + page.read_text()
        if text.startswith(f"\n# {title}"):
            return text[1:]
        start = text.find(f"\n## {title}")
        if start >= 0:
            end = text.find("\n## ", start + 1)
            return text[start + 1 : end if end > 0 else len(text)]
    raise KeyError(f"no section {title!r} in the README or docs/")


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """The fenced blocks of ``text``: (language, lines)."""
    out: list[tuple[str, list[str]]] = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        out.append((match.group(1), match.group(2).rstrip("\n").split("\n")))
    return out


def commands(lines: list[str]) -> list[tuple[str, list[str]]]:
    """A shell block as (command, the ``# `` lines after it)."""
    out: list[tuple[str, list[str]]] = []
    pending: list[str] = []
    for line in lines:
        if not pending and line.startswith("#"):
            if out:
                out[-1][1].append(line[2:] if line.startswith("# ") else line[1:])
            continue
        pending.append(line)
        text = "\n".join(pending)
        if text.endswith("\\"):
            continue
        try:
            shlex.split(text)
        except ValueError:
            continue  # a quote still open: the command goes on
        out.append((text, []))  # a trailing ``# note`` is bash's to ignore
        pending = []
    assert not pending, f"an unfinished command in the README: {pending}"
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` shows ``expected`` in order (see the module docstring), with
    runs of white space (line breaks too) counted as one space: what the README wraps,
    a command may print on one line."""
    parts = []
    for line in (e.strip() for e in expected if e.strip()):
        if line in ("...", "…"):
            parts.append(".*?")
            continue
        pieces = [re.escape(" ".join(p.split())) for p in re.split(r"…|\.\.\.", line)]
        parts.append(".*?".join(pieces))
    pattern = " ?".join(parts)
    text = " ".join(" ".join(actual).split())
    return re.search(pattern, text, re.S) is not None
