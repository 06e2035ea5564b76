"""Failure signatures: one normalized text per kind of failure, and whether it recurs.

``normalize_signature`` masks what differs between two occurrences of the same failure
(ids, numbers, dates, quoted values, emails, URLs), so that "Item 55501 is out of
stock" met in one task and "Item 81234 is out of stock" met in another are one
signature.  HTTP status codes are kept: "HTTP 404" and "HTTP 429" are different
failures.

``is_business_rule_failure`` recognises the validation and business-rule refusals of a
tool ("not found", "insufficient", "cannot be", "must be", "already", "exceeds"...):
the same call in the same state is refused again, so they are deterministic.  A text
with a transient marker (rate limit, 429/503, connection reset, a timeout) is never
one.  ``failure_kind`` is the classification table of :mod:`sidecar.classify`, whose row
8 is this test.
"""

from __future__ import annotations

import re

from sidecar.classify import BUSINESS_RULE_TEXT, Kind, classify
from sidecar.trust.neutralize import neutralize

MAX_SIGNATURE = 300

_HTTP_STATUS = re.compile(r"(?i)\b(?:http|status|code)[\s:=/#-]*[1-5]\d\d\b")
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\bhttps?://\S+"), "<url>"),
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), "<email>"),
    (re.compile(r"(?<![\w'])'[^'\n]{0,200}'(?![\w'])|\"[^\"\n]{0,200}\"|`[^`\n]{0,200}`"), "<str>"),
    (re.compile(r"(?i)\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b"), "<id>"),
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
        ),
        "<date>",
    ),
    (re.compile(r"\b\d{1,2}/\d{1,2}/\d{2,4}\b"), "<date>"),
    (re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\b"), "<time>"),
)
_TOKEN = re.compile(r"[#\w][\w#./:+-]*")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*%?")
_SPACES = re.compile(r"\s+")
# placeholders for the kept HTTP statuses: private-use characters, never digits
_KEEP = "\ue000"


def _mask_token(match: re.Match[str]) -> str:
    token = match.group(0)
    body = token.rstrip(".:-+/")
    tail = token[len(body) :]
    if not any(ch.isdigit() for ch in body):
        return token
    return ("<num>" if _NUMBER.fullmatch(body) else "<id>") + tail


_TRANSIENT_MARKER = re.compile(
    r"(?i)rate[\s_-]?limit|too many requests|throttl|\b(?:429|502|503|504)\b|"
    r"connection (?:reset|refused|aborted)|econn\w+|broken pipe|time[\s_-]?d?[\s_-]?out|"
    r"deadline exceeded|temporar(?:y|ily)|try again|retry later|overloaded|"
    r"service unavailable"
)


def normalize_signature(text: str) -> str:
    """The failure text with its varying parts masked, instruction-like lines marked
    (:func:`sidecar.trust.neutralize.neutralize`), whitespace collapsed, capped."""
    kept: list[str] = []

    def keep(match: re.Match[str]) -> str:
        kept.append(match.group(0))
        return _KEEP + chr(0xE100 + len(kept) - 1)

    # quoted to later agents: instruction-like lines never reach them
    out = _HTTP_STATUS.sub(keep, neutralize(text[: MAX_SIGNATURE * 8]))
    for pattern, mask in _MASKS:
        out = pattern.sub(mask, out)
    out = _TOKEN.sub(_mask_token, out)
    out = re.sub(_KEEP + "(.)", lambda m: kept[ord(m.group(1)) - 0xE100], out)
    return _SPACES.sub(" ", out).strip()[:MAX_SIGNATURE]


def is_business_rule_failure(text: str) -> bool:
    """A refusal by a validation or business rule: the same call fails again."""
    return bool(BUSINESS_RULE_TEXT.search(text)) and not _TRANSIENT_MARKER.search(text)


def failure_kind(text: str) -> Kind:
    """The classification table's verdict (whose row 8 makes business-rule refusals
    deterministic)."""
    return classify(text).kind


FAMILY_SIMILARITY = 0.75
"""Two signatures whose word sets overlap this much (Jaccard) are one failure."""
_WORDS = re.compile(r"[a-z]+")
_PLACEHOLDERS = frozenset({"num", "id", "str", "date", "time", "url", "email"})


def signature_words(signature: str) -> frozenset[str]:
    """The words of a normalized signature, lower-cased and without a plural or past
    ending: the same failure written with other punctuation, case, ids, numbers, quoted
    values, word order or inflection has the same words."""
    words = set(_WORDS.findall(signature.lower())) - _PLACEHOLDERS
    return frozenset(re.sub(r"(?:es|s|ed)$", "", w) if len(w) > 4 else w for w in words)


def same_family(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two signatures' words (:func:`signature_words`) name one failure."""
    if not a and not b:
        return True
    return len(a & b) / len(a | b) >= FAMILY_SIMILARITY
