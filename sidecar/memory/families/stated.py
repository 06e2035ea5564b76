"""What a failure message states: its numbers are exact observations of the quantities
its rule compares ("total price is 1250, but paid 1000").

Every call gets its candidate *expressions* (``num:{label}``, one number each): numeric
arguments (``amount``), list lengths (``len(passengers)``), sums over list items' fields
(``sum(payments.amount)``) and over the entries or objects a list argument names, a map
field read through another argument that names one of its keys
(``sum(flights->prices[cabin])``), numeric fields of the object a single argument names
(``user_id.balance``, ``user_id.credit[currency]``), the item of a list asking most of the
entry it names (:mod:`~sidecar.memory.per_item`), the latest value of a
numeric field in an earlier output (``last:balance``), and each amount times a count from another
argument (``sum(flights->prices[cabin])*len(passengers)``, ``price*amount``).  A
boolean argument is a count of 0 or 1 (``[insurance]``), alone and times each list's
length (``len(passengers)*[insurance]``).  They are not tallied per value: a bounded
sample of successful calls keeps them whole
(:attr:`~sidecar.memory.stats.ToolStats.profiles`).

**A fee no output shows.**  A desk may add a fixed amount per unit that no earlier
output states (insurance at 30 per passenger when chosen): then no expression equals
the stated total in every failing call.  For a slot no expression fits, an expression
``A + c*B`` is fitted, ``B`` a count and ``c`` the constant that makes ``A + c*B`` equal
the stated number in the first call where ``B`` is not 0; it is kept when it equals
the stated number in every other call too, and ``B`` was not 0 in two situations at
least (so that ``c`` is confirmed, not only fitted).  The situation the constant was
fitted on is no evidence: it is left out of the chance bound, and the pairs tried are
counted among the expressions tried.

A failing call keeps the numbers its message states, in order (its *slots*).  For each
slot, a group's failing calls propose the expressions equal to the stated number in
every failing call where the message states one; two aligned slots propose the
relation the failing calls show between their expressions (``said:{X}?{Y}``): ``X``
differs from ``Y`` when the message speaks of a mismatch ("does not add up") or both
orders failed, else the one order seen ("required 300 but only 200").  The relation is
checked on the next call before it is made, and against the sample of successes.

**How likely is an accidental equality.**  An unrelated quantity equals a stated number
``n`` with a probability :func:`accident` (``n``): one in the count of numbers written
with as many digits (``1250``: 1/9,000; ``12.5``: 1/900; ``0.5``: 1/9), and no less than
``1/(n+1)`` for a small integer (1: 1/2; 2: 1/3: counts coincide all the time).  The
chance that one of ``m`` expressions equals slot ``i``'s number in every situation ``s``
by accident is at most ``k·m·∏ p(n_s)`` (``k`` slots); a relation rests on two slots,
so its chance is the sum of theirs.  That bounds the condition's chance (the contrast
with successes may bound it lower); with the situation that weighs most left out, the
same sum is its confirmation.  When several relations fit the same two slots and no
success contradicts them, the message settles nothing: none gets that bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from itertools import chain
from typing import Any, ClassVar

from sidecar.memory.chance import one_in
from sidecar.memory.families.base import (
    Call,
    Candidate,
    Failing,
    Family,
    Features,
    Variation,
    number,
    scalar_keys,
)
from sidecar.memory.per_item import item_gaps
from sidecar.memory.predicate import Predicate
from sidecar.memory.stats import ToolStats
from sidecar.memory.trace import ObjectView
from sidecar.memory.values import FeatureValue

NUM = "num"
SAID = "said"
MAX_EXPRESSIONS = 96
"""Expressions per call, at most (the plain ones first, then the products)."""
MAX_LAST = 16
"""Numeric fields of earlier outputs read (the latest given)."""
MAX_SLOTS = 4
"""Numbers of one message read, at most."""
MAX_TIED = 6
"""Expressions aligned with one slot that a relation keeps, at most."""
FIT_STEPS_PER_CALL = 200
"""The fitting search's budget: per failing call that states the slot's number, how many
(pair, call) evaluations it may make; past it, the pairs not tried are not fitted.  The
budget is counted in work, not seconds, so that every process derives the same
conditions from the same log; ``benchmarks/stated_cost.py`` measures what it costs."""
FITTED = " + "
"""Joins the two terms of a fitted expression: ``A + 30*len(passengers)*[insurance]``."""
_MASK = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+)?|\b\d{1,2}:\d{2}(?::\d{2})?\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
)
_NUMBER = re.compile(r"(?<![\w.#@/-])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\w#@/-])")
_MISMATCH = re.compile(r"(?i)add(?:s)? up|match|equal|same|differ|does not total|mismatch")
_ORDINAL = ("1st", "2nd", "3rd", "4th")


class Stated(Family):
    name: ClassVar[str] = "stated"
    rank: ClassVar[int] = 9
    prefixes: ClassVar[tuple[str, ...]] = (NUM, SAID)
    tallied: ClassVar[bool] = False
    profiled: ClassVar[bool] = True

    def extract(self, call: Call, out: Features) -> None:
        for label, value in expressions(call).items():
            out[f"{NUM}:{label}"] = value

    def message(self, error: str) -> Any:
        numbers = stated_numbers(error)
        if not numbers:
            return None
        return {"numbers": numbers, "mismatch": bool(_MISMATCH.search(error))}

    def candidates(
        self,
        name: str,
        item: Any,
        stats: ToolStats,
        cardinality: Mapping[str, set[str]],
        rules: Variation,
    ) -> Iterable[Predicate]:
        return ()  # proposed by the group, from what the messages state

    def group_candidates(
        self, tool: str, calls: Sequence[Failing], stats: ToolStats
    ) -> list[Candidate]:
        slots = _aligned(calls)
        tried = len(slots) * max((_count(c.features) for c in calls), default=0)
        out: list[Candidate] = []
        for i, xs in enumerate(slots):
            for j in range(i + 1, len(slots)):
                out += self._relations(calls, (i, xs), (j, slots[j]), tried)
        return out

    def _relations(
        self,
        calls: Sequence[Failing],
        left: tuple[int, list[str]],
        right: tuple[int, list[str]],
        tried: int,
    ) -> list[Candidate]:
        """The relation between the expressions aligned with slot ``left`` and those
        aligned with slot ``right``: every pair of them equals the two numbers in every
        failing call, so which pair the rule compares the failures cannot tell; the
        condition holds when every pair says so (a success never narrows it, so that
        more successes never make a call blocked that was not)."""
        pairs: list[tuple[str, str]] = []
        relation: Predicate | None = None
        for x in left[1][:MAX_TIED]:
            for y in right[1][:MAX_TIED]:
                found = _relation(calls, x, y, left[0], right[0])
                if found is None:
                    continue  # one of them failed with the two equal
                if relation is not None and (found.op, found.value) != (
                    relation.op,
                    relation.value,
                ):
                    return []  # the pairs disagree on the relation: the message settles none
                pairs.append((x, y))
                relation = found
        if relation is None:
            return []
        xs = sorted({x for x, _ in pairs})
        ys = sorted({y for _, y in pairs})
        feature = f"{SAID}:{'|'.join(xs)}?{'|'.join(ys)}"
        predicate = Predicate(feature, relation.op, relation.value)
        held = [k for k, c in enumerate(calls) if self.holds(predicate, c.features, None)]
        sides: list[dict[int, float]] = []
        for slot, labels in ((left[0], xs), (right[0], ys)):
            side = _accidents(calls, slot)
            if any(FITTED in label for label in labels):
                # the situation the constant was fitted on equalled it by construction
                side.pop(min(side, key=lambda s: (side[s], s)), None)
                tried = tried * max(1, len(_count_labels(calls[0].features)))
            sides.append(side)
        bound, confirm = _bound(sides, tried)
        note = (
            f"{_matched(calls, xs, left[0])}; {_matched(calls, ys, right[0])}: "
            f"{_odds(bound)} by accident among {tried} quantities"
        )
        return [Candidate(predicate, held, bound, confirm, 2, note)]

    def describe(self, predicate: Predicate) -> str:
        left, _, right = predicate.rest.partition("?")
        x, y = (" / ".join(_words(label) for label in side.split("|")) for side in (left, right))
        if predicate.op == "not_in":
            return f"{x} differs from {y}"
        verb = {"<": "is below", ">": "exceeds"}.get(str(predicate.value), "equals")
        return f"{x} {verb} {y}"

    def holds(
        self,
        predicate: Predicate,
        features: Mapping[str, FeatureValue],
        tokens: dict[str, tuple[str, ...]] | None,
    ) -> bool:
        if predicate.prefix != SAID:
            return False
        if tokens is None:
            found = _compared(predicate.rest, features)
        else:  # one comparison per call, whatever the conditions that share it
            key = f"{SAID}\x1f{predicate.rest}"
            cached = tokens.get(key)
            if cached is None:
                cached = tokens[key] = (_compared(predicate.rest, features) or "",)
            found = cached[0] or None
        return found is not None and predicate.holds(found)

    def observed(self, predicate: Predicate, features: Mapping[str, FeatureValue]) -> str:
        xs, _, ys = predicate.rest.partition("?")
        labels = [*xs.split("|"), *ys.split("|")]
        return ", ".join(f"{label} = {_show(_value(features, _term(label)))}" for label in labels)

    def counts(self, predicate: Predicate, stats: ToolStats) -> tuple[int, int, int]:
        def test(values: Mapping[str, float]) -> bool | None:
            found = _compared(predicate.rest, values)
            return None if found is None else predicate.holds(found)

        return stats.profiled(test)


# ---- expressions -------------------------------------------------------------------------
Quantity = tuple[str, str, float]
"""(the argument it comes from, its label, its value)."""


def expressions(call: Call) -> dict[str, float]:
    """A call's candidate expressions, by label (see the module docstring)."""
    amounts: list[Quantity] = []
    counts: list[Quantity] = []
    for name in call.names:
        raw = call.arguments[name]
        n = number(raw)
        if n is not None:
            amounts.append((name, name, n))
            if isinstance(raw, int) and n >= 0:
                counts.append((name, name, n))
        elif call.is_list(name):
            counts.append((name, f"len({name})", float(len(raw))))
            amounts += _item_sums(name, raw)
    keys = scalar_keys(call.arguments)
    groups = dict(call.entries)
    for name, found in call.element_found.items():
        if len(found) == len(call.arguments[name]):
            groups.setdefault(name, [view for _key, view in found])
    for name, views in sorted(groups.items()):
        amounts += [(name, f"sum({name}->{f})", v) for f, v in _field_sums(views, keys, name)]
    for name, view in sorted(call.views.items()):
        amounts += [(name, f"{name}.{f}", v) for f, v in _field_sums([view], keys, name)]
    recent = list(call.trace.numbers.items())[-MAX_LAST:]
    amounts += [("", f"last:{field}", value) for field, value in reversed(recent)]
    out: dict[str, float] = {}
    # the first MAX_EXPRESSIONS labels, built no further (a call's arguments are untrusted
    # and may hold thousands of numbers)
    # an item against the entry it names is no amount to multiply (per_item)
    for _source, label, value in chain(counts, amounts, item_gaps(call), _flags(call, counts)):
        if len(out) >= MAX_EXPRESSIONS:
            return out
        out.setdefault(label, value)
    for source, label, value in amounts:
        for other, count, times in counts:
            if len(out) >= MAX_EXPRESSIONS:
                return out
            if other != source and count != label:
                out.setdefault(f"{label}*{count}", value * times)
    return out


