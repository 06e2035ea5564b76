"""What a condition family is, and what every family reads of a proposed call.

A *family* is one kind of evidence about a call (a remembered bad value, a field of the
object an argument names, a computed quantity...).  It owns, for its feature prefixes:

- :meth:`Family.extract`: the features of a call, read from the shared :class:`Call`;
- :meth:`Family.candidates`: the predicates one observed value of a failing call
  proposes (and :meth:`Family.group_candidates` for predicates a whole group proposes,
  given what each failing call's message said, :meth:`Family.message`);
- :meth:`Family.describe`: the predicate in words, for reason lines;
- :meth:`Family.holds` and :meth:`Family.observed`: how a predicate is tested against a
  call's features, and what the call showed;
- the judgement hooks the learner asks (:meth:`Family.counts`, :meth:`Family.absent`,
  :meth:`Family.warn_only`, :meth:`Family.named`, :meth:`Family.session_evidence`).

The defaults suit a categorical or numeric feature; a family overrides what differs.
The registry (:mod:`sidecar.memory.families`) finds every module of this package.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sidecar.memory.predicate import Predicate, is_number, token
from sidecar.memory.stats import ToolStats
from sidecar.memory.trace import ObjectView, Trace
from sidecar.memory.values import FeatureValue, is_id_like, is_scalar, key_of

Features = dict[str, FeatureValue]


@dataclass(frozen=True)
class Failing:
    """One failing call of a group as :meth:`Family.group_candidates` reads it."""

    features: Mapping[str, FeatureValue]
    said: Any = None
    """What the family read in the call's failure message (:meth:`Family.message`)."""
    situation: int = 0
    """The call's situation: calls of one situation are one piece of evidence."""


@dataclass(frozen=True)
class Candidate:
    """A predicate a group proposes as a whole, with the failing calls it holds for.

    ``chance``, when given, bounds how likely chance explains the condition (evidence
    other than the contrast with successes: a number the failure message states,
    equalled in every situation); ``confirm`` is that bound with the situation that
    weighs most left out; ``aligned`` counts the message's numbers the predicate rests
    on and ``note`` says which, for the reason line."""

    predicate: Predicate
    calls: list[int]
    chance: float | None = None
    confirm: float | None = None
    aligned: int = 0
    note: str = ""


@dataclass(frozen=True)
class Variation:
    """How far a feature's values may vary and still be a state."""

    max_categorical: int
    max_not_in: int


@dataclass
class Call:
    """One proposed call as the families read it: its arguments, the objects of earlier
    outputs they are bound to (:class:`~sidecar.memory.trace.Trace`), and the entries
    object arguments name.  Built once per call by :func:`build_call`."""

    trace: Trace
    tool: str
    arguments: Mapping[str, Any]
    task_input: str | None
    names: list[str]
    """The argument names, sorted."""
    keys_of: dict[str, list[str]] = field(default_factory=dict)
    """Per argument holding id-like values, their keys."""
    seen: dict[str, list[str]] = field(default_factory=dict)
    """Per argument, the keys the session has seen."""
    bound: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)
    """Per argument, the object each key is bound to (or ``None``)."""
    views: dict[str, ObjectView] = field(default_factory=dict)
    """Single-valued arguments: the view of the object they name."""
    view_key: dict[str, str] = field(default_factory=dict)
    element_found: dict[str, list[tuple[str, ObjectView]]] = field(default_factory=dict)
    """List arguments: (key, view) of each element bound to an object."""
    entry_found: dict[str, list[tuple[Mapping[str, Any], ObjectView]]] = field(default_factory=dict)
    """Object arguments (or lists of objects): the entries of earlier outputs they name."""
    entries: dict[str, list[ObjectView]] = field(default_factory=dict)
    """Those whose every item named an entry (a sum over some of them would mislead)."""
    marks: list[str] = field(default_factory=list)
    anchors: dict[str, list[str]] = field(default_factory=dict)
    """Filled by the families: the element each per-element value comes from."""
    amounts: dict[str, float] = field(default_factory=dict)
    """Filled by the families: computed quantities and amounts, by label."""

    @property
    def element_views(self) -> dict[str, list[ObjectView]]:
        return {n: [v for _k, v in found] for n, found in self.element_found.items()}

    def is_list(self, name: str) -> bool:
        return isinstance(self.arguments[name], list | tuple)

    def items(self, name: str) -> list[Any]:
        value = self.arguments[name]
        return list(value) if isinstance(value, list | tuple) else [value]


