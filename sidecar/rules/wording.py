"""What an agent is told of a rule: the sidecar's own words, built from structured facts.

The sidecar is a channel between agents, and what one agent's evidence holds (a failure
message, an argument value, a rule's prose, a task text) is text another party wrote.
So a reason an agent receives (a check's, a refusal's, a warning's, a lookup hint's) is
worded here, from facts: the tool, the names of the arguments and fields involved, the
relation, the counts behind the rule, its id and its standing.  Free text from evidence
reaches a viewer only when the viewer may *read* the rule (:meth:`Reading.reads`): an
operator reads everything; an agent reads what came from its own sessions alone, from
an operator (a hand-written rule, or one an operator confirmed) or from a trusted
source.  Even then it is *quoted*: a labelled field of its own (``quoted``), never
spliced into a sentence.

A rule an agent may not read shows no pointer into the archive either, and a warning
that rests on untrusted sources alone and is unconfirmed or likely by chance is not
shown to it at all (:meth:`Reading.shows_warning`): one untrusted party's word does not
reach another agent's model.

Names are shown only when they look like names (:func:`name`): a field or argument name
made of other characters is shown as "a field".  String values of a relation are shown
only to a viewer who reads the rule (the call's own value is in the reason's
``evidence``, which is what the asker's own call or session showed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sidecar.memory import FailureCondition
from sidecar.memory.conditions import describe, evidence_line
from sidecar.memory.predicate import Predicate
from sidecar.model import ArchivedConstraint, CheckReason, Condition
from sidecar.trust.neutralize import as_data, neutralize
from sidecar.trust.sources import token_of

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-\[\]]{0,63}")
WITHHELD = "\u2026"
"""What stands for a value a viewer may not read."""
QUOTED_CHARS = 500


@dataclass(frozen=True)
class Viewer:
    """Who an answer is for.  ``name`` ``None``: an operator (or the library's own
    caller), who reads everything; else the name of an agent's token."""

    name: str | None = None

    @property
    def operator(self) -> bool:
        return self.name is None

    def owns(self, source: str) -> bool:
        """Whether ``source`` is this agent's (what it reported, by any route)."""
        return self.name is not None and token_of(source) == self.name


OPERATOR = Viewer()


def viewer_of(name: str | None) -> Viewer:
    """The viewer an answer is worded for: an agent token's name, or an operator."""
    return OPERATOR if name is None else Viewer(name)


@dataclass(frozen=True)
class Reading:
    """What ``viewer`` may read of rules, given which sources are trusted."""

    viewer: Viewer
    trusted: Callable[[str], bool]

    def reads(self, sources: Iterable[str], manual: bool = False, complete: bool = True) -> bool:
        """Whether the viewer may read the free text of a rule resting on ``sources``
        (``complete``: they are all of its sources, not a sample)."""
        if self.viewer.operator or manual:
            return True
        found = list(sources)
        if any(self.trusted(s) for s in found):
            return True
        return complete and bool(found) and all(self.viewer.owns(s) for s in found)

    def owns(self, sources: Iterable[str], complete: bool = True) -> bool:
        """Whether every one of ``sources`` is the viewer's own: then the archive's records
        behind them (a pointer, the sessions, their argument values) are its to read."""
        if self.viewer.operator:
            return True
        found = list(sources)
        return complete and bool(found) and all(self.viewer.owns(s) for s in found)

    def owns_condition(self, c: FailureCondition) -> bool:
        if c.source == "manual":
            return self.viewer.operator
        return self.owns(c.sources, c.source_count <= 1 or len(c.sources) >= c.source_count)

    def reads_condition(self, c: FailureCondition) -> bool:
        # ``sources`` is a sample: it is every source when they are one witness
        complete = c.source_count <= 1 or len(c.sources) >= c.source_count
        return self.reads(c.sources, c.source == "manual" or c.vouched, complete)

    def reads_sequence(self, c: ArchivedConstraint) -> bool:
        return self.reads(c.sources, c.vouched)

    def shows_warning(self, c: FailureCondition, max_chance: float) -> bool:
        """Whether a condition that warns is shown at all: not when it rests on
        untrusted sources alone and is unconfirmed or likely by chance, unless the
        viewer reads it."""
        if self.reads_condition(c):
            return True
        untrusted = not any(self.trusted(s) for s in c.sources)
        weak = c.confirmations == 0 or c.chance > max_chance
        return not (untrusted and weak)


def name(text: str) -> str:
    """A field or argument name as shown: itself when it looks like a name."""
    return text if _NAME.fullmatch(text) else "a field"


def quoted(**fields: str) -> dict[str, str]:
    """Free text shown as data: each field neutralized and bounded, empty ones left
    out."""
    out: dict[str, str] = {}
    for key, text in fields.items():
        if text:
            out[key] = neutralize(text, QUOTED_CHARS, one_line=True)
    return out


# ---- call conditions ------------------------------------------------------------------------
def relation(c: FailureCondition, readable: bool) -> str:
    """The condition's predicate in words; a viewer who does not read the rule sees no
    string value of it (a value ``==`` compares is the call's own, and its evidence
    says so)."""
    p = c.predicate
    if not readable:
        p = _masked(p)
    return _names_only(describe(p), p)


