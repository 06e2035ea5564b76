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
``support / (support + contradictions + 1)``; ``reach`` (thresholds only) the failing
value nearest the successes.  ``warn_only`` marks a condition that may
warn but never block (a remembered argument value the failure was not shown to be
about).  Only ``tool``, ``signature`` and ``predicate`` are required when a condition is
written by hand; ``source`` is then ``manual``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from sidecar.classify import Kind
from sidecar.memory.chance import one_in
from sidecar.memory.families import FAMILIES, family_for, family_of
from sidecar.memory.predicate import Predicate, is_number, token
from sidecar.memory.signature import failure_kind, normalize_signature
from sidecar.memory.values import FeatureValue

Source = Literal["learned", "manual"]
MAX_EXAMPLE_SESSIONS = 5


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
    family: str = "bad_value"
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
    ignored: int = 0
    """Successes that match it, recorded but not counted: a trusted source stands behind
    it and only untrusted sources contradicted it."""
    stated: str = ""
    """The numbers of the failure messages it rests on: which expression equalled
    which stated number, in how many situations (empty: none)."""
    aligned: int = 0
    """How many of the message's numbers it rests on."""
    reach: float | None = None
    """A threshold's failing value nearest the successes (the largest failing below a
    ``<``, the smallest above a ``>``; for numbers never seen to succeed, when every
    failure lies on one side of the successes, the same): between it and the successes
    no call was seen either way, and a learned condition only warns there."""
    vouched: bool = False
    """An operator confirmed it: it acts as a hand-written condition does.  Not part of
    its JSON form: the state's judgements say it, and the rule book marks it so."""

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
        return family_for(self.predicate.feature).holds(self.predicate, features, tokens)

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
            "ignored": self.ignored,
            "stated": self.stated,
            "aligned": self.aligned,
            **({"reach": self.reach} if self.reach is not None else {}),
            "explanation": self.explanation,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FailureCondition:
        tool, signature, predicate, source = _identity(data)
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
        sessions = _names(data.get("sessions"), "sessions")
        condition = cls(
            tool=tool,
            signature=signature,
            predicate=predicate,
            kind=kind,
            family=family,
            support=support,
            contradictions=contradictions,
            confidence=_share(conf, "confidence"),
            warn_only=bool(data.get("warn_only", False)),
            source=source,
            sessions=sessions[:MAX_EXAMPLE_SESSIONS],
            session_count=_count(data.get("session_count", len(sessions)), "session_count"),
            source_count=_count(data.get("source_count", 0), "source_count"),
            sources=_names(data.get("sources"), "sources")[:MAX_EXAMPLE_SESSIONS],
            failing=_count(data.get("failing", 0), "failing"),
            units=_count(data.get("units", 0), "units"),
            candidates=_count(data.get("candidates", 0), "candidates"),
            chance=_share(data.get("chance", 1.0), "chance"),
            confirmations=_count(data.get("confirmations", 0), "confirmations"),
            contradiction_sources=_names(
                data.get("contradiction_sources"), "contradiction_sources"
            )[:MAX_EXAMPLE_SESSIONS],
            ignored=_count(data.get("ignored", 0), "ignored"),
            stated=str(data.get("stated") or ""),
            aligned=_count(data.get("aligned", 0), "aligned"),
            reach=_reach(data.get("reach")),
        )
        explanation = data.get("explanation")
        if not isinstance(explanation, str) or not explanation:
            explanation = explain(condition)
        return replace(condition, explanation=explanation)


def _reach(value: Any) -> float | None:
    if value is None:
        return None
    if not is_number(value):
        raise ValueError(f"reach must be a number, got {value!r}")
    return float(value)


def _identity(data: Mapping[str, Any]) -> tuple[str, str, Predicate, Source]:
    """What a condition is about: its tool, signature, predicate and origin."""
    tool, signature = data.get("tool"), data.get("signature")
    if not isinstance(tool, str) or not tool:
        raise ValueError("a condition needs a 'tool'")
    if not isinstance(signature, str) or not signature:
        raise ValueError("a condition needs a 'signature'")
    raw = data.get("predicate")
    if not isinstance(raw, Mapping):
        raise ValueError("a condition needs a 'predicate' object")
    predicate = Predicate.from_dict(raw)
    family_of(predicate.feature)  # an unknown feature prefix fails here
    source = data.get("source", "manual")
    if source not in ("learned", "manual"):
        raise ValueError("source must be 'learned' or 'manual'")
    return tool, signature, predicate, source


def _share(value: Any, name: str) -> float:
    if not is_number(value) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1]")
    return float(value)


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
def describe(predicate: Predicate) -> str:
    """The predicate in words."""
    return family_for(predicate.feature).describe(predicate)


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
    if c.candidates or c.aligned:
        confirmed = (
            f"confirmed by {c.confirmations} of {c.support}" if c.confirmations else "unconfirmed"
        )
        tried = n(c.candidates, "candidate feature")
        among = "from what the messages state" if c.aligned else f"among {tried}"
        line += f"; {confirmed}; {one_in(c.chance)} {among}"
    if c.stated:
        line += f"; {c.stated}"
    return line


def explain(condition: FailureCondition) -> str:
    return (
        f"{condition.tool} fails with '{condition.signature}' when "
        f"{describe(condition.predicate)} ({evidence_line(condition)})"
    )
