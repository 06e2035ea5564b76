"""Decision-boundary step 1: is a failure deterministic?

The first rule that applies decides (the same table is in `docs/service.md`, *Is a failure
deterministic?*):

==  ========================================  ==============  ===========================
#   evidence                                  kind            example
==  ========================================  ==============  ===========================
1   ``failure.kind`` given in the report      as given        ``"kind": "transient"``
2   ``error.retryable`` is true / false       transient /     a timeout marked retryable
                                              deterministic
3   HTTP status 408, 425, 429, 502, 503, 504  transient       ``HTTP 429``
4   HTTP status 400-499 (other), 501          deterministic   ``413 Payload Too Large``
5   rate limit, connection reset / refused,   transient       ``ECONNRESET``
    DNS failure, "temporarily unavailable",
    "try again"
6   timeout with a payload-size cause         deterministic   ``timeout on 7.2 MB payload``
7   schema / validation / parse / type        deterministic   ``ValidationError: field x``
    errors, "not found", "payload too large",
    "context length exceeded", "unsupported"
8   a business rule refused the call: not     deterministic   ``Insufficient balance``
    enough / insufficient, cannot be, does
    not add up, already, exceeds, should be,
    must be, not allowed / eligible,
    mismatch, is required...
9   anything else (a bare timeout, HTTP 500)  unknown         archived once reproduced
==  ========================================  ==============  ===========================

The HTTP status is read from ``error.status`` / ``error.status_code`` /
``error.http_status``, else from the signature (``HTTP 503``, ``status=503``, or a
signature that starts with the code).  An *unknown* failure is archived only when the
same topology and signature have been reported ``reproduce_threshold`` times.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["deterministic", "transient", "unknown"]

TRANSIENT_STATUS = frozenset({408, 425, 429, 502, 503, 504})

_STATUS_IN_TEXT = re.compile(r"(?i)(?:^\s*|\b(?:http|status|code)[\s:=/#-]*)([1-5]\d\d)\b")

_TRANSIENT_TEXT = re.compile(
    r"(?i)rate[\s_-]?limit|too many requests|throttl|connection (?:reset|refused|aborted)|"
    r"econnreset|econnrefused|epipe|broken pipe|\bdns\b|name resolution|getaddrinfo|eai_again|"
    r"nodename nor servname|temporar(?:y|ily) (?:unavailable|failure)|service unavailable|"
    r"try again|retry later|overloaded"
)
_TIMEOUT_TEXT = re.compile(r"(?i)time[\s_-]?d?[\s_-]?out|deadline exceeded|etimedout")
_SIZE_CAUSE_TEXT = re.compile(
    r"(?i)payload|too large|\bsize\b|\b\d+(?:\.\d+)?\s*(?:[kmg]i?b|bytes)\b|"
    r"exceed|tokens?\b|context length"
)
_DETERMINISTIC_TEXT = re.compile(
    r"(?i)schema|validat|invalid|malformed|pars(?:e|ing) error|typeerror|keyerror|"
    r"valueerror|not found|no such|does not exist|payload too large|request entity too large|"
    r"context[_ ]length|maximum context|unsupported|not supported|not implemented|"
    r"unprocessable|bad request|forbidden|unauthori[sz]ed|permission denied"
)


BUSINESS_RULE_TEXT = re.compile(
    r"(?i)\bnot found\b|\bno such\b|\bdoes not exist\b|\bnot enough\b|\binsufficient\b|"
    r"\bcan ?not be\b|\bcan't be\b|\bcould not be\b|\bdo(?:es)?(?: not|n't) add up\b|\binvalid\b|"
    r"\balready\b|\bexceed(?:s|ed)?\b|\b(?:should|must)(?: not)? (?:be|match|have|equal)\b|"
    r"\bnot (?:allowed|permitted|eligible|available|supported)\b|\bout of stock\b|"
    r"\bdoes(?: not|n't) match\b|\bmismatch\b|\b(?:is|are) required\b|\bmissing\b|"
    r"\bno longer\b|\bonly \w+(?: \w+)? (?:can|may)\b|"
    r"\bnot (?:authenticated|authori[sz]ed|logged in|open)\b|\bunauthori[sz]ed\b|"
    r"\b(?:permission|access) denied\b|\bforbidden\b|\b(?:log|sign) in first\b|"
    r"\b(?:is|are) (?:closed|locked|suspended|disabled)\b"
)
"""Validation and business-rule refusals: the same call in the same state is refused
again (row 8; the transient rows come first, so a rate limit never reads as one)."""


@dataclass(frozen=True)
class Classification:
    kind: Kind
    rule: int
    """Row of the table that decided."""
    reason: str


def http_status(signature: str, error: Mapping[str, Any]) -> int | None:
    for key in ("status", "status_code", "http_status"):
        value = error.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
        if isinstance(value, str) and value.strip().isdigit():
            code = int(value.strip())
            if 100 <= code <= 599:
                return code
    match = _STATUS_IN_TEXT.search(signature)
    return int(match.group(1)) if match else None


def classify(
    signature: str, kind: str | None = None, error: Mapping[str, Any] | None = None
) -> Classification:
    error = error or {}
    if kind == "deterministic":
        return Classification("deterministic", 1, "the report says the failure is deterministic")
    if kind == "transient":
        return Classification("transient", 1, "the report says the failure is transient")
    retryable = error.get("retryable")
    if isinstance(retryable, bool):
        if retryable:
            return Classification("transient", 2, "the report marks the failure retryable")
        return Classification("deterministic", 2, "the report marks the failure not retryable")
    status = http_status(signature, error)
    if status is not None and status in TRANSIENT_STATUS:
        return Classification("transient", 3, f"HTTP {status} is transient; retry later")
    if status is not None and (400 <= status <= 499 or status == 501):
        return Classification("deterministic", 4, f"HTTP {status} fails the same way on retry")
    text = " ".join([signature, str(error.get("message", "")), str(error.get("type", ""))])
    found = _TRANSIENT_TEXT.search(text)
    if found:
        return Classification("transient", 5, f"{found.group(0)!r} is a transient condition")
    if _TIMEOUT_TEXT.search(text):
        if _SIZE_CAUSE_TEXT.search(text) or "payload_bytes" in error:
            return Classification(
                "deterministic", 6, "a timeout caused by payload size recurs with that payload"
            )
        return Classification("unknown", 9, "a timeout without a stated cause may be transient")
    found = _DETERMINISTIC_TEXT.search(text)
    if found:
        return Classification("deterministic", 7, f"{found.group(0)!r} fails the same way on retry")
    found = BUSINESS_RULE_TEXT.search(text)
    if found:
        return Classification(
            "deterministic", 8, f"{found.group(0)!r}: a business rule refuses the same call again"
        )
    if status is not None:
        return Classification("unknown", 9, f"HTTP {status} may or may not recur")
    return Classification("unknown", 9, "no rule of the classification table applies")
