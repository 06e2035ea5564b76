"""What a tool's succeeding calls leave behind: for each feature, the values seen
succeeding and in how many success sessions, from which sources.

Successes are counted by *session* (a tool called ten times with one value in one
session is one success of that value), and sessions of identical task text are one
*success unit* (:mod:`sidecar.memory.independence`).  Everything here is a sum, a
minimum, a maximum or a set: the statistics of a set of sessions do not depend on the
order they arrived in.  Tables are bounded by a *bottom-k* rule (a full table keeps the
values of smallest hash), which is order-free too: whether a value was seen succeeding
is then known exactly for every value below the table's hash ceiling, and unknown above
it (a condition about such a value never blocks).

Per tool, per feature:

- ``values``: token -> a *tally*: its success sessions, the bit mask of their sources,
  and enough of their task texts to count success units (:func:`units_of`);
- ``extremes``: the smallest and largest numbers seen succeeding;
- ``prior``: a tally, per other tool, of the successes it had succeeded before (the
  first success of this one in the session): a prerequisite every success had, or a
  call that never came before a success;
- ``present``: a tally, per feature, of the successes that had it at all;
- ``profiles``: the features of the families kept whole (a profiled family's, such as
  the quantities a failure message may state) of a bounded sample of successful calls,
  the calls of smallest hash: a predicate relating two of them, proposed after the
  successes were folded, is judged against this sample.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.memory.predicate import Predicate, is_number, token
from sidecar.memory.values import FeatureValue

MAX_TEXTS = 20_000
"""Task-text fingerprints kept per tool; sessions beyond count as units of their own."""
MAX_PROFILES = 96
"""Successful calls whose profiled features a tool keeps (those of smallest hash)."""
MAX_PROFILE_SIZE = 96
"""Features one profile keeps, at most."""


def items_of(value: FeatureValue) -> list[Any]:
    return value if isinstance(value, list) else [value]


def token_hash(key: str) -> int:
    return zlib.crc32(key.encode())


@dataclass
class SessionSuccesses:
    """One session's successful calls of one tool, folded: every feature's tokens, its
    numbers' range, and the tools that had succeeded before the first call."""

    tokens: dict[str, set[str]] = field(default_factory=dict)
    numbers: dict[str, list[float]] = field(default_factory=dict)
    prior: frozenset[str] = frozenset()
    session: str = ""
    profiles: list[dict[str, float]] = field(default_factory=list)
    """The profiled features of each successful call (distinct ones)."""
    context: bool = True
    """The session's context is known.  Else (calls nothing could tie together) its
    successes show only the values of features read from the call alone: they are no
    success unit, and say nothing of the tools that succeeded before them."""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "tokens": {k: sorted(v) for k, v in self.tokens.items()},
            "numbers": self.numbers,
            "prior": sorted(self.prior),
            "session": self.session,
            "profiles": self.profiles,
        }
        if not self.context:
            out["context"] = False
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionSuccesses:
        return cls(
            tokens={k: set(v) for k, v in data["tokens"].items()},
            numbers={k: list(v) for k, v in data["numbers"].items()},
            prior=frozenset(data["prior"]),
            session=str(data.get("session", "")),
            profiles=[dict(p) for p in data.get("profiles", ())],
            context=bool(data.get("context", True)),
        )

    def profile(self, values: Mapping[str, float]) -> None:
        """Keep one successful call's profiled features."""
        kept = dict(sorted(values.items())[:MAX_PROFILE_SIZE])
        if kept and kept not in self.profiles:
            self.profiles.append(kept)

    def add(self, features: Mapping[str, FeatureValue]) -> None:
        """Fold in one successful call's tallied features (the caller leaves out those
        its families keep statistics of their own for)."""
        for name, value in features.items():
            items = items_of(value)
            self.tokens.setdefault(name, set()).update(token(v) for v in items)
            numbers = [float(v) for v in items if is_number(v)]
            if numbers:
                low, high = min(numbers), max(numbers)
                bounds = self.numbers.get(name)
                if bounds is None:
                    self.numbers[name] = [low, high]
                else:
                    bounds[0], bounds[1] = min(bounds[0], low), max(bounds[1], high)


