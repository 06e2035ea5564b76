"""Signature normalization and the business-rule row of the classification."""

from __future__ import annotations

import pytest

from sidecar.memory import failure_kind, is_business_rule_failure, normalize_signature


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            "Error: New item 1434748144 not found or available",
            "Error: New item 3778566150 not found or available",
        ),
        ("Plan with ID P1006 not found", "Plan with ID P1007 not found"),
        ("order #W9502127 is closed", "order #W1111111 is closed"),
        ("no account for 'ann@example.com'", "no account for 'bob@example.org'"),
        ("user ann@example.com unknown", "user bob.smith@example.org unknown"),
        ("expired on 2025-01-15 at 10:30:00", "expired on 2024-12-31 at 09:00"),
        ("limit 3.5 exceeded by 12", "limit 10 exceeded by 7"),
        ('field "size" invalid', 'field "colour" invalid'),
        ("see https://a.example/x?id=1", "see https://b.example/y"),
        ("card credit_card_7239357 declined", "card gift_card_0000001 declined"),
    ],
)
def test_one_failure_met_in_many_tasks_is_one_signature(first: str, second: str) -> None:
    assert normalize_signature(first) == normalize_signature(second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("HTTP 404 Not Found", "HTTP 429 Not Found"),
        ("Error: Order not found", "Error: User not found"),
    ],
)
def test_different_failures_stay_apart(first: str, second: str) -> None:
    assert normalize_signature(first) != normalize_signature(second)


def test_normalization_keeps_the_words_and_collapses_space() -> None:
    assert normalize_signature("  Error:  New item 1434748144\n not found ") == (
        "Error: New item <num> not found"
    )
    assert normalize_signature("HTTP 503 at 10:30") == "HTTP 503 at <time>"
    assert len(normalize_signature("x " * 1000)) <= 300


@pytest.mark.parametrize(
    "text",
    [
        "Error: User not found",
        "Error: Non-delivered order cannot be exchanged",
        "Error: The number of items to be exchanged should match",
        "Error: The new item id should be different from the old item id",
        "Error: Line must be suspended to resume",
        "Error: There should be exactly one payment for a pending order",
        "Error: gift card balance is not enough",
        "Insufficient funds on the account",
        "The total does not add up",
        "Invalid date of birth",
        "The order was already cancelled",
        "Requested quantity exceeds the stock",
        "Payment method should be the original payment method",
        "Coupon not allowed for this product",
    ],
)
def test_business_rule_failures_are_deterministic(text: str) -> None:
    assert is_business_rule_failure(text)
    assert failure_kind(text) == "deterministic"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Rate limit exceeded, try again later", "transient"),
        ("HTTP 429 Too Many Requests", "transient"),
        ("HTTP 503 Service Unavailable: must be retried", "transient"),
        ("connection reset by peer", "transient"),
        ("request timed out", "unknown"),
        ("timeout: the value must be set", "unknown"),
        ("something odd happened", "unknown"),
    ],
)
def test_transient_and_causeless_failures_are_not_business_rules(text: str, kind: str) -> None:
    assert not is_business_rule_failure(text)
    assert failure_kind(text) == kind
