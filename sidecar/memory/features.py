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
``obj:{a}.{f}[{b}]``               the value of map field ``f`` of ``a``'s object    bound_field
                                   under the key argument ``b`` names (a cabin)
``entry:{a}.{f}``                  field ``f`` of the entry of an earlier output      keyed_entry
                                   that object argument ``a`` (or each item of list
                                   ``a``) names by its fields (a flight named by
                                   number and date); ``entry:{a}.{f}[{b}]`` as above
``qty:{q}?{t}``                    ``<``, ``=`` or ``>``: a computed quantity         computed
                                   against an amount: sums over list items' fields
                                   (``sum(a.g)``), over the entries they name
                                   (``sum(a->g)``), times a count (``*len(b)``),
                                   against numeric arguments, other quantities and
                                   numeric fields of the objects the call names
``prior``                          the tools that succeeded earlier in the session   prerequisite
                                   (``prior:{T}`` is whether ``T`` did)
=================================  ================================================  =============

A list-valued feature (one value per element) satisfies a predicate when any of its
values does.  The object an argument value is bound to is chosen by :class:`Trace`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, Literal, NamedTuple

from sidecar.memory.evidence import Step
from sidecar.memory.trace import ObjectView, Trace
from sidecar.memory.values import Scalar, canonical, is_id_like, is_scalar, key_of, shape

FeatureValue = Scalar | list[Scalar]
Family = Literal[
    "bad_value",
    "not_grounded",
    "value_shape",
    "bound_field",
    "relation",
    "numeric",
    "keyed_entry",
    "computed",
    "prerequisite",
]
FAMILIES: tuple[Family, ...] = (
    "bad_value",
    "not_grounded",
    "value_shape",
    "bound_field",
    "relation",
    "numeric",
    "keyed_entry",
    "computed",
    "prerequisite",
)
MAX_COMPARISONS = 48
"""``cmp:`` features per call, at most (a cross product of quantities and fields)."""
MAX_QUANTITY_COMPARISONS = 64
"""``qty:`` features per call, at most."""
EQUAL_TOLERANCE = 0.005
"""Two amounts within half a cent (or 0.5 per mille) are equal."""

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
    "entry": "keyed_entry",
    "qty": "computed",
    "prior": "prerequisite",
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
    return describe_call(before, tool, arguments, task_input).features


class CallView(NamedTuple):
    features: dict[str, FeatureValue]
    anchors: dict[str, list[str]]
    """For each list-valued feature read per element of a list argument, the element
    each value comes from."""
    marks: list[str]
    """The objects the call acts on (the grounded id-like values of its single-valued
    arguments): what makes two failing calls one situation
    (:mod:`sidecar.memory.independence`)."""
    amounts: dict[str, float]
    """The computed quantities and amounts of the ``qty:`` features, by label (what the
    numbers of a failure message are aligned with)."""


def features_and_anchors(
    before: Sequence[Step] | Trace,
    tool: str,
    arguments: Mapping[str, Any],
    task_input: str | None = None,
) -> tuple[dict[str, FeatureValue], dict[str, list[str]]]:
    view = describe_call(before, tool, arguments, task_input)
    return view.features, view.anchors


def describe_call(
    before: Sequence[Step] | Trace,
    tool: str,
    arguments: Mapping[str, Any],
    task_input: str | None = None,
) -> CallView:
    """:func:`call_features`, with the anchors of per-element features and the call's
    situation marks."""
    trace = before if isinstance(before, Trace) else Trace(before, task_input)
    out: dict[str, FeatureValue] = {"value:*": canonical(dict(arguments))}
    anchors: dict[str, list[str]] = {}
    names = sorted(arguments)
    views: dict[str, ObjectView] = {}
    element_views: dict[str, list[ObjectView]] = {}
    keys_of: dict[str, list[str]] = {}
    grounded: list[str] = []
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
        seen = [k for k in keys if trace.seen(k, task_input)]
        if not is_list:
            # the object a call acts on is named by a single argument (an order, an
            # account); the ids in a list are its parts (items, often shared by many)
            grounded += seen
        out[f"grounded:{name}"] = len(seen) == len(keys)
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
    entries = _entries(out, anchors, trace, arguments, names)
    _map_fields(out, arguments, names, views, element_views, entries)
    _relations(out, keys_of, views)
    _list_pairs(out, arguments, names)
    _comparisons(out, arguments, names, views, element_views)
    amounts = _quantities(out, arguments, names, views, element_views, entries)
    out["prior"] = list[Scalar](sorted(trace.succeeded))
    return CallView(out, anchors, sorted(set(grounded)), amounts)


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


def _entries(
    out: dict[str, FeatureValue],
    anchors: dict[str, list[str]],
    trace: Trace,
    arguments: Mapping[str, Any],
    names: list[str],
) -> dict[str, list[ObjectView]]:
    """``entry:`` features: the entries that object arguments (and items of lists of
    objects) name by their fields.  Returns each argument's entry views, in item order,
    only when every item named one (a sum over some of them would mislead)."""
    found: dict[str, list[ObjectView]] = {}
    for name in names:
        value = arguments[name]
        items = value if isinstance(value, list | tuple) else [value]
        if not items or not all(isinstance(v, Mapping) for v in items):
            continue
        views: list[ObjectView] = []
        fields: dict[str, tuple[list[Scalar], list[str]]] = {}
        for item in items:
            obj = trace.entry(item)
            if obj is None:
                continue
            view = trace.view(obj)
            views.append(view)
            own = canonical(dict(item))
            for fld, leaf in view.scalars.items():
                if fld in item and key_of(item[fld]) == key_of(leaf):
                    continue  # a key field: the argument itself
                values, keys = fields.setdefault(fld, ([], []))
                values.append(leaf)
                keys.append(own)
        listed = isinstance(value, list | tuple)
        for fld, (values, keys) in fields.items():
            out[f"entry:{name}.{fld}"] = values if listed else values[0]
            if listed:
                anchors[f"entry:{name}.{fld}"] = keys
        if views and len(views) == len(items):
            found[name] = views
    return found