@dataclass
class ToolStats:
    sessions: int = 0
    texts: dict[str, int] = field(default_factory=dict)
    """Task-text fingerprint -> success sessions with it."""
    values: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    """feature -> token -> tally (:func:`new_tally`)"""
    ceiling: dict[str, int] = field(default_factory=dict)
    """feature -> hash ceiling of a full table (values hashing at or above it are not
    kept)."""
    extremes: dict[str, list[float]] = field(default_factory=dict)
    prior: dict[str, list[int]] = field(default_factory=dict)
    """tool -> tally of the successes it had succeeded before"""
    present: dict[str, list[int]] = field(default_factory=dict)
    """feature -> tally of the successes that had it (a predicate on a feature is judged
    against the successes where the feature could be read)."""
    profiles: list[list[Any]] = field(default_factory=list)
    """``[hash, unit mark, source mask, {feature: number}]`` of at most
    :data:`MAX_PROFILES` successful calls, those of smallest hash (a 64-bit hash of the
    unit and the values: order-free), sorted by it."""
    _decoded: dict[str, list[Any]] = field(default_factory=dict, repr=False, compare=False)

    def record(
        self,
        session: SessionSuccesses,
        text: str | None,
        source_bit: int,
        cap: Callable[[str], int],
    ) -> None:
        """Fold in one session's successes of this tool; ``cap(feature)``: how many
        values of a feature its table keeps."""
        self._decoded.clear()
        mark = None if text is None else token_hash(text)
        if session.context:
            self.sessions += 1
            if text is not None and (text in self.texts or len(self.texts) < MAX_TEXTS):
                self.texts[text] = self.texts.get(text, 0) + 1
        for name, keys in session.tokens.items():
            tally(self.present.setdefault(name, new_tally()), mark, source_bit)
            limit = cap(name)
            table = self.values.setdefault(name, {})
            for key in keys:
                entry = table.get(key)
                if entry is not None:
                    tally(entry, mark, source_bit)
                    continue
                ceiling = self.ceiling.get(name)
                if ceiling is not None and token_hash(key) >= ceiling:
                    continue
                table[key] = tally(new_tally(), mark, source_bit)
                if len(table) > limit:
                    drop = max(table, key=token_hash)
                    del table[drop]
                    self.ceiling[name] = token_hash(drop)
        for name, (low, high) in session.numbers.items():
            bounds = self.extremes.get(name)
            if bounds is None:
                self.extremes[name] = [low, high]
            else:
                bounds[0], bounds[1] = min(bounds[0], low), max(bounds[1], high)
        if not session.context:
            return
        for tool in session.prior:
            tally(self.prior.setdefault(tool, new_tally()), mark, source_bit)
        unit = mark if mark is not None else token_hash(f"s\x1f{session.session}")
        for values in session.profiles:
            self._keep_profile(values, unit, source_bit)

    def _keep_profile(self, values: dict[str, float], unit: int, source_bit: int) -> None:
        text = json.dumps([unit, values], sort_keys=True)
        key = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
        at = bisect.bisect_left(self.profiles, key, key=lambda p: int(p[0]))
        if at < len(self.profiles) and self.profiles[at][0] == key:
            self.profiles[at][2] |= source_bit  # the same call seen again
            return
        if at >= MAX_PROFILES:
            return
        self.profiles.insert(at, [key, unit, source_bit, values])
        del self.profiles[MAX_PROFILES:]

    # ---- queries --------------------------------------------------------------------
    @property
    def units(self) -> int:
        """Success sessions, those of identical task text counted once."""
        return self.sessions - sum(self.texts.values()) + len(self.texts)

    def units_with(self, feature: str) -> int:
        """Success units in which ``feature`` could be read."""
        return min(units_of(self.present.get(feature)), self.units)

    def succeeded(self, feature: str) -> list[Any]:
        """The values of ``feature`` seen succeeding (decoded once per change)."""
        found = self._decoded.get(feature)
        if found is None:
            found = [json.loads(k) for k in self.values.get(feature, {})]
            self._decoded[feature] = found
        return found

    def complete(self, feature: str) -> bool:
        """Whether the table of ``feature`` holds every value seen succeeding."""
        return feature not in self.ceiling

    def seen_succeeding(self, feature: str, value: Any) -> bool | None:
        """Whether ``value`` of ``feature`` was seen succeeding; ``None``: unknown (the
        table is full and the value hashes above its ceiling)."""
        key = token(value)
        if key in self.values.get(feature, {}):
            return True
        ceiling = self.ceiling.get(feature)
        if ceiling is not None and token_hash(key) >= ceiling:
            return None
        return False

    def profiled(self, test: Callable[[Mapping[str, float]], bool | None]) -> tuple[int, int, int]:
        """Over the kept profiles: the success units where ``test`` holds, their sources'
        mask, and the units where it could be judged (``test`` gave ``None`` elsewhere)."""
        held: set[int] = set()
        judged: set[int] = set()
        mask = 0
        for _key, unit, bits, values in self.profiles:
            verdict = test(values)
            if verdict is None:
                continue
            judged.add(unit)
            if verdict:
                held.add(unit)
                mask |= bits
        return len(held), mask, len(judged)

    def contradictions(self, predicate: Predicate) -> tuple[int, int]:
        """Success sessions the predicate matches, and the mask of their sources.

        A novelty predicate ("never seen to succeed") matches no success it was built
        from; what counts against it is how often a success came with a value no other
        success had: the values seen in exactly one success session (the successes that,
        left out, the predicate would have stopped).  A threshold ("beyond anything seen
        to succeed") is judged by its rank alone (:mod:`sidecar.memory.chance`)."""
        table = self.values.get(predicate.feature, {})
        if predicate.op == "==":
            entry = table.get(token(predicate.value))
            return (units_of(entry), entry[1]) if entry else (0, 0)
        if predicate.op == "not_in":
            once = [e for e in table.values() if units_of(e) == 1]
            mask = 0
            for e in once:
                mask |= e[1]
            return len(once), mask
        return 0, 0

    def with_prior(self, tool: str) -> tuple[int, int]:
        """Success units in which ``tool`` had succeeded before, and their sources."""
        entry = self.prior.get(tool)
        return (min(units_of(entry), self.units), entry[1]) if entry else (0, 0)

    def without_prior(self, tool: str) -> int:
        """Success units in which ``tool`` had not succeeded before."""
        return self.units - self.with_prior(tool)[0]

    # ---- persistence ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "texts": self.texts,
            "values": self.values,
            "ceiling": self.ceiling,
            "extremes": self.extremes,
            "prior": self.prior,
            "present": self.present,
            "profiles": self.profiles,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolStats:
        return cls(
            sessions=int(data["sessions"]),
            texts=dict(data["texts"]),
            values={k: {t: list(e) for t, e in v.items()} for k, v in data["values"].items()},
            ceiling=dict(data["ceiling"]),
            extremes={k: list(v) for k, v in data["extremes"].items()},
            prior=dict(data["prior"]),
            present=dict(data["present"]),
            profiles=[list(p) for p in data.get("profiles", ())],
        )