def build_call(
    trace: Trace, tool: str, arguments: Mapping[str, Any], task_input: str | None
) -> Call:
    call = Call(trace, tool, arguments, task_input, sorted(arguments))
    grounded: list[str] = []
    for name in call.names:
        items = call.items(name)
        keys = [k for k in (key_of(v) for v in items if is_id_like(v)) if k is not None]
        if not keys:
            continue
        call.keys_of[name] = keys
        seen = [k for k in keys if trace.seen(k, task_input)]
        call.seen[name] = seen
        if not call.is_list(name):
            # the object a call acts on is named by a single argument (an order, an
            # account); the ids in a list are its parts (items, often shared by many)
            grounded += seen
        bound = [trace.binding(k, name) for k in keys]
        call.bound[name] = bound
        found = [(k, trace.view(obj)) for k, obj in zip(keys, bound, strict=True) if obj]
        if not found:
            continue
        if call.is_list(name):
            call.element_found[name] = found
        else:
            call.views[name], call.view_key[name] = found[0][1], keys[0]
    call.marks = sorted(set(grounded))
    _find_entries(call)
    return call


def _find_entries(call: Call) -> None:
    for name in call.names:
        items = call.items(name)
        if not items or not all(isinstance(v, Mapping) for v in items):
            continue
        found: list[tuple[Mapping[str, Any], ObjectView]] = []
        for item in items:
            obj = call.trace.entry(item)
            if obj is not None:
                found.append((item, call.trace.view(obj)))
        if found:
            call.entry_found[name] = found
        if found and len(found) == len(items):
            call.entries[name] = [view for _item, view in found]


