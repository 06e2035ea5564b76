"""Values, shapes and the session trace: grounding and which object a value is bound to."""

from __future__ import annotations

import pytest

from sidecar.memory import Step, Trace
from sidecar.memory.values import canonical, is_id_like, shape
from tests.sidecar.memory.world import get_order, order, product, step


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("#W9502127", "#A9{7}"),
        ("#9502127", "#9{7}"),
        ("#EBD12345", "#A9{5}"),
        ("P1006", "A9{4}"),
        ("credit_card_8897086", "a_a_9{7}"),
        ("ann.lee3271@example.com", "a.a9{4}@a.a"),
        ("x7", "a9"),
    ],
)
def test_shape(value: str, expected: str) -> None:
    assert shape(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("#W1", True),
        ("paypal_3024827", True),
        ("ann@example.com", True),
        (1434748144, True),
        ("pending", False),
        ("T-Shirt", False),
        ("no longer needed", False),
        (12, False),
        (True, False),
        (3.5, False),
    ],
)
def test_id_like(value: object, expected: bool) -> None:
    assert is_id_like(value) is expected


def test_canonical_values() -> None:
    assert canonical("abc") == "abc"
    assert canonical({"b": 1, "a": [2]}) == '{"a":[2],"b":1}'
    assert canonical("x" * 500).startswith("sha256:")


def test_grounding_sees_outputs_arguments_texts_and_the_task_input() -> None:
    trace = Trace(
        [
            step(
                "get_order",
                {"order_id": "#A1"},
                order("#A1", items=["1000000001"], payments=["card_1111111"]),
            ),
            step("lookup", {"code": "Z_77"}, "plain text mentioning K_42 here"),
            step("find", {"email": "x_1@example.com"}, error="Error: no match for Q_9"),
        ],
        task_input="my order is #B2",
    )
    for value in ("#A1", "1000000001", "card_1111111", "Z_77", "K_42", "Q_9", "#B2"):
        assert trace.seen(value), value
    assert not trace.seen("#C3")
    assert trace.seen("#C3", task_input="and #C3 too")


def test_binding_prefers_identity_over_reference_and_the_latest_state() -> None:
    o = order("#A1", "pending", payments=["card_1111111"])
    trace = Trace([get_order(o)])
    bound = trace.binding("#A1", "order_id")
    assert bound is not None and bound["status"] == "pending"
    # a later output holding the same order wins: the object's latest state
    trace.add(step("cancel", {"order_id": "#A1"}, order("#A1", "cancelled")))
    bound = trace.binding("#A1", "order_id")
    assert bound is not None and bound["status"] == "cancelled"
    # a payment record only references the payment method; a map keyed by the id is
    # the method itself
    trace.add(
        step(
            "get_user",
            {"user_id": "u_1"},
            {
                "user_id": "u_1",
                "payment_methods": {"card_1111111": {"source": "card", "id": "card_1111111"}},
            },
        )
    )
    method = trace.binding("card_1111111", "payment_method_id")
    assert method == {"source": "card", "id": "card_1111111"}


def test_binding_of_list_elements_names_the_argument_singular() -> None:
    trace = Trace(
        [step("get_product", {"product_id": "9000000001"}, product({"2000000001": False}))]
    )
    variant = trace.binding("2000000001", "new_item_ids")
    assert variant is not None and variant["available"] is False
    assert trace.binding("2999999999", "new_item_ids") is None


def test_fields_of_bound_objects_are_indexed_for_lookups() -> None:
    trace = Trace([get_order(order("#A1", "pending"))])
    assert trace.has_field("status", "pending")
    assert not trace.has_field("status", "delivered")
    assert trace.field_values("status") == {"pending"}


def test_a_step_with_unparseable_json_text_is_text() -> None:
    trace = Trace([Step("t", {}, "{not json A_1")])
    assert trace.seen("A_1")
