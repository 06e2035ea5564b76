"""Features of a proposed call, given the session's earlier steps and its task input.

Names never hold a concrete id, so a feature means the same thing in every session:

=================================  ================================================  =============
name                               value                                             family
=================================  ================================================  =============
``value:*``                        the whole argument set, canonical JSON            bad_value
``value:{a}``                      argument ``a`` (calls of two or more arguments)   bad_value
``elem:{a}``                       the elements of list argument ``a``               bad_value
``grounded:{a}``                   every id-like value of ``a`` occurs in an earlier not_grounded
                                   output, argument, or the task input
``shape:{a}``                      character-class shape of ``a`` (per element)      value_shape
``bound:{a}``                      every id-like value of ``a`` is held by an        bound_field
                                   object of an earlier output
``obj:{a}.{f}``                    field ``f`` of the object ``a`` is bound to       bound_field
                                   (per element for a list argument)
``rel:{a}@{b}.{path}``             ``all`` / ``some`` / ``none`` of ``a``'s values   relation
                                   are among the ``path`` values of ``b``'s object
``len:{a}``                        length of list argument ``a``                     numeric
``len:{a}.{f}``                    length of collection field ``f`` of ``a``'s       numeric
                                   object
``same_len:{a}|{b}``               two list arguments have the same length           numeric
``overlap:{a}|{b}``                two list arguments share an element              numeric
``same_at:{a}|{b}``                two list arguments hold one value at one index    numeric
``cmp:{q}>{b}.{f}``                a quantity (a numeric argument, ``len(a)``,       numeric
                                   ``sum(a.g)`` over the objects of list ``a``)
                                   exceeds numeric field ``f`` of ``b``'s object
=================================  ================================================  =============

A list-valued feature (one value per element) satisfies a predicate when any of its
values does.  The object an argument value is bound to is chosen by :class:`Trace`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, Literal

from sidecar.memory.evidence import Step
from sidecar.memory.trace import ObjectView, Trace
from sidecar.memory.values import Scalar, canonical, is_id_like, is_scalar, key_of, shape

FeatureValue = Scalar | list[Scalar]
Family = Literal["bad_value", "not_grounded", "value_shape", "bound_field", "relation", "numeric"]
FAMILIES: tuple[Family, ...] = (
    "bad_value",
    "not_grounded",
    "value_shape",
    "bound_field",
    "relation",
    "numeric",
)
MAX_COMPARISONS = 48
"""``cmp:`` features per call, at most (a cross product of quantities and fields)."""

_FAMILY_OF_PREFIX: dict[str, Family] = {
    "value": "bad_value",
    "elem": "bad_value",
    "grounded": "not_grounded",
    "shape": "value_shape",
    "bound": "bound_field",
    "obj": "bound_field",
    "rel": "relation",
    "len": "numeric",
    "same_len": "numeric",
    "overlap": "numeric",
    "same_at": "numeric",
    "cmp": "numeric",
}


def family_of(feature: str) -> Family:
    prefix = feature.split(":", 1)[0]
    try:
        return _FAMILY_OF_PREFIX[prefix]
    except KeyError:
        raise ValueError(f"unknown feature {feature!r}") from None


def call_features(
    before: Sequence[Step] | Trace,
    tool: str,
    arguments: Mapping[str, Any],
    task_input: str | None = None,
) -> dict[str, FeatureValue]:
    """The features of calling ``tool`` with ``arguments`` after the steps ``before``
    (a :class:`Trace` of them is reused as is; a plain sequence is indexed first)."""
    return features_and_anchors(before, tool, arguments, task_input)[0]


def features_and_anchors(
    before: Sequence[Step] | Trace,
    tool: str,
    arguments: Mapping[str, Any],
    task_input: str | None = None,
) -> tuple[dict[str, FeatureValue], dict[str, list[str]]]:
    """:func:`call_features`, and for each list-valued feature read per element of a list
    argument, the element each value comes from (the learner counts evidence per
    distinct object, not per session)."""
    trace = before if isinstance(before, Trace) else Trace(before, task_input)
    out: dict[str, FeatureValue] = {"value:*": canonical(dict(arguments))}
    anchors: dict[str, list[str]] = {}
    names = sorted(arguments)
    views: dict[str, ObjectView] = {}
    element_views: dict[str, list[ObjectView]] = {}
    keys_of: dict[str, list[str]] = {}
    for name in names:
        value = arguments[name]
        if len(names) > 1:
            out[f"value:{name}"] = canonical(value)
        is_list = isinstance(value, list | tuple)
        items = list(value) if is_list else [value]
        if is_list:
            out[f"len:{name}"] = len(items)
            out[f"elem:{name}"] = [canonical(v) for v in items if is_scalar(v)]
        ids = [v for v in items if is_id_like(v)]
        keys = [k for k in (key_of(v) for v in ids) if k is not None]
        if not keys:
            continue
        keys_of[name] = keys
        out[f"grounded:{name}"] = all(trace.seen(k, task_input) for k in keys)
        shapes: list[Scalar] = [shape(k) for k in keys]
        out[f"shape:{name}"] = shapes if is_list else shapes[0]
        if is_list:
            anchors[f"shape:{name}"] = keys
        bound = [trace.binding(k, name) for k in keys]
        out[f"bound:{name}"] = all(obj is not None for obj in bound)
        found = [(k, trace.view(obj)) for k, obj in zip(keys, bound, strict=True) if obj]
        if not found:
            continue
        if is_list:
            element_views[name] = [view for _, view in found]
            _object_fields_of_elements(out, anchors, name, found)
        else:
            views[name] = found[0][1]
            _object_fields(out, name, found[0][1], keys[0])
    _relations(out, keys_of, views)
    _list_pairs(out, arguments, names)
    _comparisons(out, arguments, names, views, element_views)
    return out, anchors


def _object_fields(out: dict[str, FeatureValue], name: str, view: ObjectView, key: str) -> None:
    for field, value in view.scalars.items():
        if key_of(value) != key:  # the identity field is the argument itself
            out[f"obj:{name}.{field}"] = value
    for field, size in view.sizes.items():
        out[f"len:{name}.{field}"] = size


def _object_fields_of_elements(
    out: dict[str, FeatureValue],
    anchors: dict[str, list[str]],
    name: str,
    found: list[tuple[str, ObjectView]],
) -> None:
    fields: dict[str, tuple[list[Scalar], list[str]]] = {}
    for key, view in found:
        for field, value in view.scalars.items():
            if key_of(value) != key:
                values, keys = fields.setdefault(field, ([], []))
                values.append(value)
                keys.append(key)
    for field, (values, keys) in fields.items():
        out[f"obj:{name}.{field}"] = values
        anchors[f"obj:{name}.{field}"] = keys


def _relations(
    out: dict[str, FeatureValue], keys_of: Mapping[str, list[str]], views: Mapping[str, ObjectView]
) -> None:
    for name, keys in keys_of.items():
        for other, view in views.items():
            if other == name:
                continue
            for path, members in view.members.items():
                hits = sum(k in members for k in keys)
                verdict = "all" if hits == len(keys) else "some" if hits else "none"
                out[f"rel:{name}@{other}.{path}"] = verdict


def _list_pairs(
    out: dict[str, FeatureValue], arguments: Mapping[str, Any], names: list[str]
) -> None:
    lists = [n for n in names if isinstance(arguments[n], list | tuple)]
    for a, b in combinations(lists, 2):
        left = [canonical(v) for v in arguments[a]]
        right = [canonical(v) for v in arguments[b]]
        out[f"same_len:{a}|{b}"] = len(left) == len(right)
        out[f"overlap:{a}|{b}"] = bool(set(left) & set(right))
        out[f"same_at:{a}|{b}"] = any(x == y for x, y in zip(left, right, strict=False))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _comparisons(
    out: dict[str, FeatureValue],
    arguments: Mapping[str, Any],
    names: list[str],
    views: Mapping[str, ObjectView],
    element_views: Mapping[str, list[ObjectView]],
) -> None:
    if not views:
        return
    quantities: list[tuple[str, str, float]] = []  # (argument it comes from, name, value)
    for name in names:
        value = arguments[name]
        number = _number(value)
        if number is not None:
            quantities.append((name, name, number))
        elif isinstance(value, list | tuple):
            quantities.append((name, f"len({name})", float(len(value))))
    for name, elements in element_views.items():
        if len(elements) != len(arguments[name]):
            continue  # a sum over some elements only would mislead
        numeric: dict[str, float] = {}
        for view in elements:
            for field, raw in view.scalars.items():
                number = _number(raw)
                if number is not None:
                    numeric[field] = numeric.get(field, 0.0) + number
        quantities += [(name, f"sum({name}.{f})", total) for f, total in numeric.items()]
    made = 0
    for source, label, quantity in quantities:
        for other, view in views.items():
            if other == source:
                continue
            for field, raw in view.scalars.items():
                number = _number(raw)
                if number is None:
                    continue
                out[f"cmp:{label}>{other}.{field}"] = quantity > number
                made += 1
                if made >= MAX_COMPARISONS:
                    return