MAX_TALLY_TEXTS = 8
"""Task texts a tally tells apart; past them it counts sessions (an over-count that
only makes a value look more often seen succeeding)."""


def new_tally() -> list[int]:
    """``[sessions, source mask, sessions without a task text, text marks...]``."""
    return [0, 0, 0]


def tally(entry: list[int], mark: int | None, source_bit: int) -> list[int]:
    """Count one success session in ``entry`` (and return it)."""
    entry[0] += 1
    entry[1] |= source_bit
    if mark is None:
        entry[2] += 1
    elif mark not in entry[3:] and len(entry) - 3 < MAX_TALLY_TEXTS:
        entry.append(mark)
    return entry


def units_of(entry: list[int] | None) -> int:
    """The success units a tally counted: its sessions, those of one task text once."""
    if not entry:
        return 0
    texts = len(entry) - 3
    return entry[0] if texts >= MAX_TALLY_TEXTS else entry[2] + texts


def source_names(mask: int, names: Iterable[str]) -> tuple[str, ...]:
    """The sources a mask names (bit ``i`` is the ``i``-th source; the last bit stands
    for every source past it)."""
    listed = list(names)
    out = [n for i, n in enumerate(listed[:SOURCE_BITS]) if mask >> i & 1]
    if mask >> SOURCE_BITS & 1:
        out.append("other sources")
    return tuple(out)


SOURCE_BITS = 62


def source_bit(index: int) -> int:
    return 1 << min(index, SOURCE_BITS)
