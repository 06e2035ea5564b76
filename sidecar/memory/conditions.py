"""Failure conditions: a predicate over call features that predicts a failure of a tool.

The JSON form (learned and hand-written conditions alike)::

    {"tool": "refund_invoice", "signature": "Error: Unpaid invoice cannot be refunded",
     "kind": "deterministic", "family": "bound_field",
     "predicate": {"feature": "obj:invoice_id.state", "op": "==", "value": "unpaid"},
     "support": 3, "session_count": 5, "source_count": 2, "sources": ["alice", "bob"],
     "contradictions": 0, "confidence": 0.75, "failing": 3, "units": 40,
     "candidates": 38, "chance": 0.0012, "confirmations": 3, "warn_only": false,
     "source": "learned", "sessions": ["s1", "s4", "s9"],
     "explanation": "refund_invoice fails with '...' when the object invoice_id refers
                     to has state 'unpaid' (3 situations, 5 sessions, 2 sources, 0
                     successes; confirmed by 3 of 3; 1 chance in ~800 among 38
                     candidates)"}

``op`` is ``==``, ``not_in`` (the value is a list), ``>`` or ``<``; a list-valued feature
satisfies the predicate when one of its values does; a missing feature never does
(``prior:T`` is never missing: it is whether ``T`` succeeded earlier in the session).

The counts (:mod:`sidecar.memory.independence`, :mod:`sidecar.memory.chance`):
``support`` is the number of independent *situations* among the failing calls it
explains (sessions sharing a task text or the objects they act on count once),
``session_count`` the sessions, ``source_count`` and ``sources`` who reported them;
``failing`` the situations of the failure in all, ``units`` the tool's success units;
``contradictions`` the success sessions it matches (for ``not_in``: successes whose
value no other success had); ``candidates`` how many features were tried for this
failure, ``chance`` how likely the best of that many unrelated features would look as
good, ``confirmations`` the supporting situations it still predicts when each is left
out of its evidence (all of them, or none); ``confidence`` is
``support / (support + contradictions + 1)``.  ``warn_only`` marks a condition that may
warn but never block (a remembered argument value the failure was not shown to be
about).  Only ``tool``, ``signature`` and ``predicate`` are required when a condition is
written by hand; ``source`` is then ``manual``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from sidecar.classify import Kind
from sidecar.memory.chance import one_in
from sidecar.memory.features import FAMILIES, Family, FeatureValue, family_of
from sidecar.memory.signature import failure_kind, normalize_signature

Op = Literal["==", "not_in", ">", "<"]
OPS: tuple[Op, ...] = ("==", "not_in", ">", "<")
Source = Literal["learned", "manual"]
MAX_EXAMPLE_SESSIONS = 5


def token(value: Any) -> str:
    """The comparison key of a scalar: its JSON text (``"1"`` and ``1`` differ)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Predicate:
    feature: str
    op: Op
    value: Any
    """A scalar; a list of scalars for ``not_in``."""
    _keys: frozenset[str] = field(default=frozenset(), compare=False, repr=False, hash=False)
    _key: str = field(default="", compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, got {self.op!r}")
        if self.op == "==":
            object.__setattr__(self, "_key", token(self.value))
        if self.op == "not_in":
            if not isinstance(self.value, list | tuple):
                raise ValueError("not_in needs a list of values")
            object.__setattr__(self, "value", tuple(self.value))  # hashable, like the rest
            object.__setattr__(self, "_keys", frozenset(token(v) for v in self.value))
        elif self.op in (">", "<") and not _is_number(self.value):
            raise ValueError(f"{self.op} needs a number, got {self.value!r}")
        family_of(self.feature)  # an unknown feature prefix fails here

    def holds(self, value: FeatureValue) -> bool:
        if isinstance(value, list):
            return any(self._holds(v) for v in value)
        return self._holds(value)

    def holds_tokens(self, value: FeatureValue, keys: Sequence[str]) -> bool:
        """:meth:`holds`, given the tokens of ``value``'s items (computed once per call
        for every condition that reads the feature)."""
        if self.op == "==":
            return self._key in keys
        if self.op == "not_in":
            return any(k not in self._keys for k in keys)
        return self.holds(value)

    def _holds(self, value: Any) -> bool:
        if self.op == "==":
            return token(value) == self._key
        if self.op == "not_in":
            return token(value) not in self._keys
        if not _is_number(value):
            return False
        return bool(value > self.value if self.op == ">" else value < self.value)

    def to_dict(self) -> dict[str, Any]:
        value = list(self.value) if self.op == "not_in" else self.value
        return {"feature": self.feature, "op": self.op, "value": value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Predicate:
        feature, op = data.get("feature"), data.get("op")
        if not isinstance(feature, str) or ":" not in feature:
            raise ValueError("a predicate needs a feature name such as 'obj:invoice_id.state'")
        value = data.get("value")
        if op == "not_in" and isinstance(value, list):
            value = tuple(value)
        return cls(feature, cast(Op, op), value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def confidence(support: int, contradictions: int) -> float:
    return round(support / (support + contradictions + 1), 4)


@dataclass(frozen=True)
class FailureCondition:
    """A predicate under which ``tool`` fails with ``signature``, with its evidence (see
    the module docstring for the JSON form and the meaning of each count)."""

    tool: str
    signature: str
    """The normalized failure signature the condition predicts."""
    predicate: Predicate
    kind: Kind = "deterministic"
    family: Family = "bad_value"
    support: int = 0
    contradictions: int = 0
    confidence: float = 0.0
    explanation: str = ""
    warn_only: bool = False
    source: Source = "learned"
    sessions: tuple[str, ...] = ()
    """A few of the failing sessions it explains (for audit)."""
    session_count: int = 0
    source_count: int = 0
    sources: tuple[str, ...] = ()
    """A few of the sources that reported its failures."""
    failing: int = 0
    units: int = 0
    candidates: int = 0
    chance: float = 1.0
    confirmations: int = 0
    contradiction_sources: tuple[str, ...] = ()
    """The sources of the successes that contradict it."""

    @property
    def condition_id(self) -> str:
        """Stable across re-learning: the value of a ``not_in`` or threshold predicate
        moves with the evidence, so only ``==`` values are part of the identity."""
        p = self.predicate
        ident = [self.tool, self.signature, p.feature, p.op]
        if p.op == "==":
            ident.append(token(p.value))
        return hashlib.sha256("\x1f".join(ident).encode()).hexdigest()[:16]

    def holds(
        self,
        features: Mapping[str, FeatureValue],
        tokens: dict[str, tuple[str, ...]] | None = None,
    ) -> bool:
        """Whether the predicate holds for a call's features; ``tokens``: a cache of the
        features' item tokens, shared by the conditions checked against one call."""
        feature = self.predicate.feature
        if feature.startswith("prior:"):
            earlier = features.get("prior")
            done = isinstance(earlier, list) and feature[6:] in earlier
            return self.predicate.holds(done)
        value = features.get(feature, _MISSING)
        if value is _MISSING:
            return False
        if tokens is None:
            return self.predicate.holds(cast(FeatureValue, value))
        keys = tokens.get(feature)
        if keys is None:
            items = value if isinstance(value, list) else [value]
            keys = tokens[feature] = tuple(token(v) for v in items)
        return self.predicate.holds_tokens(cast(FeatureValue, value), keys)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.condition_id,
            "tool": self.tool,
            "signature": self.signature,
            "kind": self.kind,
            "family": self.family,
            "predicate": self.predicate.to_dict(),
            "support": self.support,
            "contradictions": self.contradictions,
            "confidence": self.confidence,
            "warn_only": self.warn_only,
            "source": self.source,
            "sessions": list(self.sessions),
            "session_count": self.session_count,
            "source_count": self.source_count,
            "sources": list(self.sources),
            "failing": self.failing,
            "units": self.units,
            "candidates": self.candidates,
            "chance": self.chance,
            "confirmations": self.confirmations,
            "contradiction_sources": list(self.contradiction_sources),
            "explanation": self.explanation,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FailureCondition:
        tool, signature = data.get("tool"), data.get("signature")
        if not isinstance(tool, str) or not tool:
            raise ValueError("a condition needs a 'tool'")
        if not isinstance(signature, str) or not signature:
            raise ValueError("a condition needs a 'signature'")
        raw = data.get("predicate")
        if not isinstance(raw, Mapping):
            raise ValueError("a condition needs a 'predicate' object")
        predicate = Predicate.from_dict(raw)
        source = data.get("source", "manual")
        if source not in ("learned", "manual"):
            raise ValueError("source must be 'learned' or 'manual'")
        if source == "manual":  # written as met; compared as normalized
            signature = normalize_signature(signature)
        kind = data.get("kind") or failure_kind(signature)
        if kind not in ("deterministic", "transient", "unknown"):
            raise ValueError("kind must be 'deterministic', 'transient' or 'unknown'")
        family = data.get("family") or family_of(predicate.feature)
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}")
        support = _count(data.get("support", 0), "support")
        contradictions = _count(data.get("contradictions", 0), "contradictions")
        conf = data.get("confidence")
        if conf is None:
            conf = 1.0 if source == "manual" else confidence(support, contradictions)
        if not _is_number(conf) or not 0.0 <= float(conf) <= 1.0:
            raise ValueError("confidence must be a number in [0, 1]")
        sessions = _names(data.get("sessions"), "sessions")
        chance_ = data.get("chance", 1.0)
        if not _is_number(chance_) or not 0.0 <= float(chance_) <= 1.0:
            raise ValueError("chance must be a number in [0, 1]")
        condition = cls(
            tool=tool,
            signature=signature,
            predicate=predicate,
            kind=kind,
            family=family,
            support=support,
            contradictions=contradictions,
            confidence=float(conf),
            warn_only=bool(data.get("warn_only", False)),
            source=source,
            sessions=sessions[:MAX_EXAMPLE_SESSIONS],
            session_count=_count(data.get("session_count", len(sessions)), "session_count"),
            source_count=_count(data.get("source_count", 0), "source_count"),
            sources=_names(data.get("sources"), "sources")[:MAX_EXAMPLE_SESSIONS],
            failing=_count(data.get("failing", 0), "failing"),
            units=_count(data.get("units", 0), "units"),
            candidates=_count(data.get("candidates", 0), "candidates"),
            chance=float(chance_),
            confirmations=_count(data.get("confirmations", 0), "confirmations"),
            contradiction_sources=_names(
                data.get("contradiction_sources"), "contradiction_sources"
            )[:MAX_EXAMPLE_SESSIONS],
        )
        explanation = data.get("explanation")
        if not isinstance(explanation, str) or not explanation:
            explanation = explain(condition)
        return replace(condition, explanation=explanation)


_MISSING = object()


def _names(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ValueError(f"{name} must be a list")
    return tuple(str(v) for v in value)


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer")
    return value


# ---- explanations ----------------------------------------------------------------------
def _short(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, str) else f"'{value}'"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(predicate: Predicate) -> str:
    """The predicate in words."""
    prefix, _, rest = predicate.feature.partition(":")
    op, value = predicate.op, predicate.value
    seen = ""
    if op == "not_in":
        seen = ", ".join(_short(v, 24) for v in list(value)[:4])
        seen += ", ..." if len(value) > 4 else ""
    if prefix == "value":
        return (
            f"its arguments are {_short(value, 100)}"
            if rest == "*"
            else f"{rest} is {_short(value)}"
        )
    if prefix == "elem":
        return f"{rest} includes {_short(value)}"
    if prefix == "grounded":
        where = "earlier output, argument or the task input"
        return f"{rest} appears in {'an' if value else 'no'} {where}"
    if prefix == "bound":
        return f"{rest} refers to {'an' if value else 'no'} object of an earlier output"
    if prefix == "shape":
        return _quality(f"{rest} has", "a shape", op, value, seen)
    if prefix == "obj":
        arg, _, fld = rest.partition(".")
        return _quality(f"the object {arg} refers to has", _keyed(fld), op, value, seen)
    if prefix == "entry":
        arg, _, fld = rest.partition(".")
        return _quality(f"the entry {arg} names has", _keyed(fld), op, value, seen)
    if prefix == "qty":
        left, _, right = rest.partition("?")
        if op == "not_in":
            return f"{left} compares with {right} in a way never seen to succeed"
        verb = {"<": "is below", "=": "equals", ">": "exceeds"}.get(str(value), f"is {value}")
        return f"{left} {verb} {right}"
    if prefix == "prior":
        done = "succeeded" if value else "had not succeeded"
        return f"{rest} {done} earlier in the session"
    if prefix == "len" and "." in rest:
        arg, _, fld = rest.partition(".")
        return _quality(f"the object {arg} refers to has", f"a {fld} size", op, value, seen)
    if prefix == "len":
        return _quality(f"{rest} has", "a length", op, value, seen)
    if prefix == "rel":
        return _relation(rest, op, value)
    if prefix in ("same_len", "overlap", "same_at"):
        a, _, b = rest.partition("|")
        words = {
            "same_len": ("have the same length", "differ in length"),
            "overlap": ("share an element", "share no element"),
            "same_at": ("hold the same value at some position", "differ at every position"),
        }[prefix]
        return f"{a} and {b} {words[0] if value else words[1]}"
    if prefix == "cmp":
        quantity, _, target = rest.partition(">")
        arg, _, fld = target.partition(".")
        verb = "exceeds" if value else "does not exceed"
        return f"{quantity} {verb} the {fld} of the object {arg} refers to"
    return f"{predicate.feature} {op} {_short(value)}"


def _keyed(field: str) -> str:
    """``prices[cabin]`` -> ``prices for the cabin asked``."""
    base, bracket, key = field.partition("[")
    return f"{base} for the {key.rstrip(']')} asked" if bracket else field


def _quality(subject: str, what: str, op: str, value: Any, seen: str) -> str:
    """``subject what == v`` and its kin: "the object x refers to has status 'pending'",
    "... has a status never seen to succeed (seen: 'delivered')", "... > 3"."""
    if op == "not_in":
        article = "" if what.startswith("a ") else "a "
        return f"{subject} {article}{what} never seen to succeed (seen: {seen})"
    if op == "==":
        return f"{subject} {what.removeprefix('a ')} {_short(value)}"
    more = "above" if op == ">" else "below"
    return f"{subject} {what.removeprefix('a ')} {more} {value!r}, beyond any seen to succeed"


_SHARE = {
    "all": "every value of {left} is",
    "some": "only some values of {left} are",
    "none": "no value of {left} is",
}


def _relation(rest: str, op: str, value: Any) -> str:
    left, _, right = rest.partition("@")
    arg, _, path = right.partition(".")
    where = f"among the {path} of the object {arg} refers to"
    if op == "not_in":
        succeeded = {str(v) for v in value}
        others = sorted(set(_SHARE) - succeeded)
        if len(others) == 1:
            return f"{_SHARE[others[0]].format(left=left)} {where}"
        if succeeded == {"all"}:
            return f"not every value of {left} is {where}"
        return f"{left} is {where} in a way never seen to succeed"
    share = _SHARE.get(str(value))
    return f"{share.format(left=left)} {where}" if share else f"{left} {where}: {value!r}"


def evidence_line(condition: FailureCondition) -> str:
    """How much stands behind a condition: "3 situations, 5 sessions, 2 sources, 0
    successes; confirmed by 3 of 3; 1 chance in ~800 among 38 candidates"."""
    if condition.source == "manual":
        return "written by hand"
    c = condition

    def n(count: int, word: str, plural: str | None = None) -> str:
        return f"{count} {word if count == 1 else plural or word + 's'}"

    parts = [
        n(c.support, "situation"),
        n(c.session_count or c.support, "session"),
    ]
    if c.source_count:
        parts.append(n(c.source_count, "source"))
    parts.append(n(c.contradictions, "success", "successes"))
    line = ", ".join(parts)
    if c.candidates:
        confirmed = (
            f"confirmed by {c.confirmations} of {c.support}" if c.confirmations else "unconfirmed"
        )
        tried = n(c.candidates, "candidate feature")
        line += f"; {confirmed}; {one_in(c.chance)} among {tried}"
    return line


def explain(condition: FailureCondition) -> str:
    return (
        f"{condition.tool} fails with '{condition.signature}' when "
        f"{describe(condition.predicate)} ({evidence_line(condition)})"
    )
