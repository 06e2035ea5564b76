"""Entries named by their fields: an object argument (or each item of a list of
objects) names an entry of an earlier output by its fields (a flight by number and
date); its other fields are the entry's state (``entry:{a}.{f}``), and a map field read
through an argument naming one of its keys (``entry:{a}.{f}[{b}]``).
"""

from __future__ import annotations

from typing import ClassVar

from sidecar.memory.families.base import (
    Call,
    Family,
    Features,
    keyed,
    map_fields,
    quality,
    scalar_keys,
)
from sidecar.memory.predicate import Predicate
from sidecar.memory.values import Scalar, canonical, key_of


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


FAMILY = KeyedEntry()
