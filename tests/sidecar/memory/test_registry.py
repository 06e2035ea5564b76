"""The registry of condition families: every family a module of its own, found by the
registry, owning its feature prefixes; adding one is adding a module."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from sidecar.memory import Trace
from sidecar.memory.conditions import describe
from sidecar.memory.families import (
    FAMILIES,
    Family,
    discover,
    families,
    family_for,
    registry,
)
from sidecar.memory.features import describe_call
from sidecar.memory.predicate import Predicate
from tests.sidecar.memory.world import get_order, order, product, step

EXPECTED = (
    "bad_value",
    "not_grounded",
    "value_shape",
    "bound_field",
    "relation",
    "numeric",
    "keyed_entry",
    "computed",
    "prerequisite",
    "stated",
    "amount",
    "repeated",
)


def test_every_family_is_found_in_rank_order() -> None:
    assert FAMILIES == EXPECTED
    assert [f.rank for f in families()] == sorted(f.rank for f in families())
    for family in families():
        for prefix in family.prefixes:
            assert family_for(f"{prefix}:x") is family


def _rich_features() -> dict[str, object]:
    """One call that every family has something to say about."""
    o = order("#A1001", "pending", items=["1000000001", "1000000002"])
    flights = {"flights": [{"flight_number": "HAT001", "date": "2024-05-01", "price": 90}]}
    trace = Trace(
        [
            get_order(o),
            step("get_product", {"product_id": "9000000001"}, product({"1000000003": True})),
            step("search", {"origin": "JFK"}, flights),
        ]
    )
    call = describe_call(
        trace,
        "exchange",
        {
            "order_id": "#A1001",
            "item_ids": ["1000000001", "1000000002"],
            "new_item_ids": ["1000000003", "1000000003"],
            "flights": [{"flight_number": "HAT001", "date": "2024-05-01"}],
            "amount": 15,
            "voucher_id": "V_90210",  # named by no earlier output: its shape is read
        },
    )
    return dict(call.features)


def test_every_family_extracts_and_describes_a_feature() -> None:
    features = _rich_features()
    by_family: dict[str, list[str]] = {}
    for name in features:
        by_family.setdefault(family_for(name).name, []).append(name)
    assert set(by_family) == set(EXPECTED)
    for name, value in features.items():
        if name == "prior":
            predicate = Predicate("prior:get_order", "==", False)
        else:
            item = value[0] if isinstance(value, list) and value else value
            predicate = Predicate(name, "==", item if not isinstance(item, list) else None)
        assert describe(predicate)  # each family puts its predicates in words


def test_an_unknown_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown feature"):
        family_for("colour:x")


def test_a_new_family_is_a_module_dropped_into_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "extra_families"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "weekday.py").write_text(
        textwrap.dedent(
            """
            from sidecar.memory.families.base import Family

            class Weekday(Family):
                name = "weekday"
                rank = 99
                prefixes = ("dow",)

                def extract(self, call, out):
                    out["dow:date"] = "saturday"

            FAMILY = Weekday()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = discover([str(package)], "extra_families")
        by_name, by_prefix = registry([*families(), *found])
        assert list(by_name)[-1] == "weekday"
        assert by_prefix["dow"].name == "weekday"
    finally:
        for name in [m for m in sys.modules if m.startswith("extra_families")]:
            del sys.modules[name]


def test_two_families_may_not_share_a_prefix_or_a_rank() -> None:
    class Twin(Family):
        name = "twin"
        rank = 100
        prefixes = ("obj",)

    with pytest.raises(ValueError, match="prefix 'obj'"):
        registry([*families(), Twin()])

    class Same(Family):
        name = "same"
        rank = 0
        prefixes = ("same",)

    with pytest.raises(ValueError, match="rank 0"):
        registry([*families(), Same()])


def test_a_module_without_a_family_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "broken_families"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nothing.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(TypeError, match="defines no FAMILY"):
            discover([str(package)], "broken_families")
    finally:
        for name in [m for m in sys.modules if m.startswith("broken_families")]:
            del sys.modules[name]