class Family:
    """One family of conditions (see the module docstring)."""

    name: ClassVar[str]
    rank: ClassVar[int]
    """Where the family's observations stand when a group's are cut to the most
    frequent (ties broken by rank): lower ranks are kept first."""
    prefixes: ClassVar[tuple[str, ...]]
    """The feature prefixes (``obj`` of ``obj:order_id.status``) the family owns."""
    categorical_prefixes: ClassVar[tuple[str, ...]] = ()
    """Prefixes whose features are categorical only while they show few values."""
    remembered_values: ClassVar[bool] = False
    """Values are remembered one by one (a larger table per feature)."""
    tallied: ClassVar[bool] = True
    """Values of its features are tallied per success (``False``: the family keeps its
    own statistics, as the prerequisites do)."""
    context_free: ClassVar[bool] = False
    """Its features are read from the arguments alone: a call of the same tool that
    succeeded earlier in the session can be read the same way, and a condition that
    holds for it is contradicted by the session itself (it does not fire)."""
    profiled: ClassVar[bool] = False
    """Its features are kept whole per successful call, in a bounded sample of calls
    (:attr:`~sidecar.memory.stats.ToolStats.profiles`): a predicate over two of them is
    judged against the successes it could not be tallied for."""

    def extract(self, call: Call, out: Features) -> None:
        raise NotImplementedError

    def describe(self, predicate: Predicate) -> str:
        return f"{predicate.feature} {predicate.op} {short(predicate.value)}"

    def candidates(
        self,
        name: str,
        item: Any,
        stats: ToolStats,
        cardinality: Mapping[str, set[str]],
        rules: Variation,
    ) -> Iterable[Predicate]:
        """The predicates one value of a failing call's feature satisfies: a boolean
        or null ``==``; a number ``>`` the largest / ``<`` the smallest seen succeeding
        (and, an integer of a categorical feature, ``==`` and ``not_in``); a string of
        a categorical feature ``== value`` and ``not_in`` the values seen succeeding."""
        if isinstance(item, bool) or item is None:
            if self.proposes_flag(name, item):
                yield Predicate(name, "==", item)
            return
        categorical = not name.startswith(self.categorical_prefixes) or (
            len(cardinality.get(name, ())) <= rules.max_categorical
        )
        if is_number(item):
            low, high = stats.extremes.get(name, (None, None))
            if high is not None and item > high:
                yield Predicate(name, ">", high)
            if low is not None and item < low:
                yield Predicate(name, "<", low)
            if not isinstance(item, int) or not categorical:
                return  # a measured quantity: thresholds only
        elif not categorical:
            return
        yield Predicate(name, "==", item)
        yield from novel(name, item, stats, rules)

    def proposes_flag(self, name: str, value: bool | None) -> bool:
        """Whether a boolean or null value of a failing call proposes ``== value``."""
        return True

    def group_candidates(
        self, tool: str, calls: Sequence[Failing], stats: ToolStats
    ) -> list[Candidate]:
        """Predicates a group of failing calls proposes as a whole, with the calls
        each holds for (beyond the values each call showed)."""
        return []

    def message(self, error: str) -> Any:
        """What the family reads in a failing call's message, kept with the call (JSON;
        ``None``: nothing)."""
        return None

    def holds(
        self,
        predicate: Predicate,
        features: Mapping[str, FeatureValue],
        tokens: dict[str, tuple[str, ...]] | None,
    ) -> bool:
        value = features.get(predicate.feature, _MISSING)
        if value is _MISSING:
            return False
        if tokens is None:
            return predicate.holds(value)  # type: ignore[arg-type]
        keys = tokens.get(predicate.feature)
        if keys is None:
            items = value if isinstance(value, list) else [value]
            keys = tokens[predicate.feature] = tuple(token(v) for v in items)
        return predicate.holds_tokens(value, keys)  # type: ignore[arg-type]

    def observed(self, predicate: Predicate, features: Mapping[str, FeatureValue]) -> str:
        """What the call showed that made ``predicate`` hold, for a reason line."""
        text = json.dumps(features.get(predicate.feature), ensure_ascii=False, default=str)
        return f"{predicate.feature} = {text if len(text) <= 80 else text[:77] + '...'}"

    def counts(self, predicate: Predicate, stats: ToolStats) -> tuple[int, int, int]:
        """Contradictions, their sources' mask, and the success units judged against."""
        contradictions, mask = stats.contradictions(predicate)
        return contradictions, mask, stats.units_with(predicate.feature)

    def absent(self, predicate: Predicate) -> bool:
        """Whether the predicate says something is missing from the session (the
        agent may know it from elsewhere: such a condition blocks only when the
        failure message speaks of what is missing)."""
        return False

    def unfounded(self, predicate: Predicate) -> str | None:
        """The argument whose value ``predicate`` says the session never showed (a value
        the agent may have made up), or ``None``.  A value the tool accepted in another
        session was not made up: such a condition does not hold for it
        (:class:`~sidecar.memory.stats.Accepted`)."""
        return None

    def warn_only(self, predicate: Predicate, stats: ToolStats, named: set[str]) -> bool:
        """Whether a condition on ``predicate`` may warn but never block."""
        return False

    def named(
        self, features: Mapping[str, FeatureValue], arguments: Mapping[str, Any], error: str,
        amounts: Mapping[str, float],
    ) -> list[str]:  # fmt: skip
        """The features (or ``feature\\x1ftoken`` of remembered values) the failure
        message of a call points at."""
        return []

    def signature_names(self, predicate: Predicate, signature: str) -> bool:
        """Whether a failure signature speaks of what ``predicate`` tests."""
        return False

    def session_evidence(self, predicate: Predicate, trace: Trace, task_input: str | None) -> str:
        """For a lookup, before the arguments are known: what in the session already
        makes a plausible call satisfy ``predicate`` (empty: nothing, or not judged)."""
        return ""