def _map_fields(
    out: dict[str, FeatureValue],
    arguments: Mapping[str, Any],
    names: list[str],
    views: Mapping[str, ObjectView],
    element_views: Mapping[str, list[ObjectView]],
    entries: Mapping[str, list[ObjectView]],
) -> None:
    """A map field read through an argument that names one of its keys: the seats left
    in the cabin the call asks for, the price in its currency."""
    keys = {n: key_of(arguments[n]) for n in names if is_scalar(arguments[n])}
    keyed = {n: k for n, k in keys.items() if k is not None}
    if not keyed:
        return
    groups: list[tuple[str, str, list[ObjectView], bool]] = [
        ("obj", n, [v], False) for n, v in views.items()
    ]
    groups += [("obj", n, vs, True) for n, vs in element_views.items()]
    groups += [
        ("entry", n, vs, isinstance(arguments[n], list | tuple)) for n, vs in entries.items()
    ]
    for prefix, name, group, listed in groups:
        fields = {f for v in group for f in v.maps}
        for fld in sorted(fields):
            for other, key in keyed.items():
                if other == name:
                    continue
                values = [v.maps[fld][key] for v in group if key in v.maps.get(fld, {})]
                if values:
                    feature = f"{prefix}:{name}.{fld}[{other}]"
                    out[feature] = values if listed else values[0]


Quantity = tuple[str, str, float]
"""(the argument it comes from, its label, its value)."""


def _numeric_fields(views: Sequence[ObjectView], arguments: Mapping[str, Any]) -> dict[str, float]:
    """Per numeric field (and map field read through a key argument) of ``views``, the
    sum over them, for the fields every view has."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    keys = {n: key_of(v) for n, v in arguments.items() if is_scalar(v) and key_of(v)}
    for view in views:
        for fld, raw in view.scalars.items():
            number = _number(raw)
            if number is not None:
                totals[fld] = totals.get(fld, 0.0) + number
                counts[fld] = counts.get(fld, 0) + 1
        for fld, table in view.maps.items():
            for arg, key in keys.items():
                number = _number(table.get(key)) if key is not None else None
                if number is not None:
                    label = f"{fld}[{arg}]"
                    totals[label] = totals.get(label, 0.0) + number
                    counts[label] = counts.get(label, 0) + 1
    return {f: t for f, t in totals.items() if counts[f] == len(views)}


def _quantities(
    out: dict[str, FeatureValue],
    arguments: Mapping[str, Any],
    names: list[str],
    views: Mapping[str, ObjectView],
    element_views: Mapping[str, list[ObjectView]],
    entries: Mapping[str, list[ObjectView]],
) -> dict[str, float]:
    """``qty:`` features: computed quantities against amounts (see the module table);
    returns every quantity's value by label (what a failure message's numbers are
    aligned with)."""
    computed: list[Quantity] = []
    amounts: list[Quantity] = []
    lists = [n for n in names if isinstance(arguments[n], list | tuple)]
    for name in names:
        value = arguments[name]
        number = _number(value)
        if number is not None:
            amounts.append((name, name, number))
        if isinstance(value, list | tuple):
            computed.append((name, f"len({name})", float(len(value))))
            items = [v for v in value if isinstance(v, Mapping)]
            if items and len(items) == len(value):
                sums: dict[str, float] = {}
                for item in items:
                    for fld, raw in item.items():
                        n = _number(raw)
                        if n is not None:
                            sums[fld] = sums.get(fld, 0.0) + n
                full = {f for f in sums if all(_number(i.get(f)) is not None for i in items)}
                computed += [(name, f"sum({name}.{f})", sums[f]) for f in sorted(full)]
    for name, group in sorted({**element_views, **entries}.items()):
        for fld, total in sorted(_numeric_fields(group, arguments).items()):
            computed.append((name, f"sum({name}->{fld})", total))
    for source, label, total in list(computed):
        if "->" not in label:
            continue
        # a price per entry named, times a count: what a total is made of
        computed += [
            (source, f"{label}*len({b})", total * len(arguments[b])) for b in lists if b != source
        ]
    for name, view in sorted(views.items()):
        for fld, raw in sorted(view.scalars.items()):
            n = _number(raw)
            if n is not None:
                amounts.append((name, f"{name}.{fld}", n))
    values = {label: v for _s, label, v in (*computed, *amounts)}
    made = 0
    targets = [*computed, *amounts]
    for source, label, q in computed:
        for other, tlabel, t in targets:
            if other == source or _is_count(label) != _is_count(tlabel):
                continue  # a count is compared with counts, an amount with amounts
            if _is_computed(tlabel) and tlabel < label:
                continue  # each pair of computed quantities once
            out[f"qty:{label}?{tlabel}"] = _compare(q, t)
            made += 1
            if made >= MAX_QUANTITY_COMPARISONS:
                return values
    return values


def _is_count(label: str) -> bool:
    return label.startswith("len(")


def _is_computed(label: str) -> bool:
    return label.startswith(("sum(", "len("))


def _compare(a: float, b: float) -> str:
    if abs(a - b) <= max(EQUAL_TOLERANCE, EQUAL_TOLERANCE * max(abs(a), abs(b)) / 10):
        return "="
    return "<" if a < b else ">"
