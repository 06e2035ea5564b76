"""The documented classification table, row by row."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.classify import classify


@pytest.mark.parametrize(
    ("signature", "kind", "error", "expected", "row"),
    [
        # 1: an explicit kind wins over everything
        ("HTTP 429 Too Many Requests", "deterministic", {}, "deterministic", 1),
        ("ValidationError: bad field", "transient", {}, "transient", 1),
        # 2: the report's retryable flag
        ("timeout after 30s", None, {"retryable": True}, "transient", 2),
        ("timeout after 30s", None, {"retryable": False}, "deterministic", 2),
        # 3: transient HTTP statuses, from error fields or the signature
        ("HTTP 429 Too Many Requests", None, {}, "transient", 3),
        ("upstream failed", None, {"status": 503}, "transient", 3),
        ("status=502 bad gateway", None, {}, "transient", 3),
        ("504", None, {}, "transient", 3),
        ("gateway", None, {"status_code": "504"}, "transient", 3),
        # 4: other client errors, deterministic
        ("HTTP 400 Bad Request", None, {}, "deterministic", 4),
        ("HTTP 404 Not Found", None, {}, "deterministic", 4),
        ("413 Payload Too Large", None, {}, "deterministic", 4),
        ("denied", None, {"http_status": 403}, "deterministic", 4),
        # 5: transient conditions in text
        ("ECONNRESET while reading body", None, {}, "transient", 5),
        ("connection reset by peer", None, {}, "transient", 5),
        ("DNS lookup failed: EAI_AGAIN", None, {}, "transient", 5),
        ("getaddrinfo failed for api.example", None, {}, "transient", 5),
        ("rate limit exceeded", None, {}, "transient", 5),
        # 6: timeouts with a payload-size cause
        ("timeout after 30s on a 7.2 MB payload", None, {}, "deterministic", 6),
        ("llm_extractor timed out", None, {"payload_bytes": 7_000_000}, "deterministic", 6),
        ("Timeout: input exceeds 8192 tokens", None, {}, "deterministic", 6),
        # 7: schema / validation / parse errors
        ("ValidationError: 'price' is a required property", None, {}, "deterministic", 7),
        ("JSON schema mismatch in response", None, {}, "deterministic", 7),
        ("parse error at line 3", None, {}, "deterministic", 7),
        ("KeyError: 'items'", None, {}, "deterministic", 7),
        ("maximum context length exceeded", None, {}, "deterministic", 7),
        # 8: unknown
        ("timeout after 30s", None, {}, "unknown", 9),
        ("HTTP 500 Internal Server Error", None, {}, "unknown", 9),
        ("something odd happened", None, {}, "unknown", 9),
    ],
)
def test_classification_table(
    signature: str, kind: str | None, error: dict[str, Any], expected: str, row: int
) -> None:
    verdict = classify(signature, kind, error)
    assert (verdict.kind, verdict.rule) == (expected, row)
    assert verdict.reason


def test_a_number_inside_text_is_not_a_status() -> None:
    assert classify("timed out after 500 ms").kind == "unknown"


def test_dns_only_as_a_word() -> None:
    assert classify("schema error in getDNSRecords output").kind == "deterministic"
    assert classify("DNS lookup failed").kind == "transient"