def _masked(p: Predicate) -> Predicate:
    value = p.value
    if isinstance(value, str):
        return replace(p, value=WITHHELD)
    if isinstance(value, list | tuple):
        return replace(p, value=tuple(WITHHELD if isinstance(v, str) else v for v in value))
    return p


def _names_only(text: str, p: Predicate) -> str:
    """``text`` with a feature name that does not look like a name replaced."""
    _prefix, _, rest = p.feature.partition(":")
    for part in re.split(r"[.:]", rest):
        if part and name(part) != part and part in text:
            text = text.replace(part, "a field")
    return text


def condition_reason(
    c: FailureCondition,
    level: str,
    observed: str,
    pointer: str | None,
    status: str,
    readable: bool,
) -> CheckReason:
    """A call condition that holds for a call, as a reason (``pointer``: already
    ``None`` for a viewer who does not own the record)."""
    text = f"{c.tool} failed before when {relation(c, readable)} ({evidence_line(c)})"
    return CheckReason(
        level,  # type: ignore[arg-type]
        c.condition_id,
        "call",
        neutralize(text, 1_000, one_line=True),
        observed,
        pointer,
        status,
        quoted(failure=c.signature) if readable else {},
    )


def hint(c: FailureCondition, observed: str, readable: bool) -> str:
    """A lookup's warning that a condition may hold for the next call."""
    line = f"may fail: {c.tool} failed before when {relation(c, readable)}; {observed}"
    if readable:
        line += f"; {as_data(quoted(failure=c.signature))}"
    return neutralize(line, 1_000, one_line=True)


# ---- fatal sequences ------------------------------------------------------------------------
def conditions(when: Sequence[Condition], readable: bool) -> str:
    return " and ".join(condition(w, readable) for w in when)


def condition(w: Condition, readable: bool) -> str:
    field = name(f"{w.step}.{w.field}" if w.step else w.field)
    value = w.value
    shown = repr(value) if readable or not isinstance(value, str) else WITHHELD
    return f"{field} {w.op} {shown}"


def why(when: Sequence[Condition], context: Mapping[str, Any], readable: bool) -> str:
    """Why a fatal sequence's conditions hold under the asker's ``context`` (the values
    read there are the asker's own)."""
    if not when:
        return "unconditional"
    parts = []
    for w in when:
        keys = ([f"{w.step}.{w.field}"] if w.step else []) + [w.field]
        key = next((k for k in keys if k in context), None)
        if key is None:
            parts.append(f"{condition(w, readable)}: field missing from context, failing closed")
        else:
            parts.append(f"{condition(w, readable)} ({context[key]!r} in the context)")
    return "; ".join(parts)


def sequence_text(c: ArchivedConstraint, readable: bool) -> str:
    """A fatal sequence in the sidecar's words: its tools, its condition, its rule id and
    how many sources reported it."""
    cond = f" when {conditions(c.when, readable)}" if c.when else ""
    who = len(c.sources) or 1
    return (
        f"completes fatal sequence {'>'.join(c.sequence)}{cond} (rule {c.chain_id}; "
        f"reported by {who} source{'s' if who != 1 else ''})"
    )


def sequence_reason(
    c: ArchivedConstraint, level: str, evidence: str, status: str, reading: Reading
) -> CheckReason:
    readable = reading.reads_sequence(c)
    return CheckReason(
        level,  # type: ignore[arg-type]
        c.chain_id,
        "sequence",
        sequence_text(c, readable),
        evidence,
        c.pointer if reading.owns(c.sources) else None,
        status,
        quoted(rule=c.rule, failure=c.signature) if readable else {},
    )


def standing_text(c: ArchivedConstraint, readable: bool) -> str:
    """Why a fatal sequence in force only warns."""
    seq = ">".join(c.sequence)
    where = f"; {c.pointer}" if readable else ""
    if c.contested:
        return (
            f"contested fatal sequence {seq} "
            f"({c.contradictions} completed run(s) contradict it{where})"
        )
    who = ", ".join(c.sources) if readable and c.sources else "one source"
    return (
        f"unconfirmed fatal sequence {seq} (reported by {who} only: a block needs two "
        f"sources or a trusted one{where})"
    )


def lookup_hint(c: ArchivedConstraint, standing: str, text: str, reading: Reading) -> str | None:
    """A lookup's warning that the next tool would complete a fatal sequence that does
    not block (``standing``: contested, unconfirmed or conditional; ``text``: its words
    for a viewer who owns it); ``None``: not shown to this viewer."""
    readable = reading.reads_sequence(c)
    if reading.owns(c.sources):
        return text
    if standing == "unconfirmed" and not readable:
        return None
    if standing in ("contested", "unconfirmed"):
        return f"completes {standing_text(c, False)}"
    return (
        f"completes fatal sequence {'>'.join(c.sequence)} when "
        f"{conditions(c.when, readable)} (rule {c.chain_id}); not under this context"
    )


def toward(c: ArchivedConstraint, depth: int, readable: bool, owns: bool) -> str:
    """A lookup's warning that a tool is a step toward a fatal sequence."""
    cond = f" when {conditions(c.when, readable)}" if c.when else ""
    where = c.pointer if owns else f"rule {c.chain_id}"
    return (
        f"step {depth} of {len(c.sequence)} toward fatal sequence "
        f"{'>'.join(c.sequence)}{cond} ({where})"
    )
