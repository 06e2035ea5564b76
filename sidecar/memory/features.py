"""Features of a proposed call, given the session's earlier steps and its task input.

Names never hold a concrete id, so a feature means the same thing in every session.
Each condition family (:mod:`sidecar.memory.families`) extracts its own features from
one shared reading of the call (:class:`~sidecar.memory.families.Call`: the arguments,
the objects of earlier outputs they are bound to, the entries object arguments name):

=================================  ==============================================  =============
name                               value                                           family
=================================  ==============================================  =============
``value:*``, ``value:{a}``         the argument set, one argument (canonical)      bad_value
``elem:{a}``                       the elements of list argument ``a``             bad_value
``grounded:{a}``                   every id-like value of ``a`` occurs earlier     not_grounded
``shape:{a}``                      character-class shape of ``a`` (per element)    value_shape
``bound:{a}``, ``obj:{a}.{f}``     ``a`` names an object; its field ``f``          bound_field
``obj:{a}.{f}[{b}]``               map field ``f`` under the key ``b`` names       bound_field
``rel:{a}@{b}.{path}``             ``a``'s ids among ``b``'s object's ``path``     relation
``len:``, ``same_len:``,           sizes, list pairs, a quantity against a         numeric
``overlap:``, ``same_at:``,        numeric field of another argument's object
``cmp:``
``entry:{a}.{f}``                  field of the entry object argument ``a`` names  keyed_entry
``qty:{q}?{t}``                    ``<``, ``=`` or ``>``: a computed quantity       computed
                                   against an amount
``prior``                          the tools that succeeded earlier                prerequisite
=================================  ==============================================  =============

A list-valued feature (one value per element) satisfies a predicate when any of its
values does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sidecar.memory.evidence import Step
from sidecar.memory.families import FAMILIES, build_call, families, family_of
from sidecar.memory.trace import Trace
from sidecar.memory.values import FeatureValue


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


def call_features(
    before: Sequence[Step] | Trace,
    tool: str,
    arguments: Mapping[str, Any],
    task_input: str | None = None,
) -> dict[str, FeatureValue]:
    """The features of calling ``tool`` with ``arguments`` after the steps ``before``
    (a :class:`Trace` of them is reused as is; a plain sequence is indexed first)."""
    return describe_call(before, tool, arguments, task_input).features


def describe_call(
    before: Sequence[Step] | Trace,
    tool: str,
    arguments: Mapping[str, Any],
    task_input: str | None = None,
) -> CallView:
    """:func:`call_features`, with the anchors of per-element features, the call's
    situation marks and its computed amounts."""
    trace = before if isinstance(before, Trace) else Trace(before, task_input)
    call = build_call(trace, tool, arguments, task_input)
    out: dict[str, FeatureValue] = {}
    for family in families():
        family.extract(call, out)
    return CallView(out, call.anchors, call.marks, call.amounts)


__all__ = ["FAMILIES", "CallView", "FeatureValue", "call_features", "describe_call", "family_of"]
