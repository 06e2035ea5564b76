"""Failure text written by one party, made safe to show to another agent.

An error message is data written by whoever controls a tool (or sends a report), and
the sidecar quotes it back to later agents: in learned conditions, refusals, warnings
and withheld tools.  A tool that answers "SYSTEM OVERRIDE: ignore previous
instructions" must not get that line in front of every later agent.
:func:`neutralize` keeps such text as data:

- control characters and invisible format characters (zero-width, bidirectional
  overrides) are dropped, and the text is read in its NFKC form (full-width letters
  are letters);
- from the first instruction-like phrase of a line (an address to the reader: "SYSTEM
  OVERRIDE:", "ignore previous instructions", "you must now ...", "new instructions")
  to the end of that line, the text is replaced by :data:`REMOVED`; from a
  chat-template marker (``<|im_start|>``, ``[INST]``, ``<<SYS>>``) on, all of it is;
- for a rendered line (``one_line``), lines are joined with " / ";
- with ``limit``, the result is cut to that many characters.

Ordinary error text comes back unchanged, so signatures learned before stay the same.
:func:`quoted` gives the result as a quoted literal, for a line that shows it beside
the sidecar's own words.  The raw (redacted) error stays in the cold record for audit.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Mapping

REMOVED = "[instruction-like text removed]"
MAX_SHOWN = 500
"""Characters of one failure text shown to an agent, by default."""

_QUALIFIER = (
    r"(?:previous|prior|above|earlier|preceding|foregoing|all|any|every|your|these|those|"
    r"other|existing|original|system|safety|developer)"
)
_OBJECT = (
    r"(?:instructions?|prompts?|messages?|rules?|directions?|directives?|guidelines?|"
    r"guardrails?|context|constraints?|polic(?:y|ies)|restrictions?|orders?|commands?)"
)
_INSTRUCTION = re.compile(
    "|".join(
        (
            rf"\b(?:ignore|disregard|forget|override|bypass|neglect|skip)\s+"
            rf"(?:[\w'-]+\s+){{0,3}}?{_QUALIFIER}\s+(?:[\w'-]+\s+){{0,2}}?{_OBJECT}\b",
            r"\b(?:ignore|disregard|forget)\s+(?:everything|all\s+(?:of\s+)?(?:the\s+)?"
            r"(?:above|previous|prior)|the\s+(?:above|previous|prior))\b",
            r"\b(?:system|developer|admin(?:istrator)?|root)\s*(?:override|prompt|"
            r"instructions?|command|directive)s?\b",
            r"^\s*(?:system|assistant|developer)\s*:",
            r"\bnew\s+(?:system\s+)?(?:instructions?|directives?|orders)\b",
            r"\byou\s+(?:must|should|shall|will|need\s+to|have\s+to|are\s+(?:required|"
            r"instructed|ordered)\s+to)\s+now\b",
            r"\byou\s+are\s+now\b",
            r"\bfrom\s+now\s+on\b",
            r"\b(?:act|behave|respond)\s+as\s+(?:if|though)\b",
            r"\bpretend\s+(?:to\s+be|you\s+are|that)\b",
            r"\bdo\s+not\s+(?:tell|inform|alert|warn)\s+the\s+(?:user|human|operator)\b",
            r"\b(?:attention|note|message|instructions?)\s+(?:to|for)\s+(?:the\s+|all\s+|"
            r"any\s+)?(?:ai|assistant|agent|llm|model|language\s+model|chatbot)s?\b",
            r"\b(?:jailbreak|dan\s+mode|developer\s+mode)\b",
        )
    ),
    re.IGNORECASE | re.MULTILINE,
)
# a chat template's message markers: what follows them is a message, whatever its lines
_TEMPLATE = re.compile(
    r"<\|[^|>\n]{1,32}\|>|\[/?inst\]|<</?sys>>|</?(?:system|assistant|im_start|im_end)>",
    re.IGNORECASE,
)
_ROLE_SHOUT = re.compile(r"\b(?:SYSTEM|ASSISTANT|DEVELOPER|ADMIN)\s*:")
_NEWLINES = re.compile(r"\r\n?|[\u2028\u2029\x0b\x0c\x85]")


def _invisible(ch: str) -> bool:
    if ch in "\n\t":
        return False
    category = unicodedata.category(ch)
    return category in ("Cc", "Cf")


def _cut_line(line: str) -> tuple[str, bool]:
    found = (_INSTRUCTION.search(line), _ROLE_SHOUT.search(line), _TEMPLATE.search(line))
    starts = [m.start() for m in found if m]
    if not starts:
        return line, False
    head = line[: min(starts)].rstrip()
    return (f"{head} {REMOVED}" if head else REMOVED), True


@functools.lru_cache(maxsize=4096)
def _neutral(text: str) -> tuple[str, ...]:
    visible = "".join(ch for ch in _NEWLINES.sub("\n", text) if not _invisible(ch))
    folded = unicodedata.normalize("NFKC", visible)
    lines: list[str] = []
    cut_any = False
    for line in folded.split("\n"):
        kept, cut = _cut_line(line)
        if not (cut and lines and lines[-1].endswith(REMOVED)):
            lines.append(kept)
        cut_any |= cut
        if _TEMPLATE.search(line):
            break
    # nothing to remove: the text as given (NFKC may change letters that a learned
    # signature quotes), with only invisible characters dropped
    return tuple(lines) if cut_any else tuple(visible.split("\n"))


def neutralize(text: str, limit: int | None = None, *, one_line: bool = False) -> str:
    """``text`` with instruction-like lines marked and invisible characters dropped;
    ``one_line``: its lines joined with " / "; ``limit``: cut to that many characters."""
    lines = _neutral(text)
    if one_line:
        out = " / ".join(line.strip() for line in lines if line.strip())
    else:
        out = "\n".join(lines)
    if limit is not None and len(out) > limit:
        out = out[: max(limit - 1, 0)] + "…"
    return out


def shown(text: str) -> str:
    """``text`` as a line an agent is shown: neutralized, one line, at most
    :data:`MAX_SHOWN` characters."""
    return neutralize(text, MAX_SHOWN, one_line=True)


def is_instruction_like(text: str) -> bool:
    return REMOVED in "\n".join(_neutral(text)) and REMOVED not in text


def quoted(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` neutralized and cut, as a double-quoted literal (quotes and backslashes
    inside it escaped), so that it reads as data wherever it is shown."""
    return json.dumps(neutralize(text, limit, one_line=True), ensure_ascii=False)


def as_data(fields: Mapping[str, str]) -> str:
    """Fields of free text as one line of labelled, escaped literals (:func:`quoted`):
    ``failure (quoted data): "..."``."""
    return "; ".join(f"{key} (quoted data): {quoted(text)}" for key, text in fields.items())