_MISSING = object()


def novel(name: str, item: Any, stats: ToolStats, rules: Variation) -> Iterable[Predicate]:
    """``not_in`` the values seen succeeding, when they are known and few enough."""
    succeeded = stats.succeeded(name)
    if not succeeded or len(succeeded) > rules.max_not_in or not stats.complete(name):
        return
    if token(item) not in stats.values.get(name, {}):
        yield Predicate(name, "not_in", tuple(sorted(succeeded, key=token)))


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def ids_named(raw: Any, error: str) -> tuple[list[Any], list[Any]]:
    """The id-like values of an argument, and those a failure message names."""
    items = raw if isinstance(raw, list | tuple) else [raw]
    ids = [v for v in items if is_id_like(v)]
    return ids, [v for v in ids if (key_of(v) or "") in error]


def all_named(raw: Any, error: str) -> bool:
    """Whether a failure message names every id-like value of an argument (what they
    name is then the matter)."""
    ids, hits = ids_named(raw, error)
    return bool(ids) and len(hits) == len(ids)


def object_fields(view: ObjectView, key: str) -> Iterable[tuple[str, Any]]:
    """The scalar fields of a bound object, but the identity field (the argument)."""
    for fld, value in view.scalars.items():
        if key_of(value) != key:
            yield fld, value


def scalar_keys(arguments: Mapping[str, Any]) -> dict[str, str]:
    """Arguments that can name a key of a map field (a cabin, a currency)."""
    keys = {n: key_of(arguments[n]) for n in sorted(arguments) if is_scalar(arguments[n])}
    return {n: k for n, k in keys.items() if k is not None}


def map_fields(
    out: Features,
    prefix: str,
    groups: list[tuple[str, list[ObjectView], bool]],
    keyed_by: Mapping[str, str],
) -> None:
    """A map field read through an argument that names one of its keys: the seats left
    in the cabin the call asks for, the price in its currency (``{prefix}:{a}.{f}[{b}]``,
    per element when ``a`` is a list)."""
    if not keyed_by:
        return
    for name, group, listed in groups:
        fields = {f for v in group for f in v.maps}
        for fld in sorted(fields):
            for other, key in keyed_by.items():
                if other == name:
                    continue
                values = [v.maps[fld][key] for v in group if key in v.maps.get(fld, {})]
                if values:
                    out[f"{prefix}:{name}.{fld}[{other}]"] = values if listed else values[0]


# ---- words -------------------------------------------------------------------------------
def short(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, str) else f"'{value}'"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def seen_list(predicate: Predicate) -> str:
    """The values a ``not_in`` predicate saw succeed, a few of them."""
    if predicate.op != "not_in":
        return ""
    values = list(predicate.value)
    return ", ".join(short(v, 24) for v in values[:4]) + (", ..." if len(values) > 4 else "")


def keyed(field_name: str) -> str:
    """``prices[cabin]`` -> ``prices for the cabin asked``."""
    base, bracket, key = field_name.partition("[")
    return f"{base} for the {key.rstrip(']')} asked" if bracket else field_name


def quality(subject: str, what: str, predicate: Predicate) -> str:
    """``subject what == v`` and its kin: "the object x refers to has status 'pending'",
    "... has a status never seen to succeed (seen: 'delivered')", "... > 3"."""
    op, value = predicate.op, predicate.value
    if op == "not_in":
        article = "" if what.startswith("a ") else "a "
        return f"{subject} {article}{what} never seen to succeed (seen: {seen_list(predicate)})"
    if op == "==":
        return f"{subject} {what.removeprefix('a ')} {short(value)}"
    more = "above" if op == ">" else "below"
    return f"{subject} {what.removeprefix('a ')} {more} {value!r}, beyond any seen to succeed"
