"""Entries named by their fields: an object argument (or each item of a list of
objects) names an entry of an earlier output by its fields (a flight by number and
date); its other fields are the entry's state (``entry:{a}.{f}``), and a map field read
through an argument naming one of its keys (``entry:{a}.{f}[{b}]``).  A failure message
that quotes every id-like field of an item ("flight HAT001 not available on date
2024-05-01") points at that entry's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from sidecar.memory.families.base import (
    Call,
    Family,
    Features,
    all_named,
    keyed,
    map_fields,
    quality,
    scalar_keys,
)
from sidecar.memory.predicate import Predicate
from sidecar.memory.values import FeatureValue, Scalar, canonical, is_scalar, key_of


class KeyedEntry(Family):
    name: ClassVar[str] = "keyed_entry"
    rank: ClassVar[int] = 6
    prefixes: ClassVar[tuple[str, ...]] = ("entry",)
    categorical_prefixes: ClassVar[tuple[str, ...]] = ("entry:",)

    def extract(self, call: Call, out: Features) -> None:
        for name, found in call.entry_found.items():
            fields: dict[str, tuple[list[Scalar], list[str]]] = {}
            for item, view in found:
                own = canonical(dict(item))
                for fld, leaf in view.scalars.items():
                    if fld in item and key_of(item[fld]) == key_of(leaf):
                        continue  # a key field: the argument itself
                    values, keys = fields.setdefault(fld, ([], []))
                    values.append(leaf)
                    keys.append(own)
            listed = call.is_list(name)
            for fld, (values, keys) in fields.items():
                out[f"entry:{name}.{fld}"] = values if listed else values[0]
                if listed:
                    call.anchors[f"entry:{name}.{fld}"] = keys
        groups = [(n, vs, call.is_list(n)) for n, vs in call.entries.items()]
        map_fields(out, "entry", groups, scalar_keys(call.arguments))

    def describe(self, predicate: Predicate) -> str:
        arg, _, fld = predicate.rest.partition(".")
        return quality(f"the entry {arg} names has", keyed(fld), predicate)

    def named(
        self, features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str,
        amounts: Mapping[str, float],
    ) -> list[str]:  # fmt: skip
        out: list[str] = []
        for name, raw in arguments.items():
            items = raw if isinstance(raw, list | tuple) else [raw]
            quoted = any(
                isinstance(item, Mapping)
                and all_named([v for v in item.values() if is_scalar(v)], error)
                for item in items
            )
            if quoted:
                out += [f for f in features if f.startswith(f"entry:{name}.")]
        return out


FAMILY = KeyedEntry()
