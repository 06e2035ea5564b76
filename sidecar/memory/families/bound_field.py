"""The object an argument names: whether an earlier output holds it (``bound:{a}``),
its fields (``obj:{a}.{f}``, per element for a list argument), and a map field read
through another argument that names one of its keys (``obj:{a}.{f}[{b}]``: the seats
left in the cabin asked).  A field is a state while it has shown few values.
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
    object_fields,
    quality,
    scalar_keys,
)
from sidecar.memory.predicate import Predicate
from sidecar.memory.trace import ObjectView, Trace
from sidecar.memory.values import FeatureValue, Scalar, key_of


class BoundField(Family):
    name: ClassVar[str] = "bound_field"
    rank: ClassVar[int] = 3
    prefixes: ClassVar[tuple[str, ...]] = ("bound", "obj")
    categorical_prefixes: ClassVar[tuple[str, ...]] = ("obj:",)

    def extract(self, call: Call, out: Features) -> None:
        for name, bound in call.bound.items():
            out[f"bound:{name}"] = all(obj is not None for obj in bound)
        for name, view in call.views.items():
            for fld, value in object_fields(view, call.view_key[name]):
                out[f"obj:{name}.{fld}"] = value
        for name, found in call.element_found.items():
            self._element_fields(call, out, name, found)
        groups = [(n, [v], False) for n, v in call.views.items()]
        groups += [(n, vs, True) for n, vs in call.element_views.items()]
        map_fields(out, "obj", groups, scalar_keys(call.arguments))

    @staticmethod
    def _element_fields(
        call: Call, out: Features, name: str, found: list[tuple[str, ObjectView]]
    ) -> None:
        fields: dict[str, tuple[list[Scalar], list[str]]] = {}
        for key, view in found:
            for fld, value in object_fields(view, key):
                values, keys = fields.setdefault(fld, ([], []))
                values.append(value)
                keys.append(key)
        for fld, (values, keys) in fields.items():
            out[f"obj:{name}.{fld}"] = values
            call.anchors[f"obj:{name}.{fld}"] = keys

    def proposes_flag(self, name: str, value: bool | None) -> bool:
        # a bound value explains nothing; a field's own booleans do
        return not name.startswith("bound:") or value is False

    def describe(self, predicate: Predicate) -> str:
        if predicate.prefix == "bound":
            which = "an" if predicate.value else "no"
            return f"{predicate.rest} refers to {which} object of an earlier output"
        arg, _, fld = predicate.rest.partition(".")
        return quality(f"the object {arg} refers to has", keyed(fld), predicate)

    def absent(self, predicate: Predicate) -> bool:
        return predicate.prefix == "bound" and predicate.value is False

    def unfounded(self, predicate: Predicate) -> str | None:
        return predicate.rest if self.absent(predicate) else None

    def named(
        self, features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str,
        amounts: Mapping[str, float],
    ) -> list[str]:  # fmt: skip
        return [f"bound:{n}" for n, raw in arguments.items() if all_named(raw, error)]

    def session_evidence(self, predicate: Predicate, trace: Trace, task_input: str | None) -> str:
        if predicate.prefix != "obj":
            return ""
        _, _, fld = predicate.rest.partition(".")
        if predicate.op == "==" and trace.has_field(fld, predicate.value):
            return f"an object of the session has {fld} = {predicate.value!r}"
        if predicate.op == "not_in":
            allowed = {key_of(v) or repr(v) for v in predicate.value}
            other = sorted(trace.field_values(fld) - allowed)
            if other:
                return f"an object of the session has {fld} = {other[0]!r}, never seen to succeed"
        return ""


FAMILY = BoundField()