def _flags(call: Call, counts: Sequence[Quantity]) -> Iterator[Quantity]:
    """Boolean arguments as counts of 0 or 1, alone and times each list's length: what a
    fee per unit when an option is chosen is multiplied by (lazily: the caller stops at
    its cap, before the products of thousands of flags and lists are formed)."""
    for name in call.names:
        flag = call.arguments[name]
        if not isinstance(flag, bool):
            continue
        yield name, f"[{name}]", float(flag)
        for _source, label, value in counts:
            if label.startswith("len("):
                yield name, f"{label}*[{name}]", value * flag


def _item_sums(name: str, items: Sequence[Any]) -> list[Quantity]:
    """``sum(a.f)`` for each numeric field every item of a list of objects has."""
    if not items or not all(isinstance(v, Mapping) for v in items):
        return []
    fields = set.intersection(*({f for f, v in item.items() if number(v) is not None}
                                for item in items))  # fmt: skip
    return [
        (name, f"sum({name}.{f})", sum(number(item[f]) or 0.0 for item in items))
        for f in sorted(fields)
    ]


def _field_sums(
    views: Sequence[ObjectView], keys: Mapping[str, str], own: str
) -> list[tuple[str, float]]:
    """Per numeric field (and map field read through another argument, ``f[b]``) every
    view has, the sum over the views."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for view in views:
        found: list[tuple[str, float | None]] = [
            (f, number(raw)) for f, raw in view.scalars.items()
        ]
        for fld, table in view.maps.items():
            found += [(f"{fld}[{arg}]", number(table.get(key)))
                      for arg, key in keys.items() if arg != own]  # fmt: skip
        for label, n in found:
            if n is not None:
                totals[label] = totals.get(label, 0.0) + n
                counts[label] = counts.get(label, 0) + 1
    return [(f, t) for f, t in sorted(totals.items()) if counts[f] == len(views)]


def _count(features: Mapping[str, FeatureValue]) -> int:
    return sum(1 for name in features if name.startswith(f"{NUM}:"))


def _compared(rest: str, values: Mapping[str, Any]) -> str | None:
    """How the two sides of ``said:{rest}`` compare in ``values`` (a call's features or
    a success's profile): ``=`` when a pair of their expressions is equal, ``<>`` when
    pairs differ both ways, else the one order (``None``: one is missing)."""
    xs, ys = _sides(rest)
    found: set[str] = set()
    for x in xs:
        a = _value(values, x)
        if a is None:
            return None
        for y in ys:
            b = _value(values, y)
            if b is None:
                return None
            found.add(compare(a, b))
    if "=" in found or len(found) == 1:
        return "=" if "=" in found else found.pop()  # a pair that is equal says no
    return "<>"  # both orders: a mismatch, and neither order alone


Term = tuple[str, float, str | None]
"""An expression as (feature, constant, count feature): ``A + c*B``; ``(A, 0, None)``."""


@lru_cache(maxsize=4096)
def _sides(rest: str) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """The terms of the two sides of ``said:{X}|{X2}?{Y}``: parsed once per condition,
    not once per check."""
    xs, _, ys = rest.partition("?")
    return tuple(_term(x) for x in xs.split("|")), tuple(_term(y) for y in ys.split("|"))


@lru_cache(maxsize=4096)
def _term(label: str) -> Term:
    base, fitted, rest = label.partition(FITTED)
    if not fitted:
        return f"{NUM}:{label}", 0.0, None
    constant, _, count = rest.partition("*")
    return f"{NUM}:{base}", float(constant), f"{NUM}:{count}"


def _value(values: Mapping[str, Any], term: Term) -> float | None:
    a = values.get(term[0])
    if a.__class__ is not float:
        return None
    if term[2] is None:
        return float(a)
    b = values.get(term[2])
    if b.__class__ is not float:
        return None
    return float(a) + term[1] * float(b)


def _words(label: str) -> str:
    """A fitted expression in words: ``A plus 30 per len(passengers) when insurance is
    set (a constant fitted to the numbers the messages stated)``."""
    base, fitted, rest = label.partition(FITTED)
    if not fitted:
        return label
    constant, _, count = rest.partition("*")
    unit, _, flag = count.partition("[")
    per = f" per {unit.rstrip('*')}" if unit else ""
    when = f" when {flag.rstrip(']')} is set" if flag else ""
    return f"{base} plus {constant}{per}{when} (a constant fitted to the numbers stated)"


def compare(a: float, b: float) -> str:
    if abs(a - b) <= 0.005 + 1e-9 * max(abs(a), abs(b)):
        return "="
    return "<" if a < b else ">"


# ---- the message -------------------------------------------------------------------------
def stated_numbers(error: str) -> list[list[float]]:
    """The numbers a message states, in order, as ``[value, decimals shown]`` (dates,
    times and the digits of ids are not numbers)."""
    text = _MASK.sub(" ", error)
    out: list[list[float]] = []
    for match in _NUMBER.finditer(text):
        raw = match.group(0).replace(",", "")
        decimals = len(raw.partition(".")[2])
        out.append([float(raw), float(decimals)])
        if len(out) >= MAX_SLOTS:
            break
    return out


def accident(value: float) -> float:
    """How likely an unrelated quantity equals ``value`` (see the module docstring)."""
    value = float(value)
    if value == 0:
        return 1.0
    digits = f"{abs(value):.6f}".rstrip("0").rstrip(".").replace(".", "").lstrip("0")
    p = 1.0 / (9.0 * 10.0 ** (max(1, len(digits)) - 1))
    if value.is_integer() and abs(value) < 10:
        p = max(p, 1.0 / (abs(value) + 1))
    return min(1.0, p)


def _numbers(call: Failing) -> list[list[float]]:
    said = call.said
    return list(said.get("numbers", ())) if isinstance(said, Mapping) else []


def _equals(value: float, stated: Sequence[float]) -> bool:
    n, decimals = stated
    return abs(value - n) <= 0.5 * 10.0 ** (-int(decimals)) + 1e-9


def _aligned(calls: Sequence[Failing]) -> list[list[str]]:
    """Per slot, the expressions equal to its number in every call that states one; for
    a slot none is, the fitted ones (see the module docstring)."""
    slots = max((len(_numbers(c)) for c in calls), default=0)
    plain = [_plain(calls, slot) for slot in range(slots)]
    out: list[list[str]] = []
    for slot, found in enumerate(plain):
        if not found:
            # another slot's own expression plus a fee would be that slot restated
            others = {x for k, xs in enumerate(plain) if k != slot for x in xs}
            found = _fitted(calls, slot, others)
        out.append(found)
    return out


def _count_labels(features: Mapping[str, FeatureValue]) -> list[str]:
    return sorted(n[len(NUM) + 1 :] for n in features if n.startswith((f"{NUM}:len(",
                                                                        f"{NUM}:[")))  # fmt: skip


def _fitted(calls: Sequence[Failing], slot: int, exclude: set[str]) -> list[str]:
    """``A + c*B`` equal to the slot's number in every call stating it, ``c`` fitted."""
    stating = [(c, _numbers(c)[slot]) for c in calls if len(_numbers(c)) > slot]
    if len({c.situation for c, _ in stating}) < 2:
        return []
    first = stating[0][0].features
    counts = _count_labels(first)
    amounts = [n[len(NUM) + 1 :] for n, v in first.items()
               if n.startswith(f"{NUM}:") and isinstance(v, float)]  # fmt: skip
    amounts = [a for a in amounts if a not in exclude and a not in counts]
    out: list[str] = []
    budget = [FIT_STEPS_PER_CALL * len(stating)]
    for b in counts:
        for a in amounts:
            if budget[0] <= 0:
                return out
            c = _constant(stating, a, b, budget)
            if c is not None:
                out.append(f"{a}{FITTED}{c:.10g}*{b}")
                if len(out) >= MAX_TIED:
                    return out
    return out


def _constant(
    stating: Sequence[tuple[Failing, Sequence[float]]], a: str, b: str, budget: list[int]
) -> float | None:
    """The ``c`` of ``a + c*b`` equal to the stated numbers, fitted on the first call
    where ``b`` is not 0 and confirmed in two situations at least (``None``: none, or
    the ``budget`` of evaluations, spent here, ran out)."""
    c: float | None = None
    confirmed: set[int] = set()
    for call, stated in stating:
        budget[0] -= 1
        if budget[0] < 0:
            return None
        x, y = call.features.get(f"{NUM}:{a}"), call.features.get(f"{NUM}:{b}")
        if not isinstance(x, float) or not isinstance(y, float):
            return None
        if y == 0:
            if not _equals(x, stated):
                return None
            continue
        if c is None:
            c = (stated[0] - x) / y
            if abs(c) < 1e-9:
                return None
        elif not _equals(x + c * y, stated):
            return None
        confirmed.add(call.situation)
    return c if c is not None and len(confirmed) >= 2 else None


def _plain(calls: Sequence[Failing], slot: int) -> list[str]:
    """The expressions equal to the slot's number in every call that states one."""
    common: set[str] | None = None
    for call in calls:
        numbers = _numbers(call)
        if len(numbers) <= slot:
            continue
        match = {
            name[len(NUM) + 1 :]
            for name, value in call.features.items()
            if name.startswith(f"{NUM}:")
            and isinstance(value, float)
            and _equals(value, numbers[slot])
        }
        common = match if common is None else common & match
    return sorted(common or ())


def _relation(calls: Sequence[Failing], x: str, y: str, i: int, j: int) -> Predicate | None:
    """The relation between ``x`` and ``y`` that the calls stating both slots show:
    ``≠`` when the message speaks of a mismatch or both orders failed, else the order
    seen; ``None`` when one of them failed with the two equal."""
    seen: set[str] = set()
    mismatch = False
    for call in calls:
        numbers = _numbers(call)
        if len(numbers) <= max(i, j):
            continue
        a, b = _value(call.features, _term(x)), _value(call.features, _term(y))
        if a is None or b is None:
            return None
        seen.add(compare(a, b))
        mismatch = mismatch or bool(isinstance(call.said, Mapping) and call.said.get("mismatch"))
    if not seen or "=" in seen:
        return None
    feature = f"{SAID}:{x}?{y}"
    if mismatch or len(seen) > 1:
        return Predicate(feature, "not_in", ("=",))
    return Predicate(feature, "==", seen.pop())


def _accidents(calls: Sequence[Failing], slot: int) -> dict[int, float]:
    """Per situation stating the slot, how likely an expression equalled it by accident
    (the likeliest of its calls)."""
    out: dict[int, float] = {}
    for call in calls:
        numbers = _numbers(call)
        if len(numbers) > slot:
            p = accident(numbers[slot][0])
            out[call.situation] = max(out.get(call.situation, 0.0), p)
    return out


def _bound(sides: Sequence[Mapping[int, float]], tried: int) -> tuple[float, float]:
    """The chance both sides' equalities are accidents of one of ``tried`` expressions,
    and the same with the situation that weighs most left out (in one situation: with
    either number left out, what the other alone leaves to chance)."""

    def total(leave: int | None) -> float:
        chance = 0.0
        for side in sides:
            product = 1.0
            for situation, p in side.items():
                if situation != leave:
                    product *= p
            chance += tried * product
        return min(1.0, chance)

    situations = {s for side in sides for s in side}
    if len(situations) == 1:
        # one situation: each number alone must make its expression no accident
        return total(None), min(1.0, max(tried * p for side in sides for p in side.values()))
    return total(None), max(total(s) for s in situations)


def _matched(calls: Sequence[Failing], labels: Sequence[str], slot: int) -> str:
    """``X equalled the message's 1st number (1250, 2480) in 2 situations``."""
    values = sorted({_show(_numbers(c)[slot][0]) for c in calls if len(_numbers(c)) > slot})
    situations = len({c.situation for c in calls if len(_numbers(c)) > slot})
    shown = ", ".join(values[:3]) + (", ..." if len(values) > 3 else "")
    where = f"{situations} situation{'s' if situations != 1 else ''}"
    label = " and ".join(labels)
    return f"{label} equalled the message's {_ORDINAL[slot]} number ({shown}) in {where}"


def _odds(p: float) -> str:
    text = one_in(p)
    return "as likely as not" if text == "likely by chance" else text


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e15 else repr(value)
    return "?" if value is None else str(value)


FAMILY = Stated()
