"""A session's risk of ending abandoned, from the steps it has made so far (its prefix).

Learned from reported outcomes only: a session reported ``completed`` or ``abandoned``
teaches, one reported ``unknown`` teaches nothing.  Every prefix of a reported session
(the steps before each of its calls) is described by a few coarse features:

- ``steps``: how many steps so far, bucketed;
- ``fails``: how many of them failed, bucketed;
- ``last``: how the last step ended: ``none`` (no step yet), ``ok``, or its failure's
  kind (:func:`sidecar.memory.signature.failure_kind`: deterministic, transient,
  unknown);
- ``repeat``: whether a failure (tool, normalized signature) occurred twice;
- ``tool``: the last step's tool (untrusted text: cut to :data:`MAX_TOOL` characters).

**A backoff chain of keys.**  :class:`RiskParams.levels` lists feature tuples from
general to specific; a prefix has one key per level.  Each key counts the abandoned and
the completed sessions that reached it (a session once per key, whatever the number of
its prefixes there: the figure is "of the sessions that got here, how many were
abandoned", and a long session does not outweigh a short one).  A prediction starts
from the base rate (Beta(1, 1) smoothed) and walks the chain: at each level the key's
counts are smoothed toward the estimate of the level above,
``p = (abandoned + strength * p_above) / (sessions + strength)``.  A key few sessions
reached barely moves the estimate; one many reached is its own rate: calibrated by
construction, with no fitting step.

**Order does not matter.**  The state is counts (sums); the keys naming a tool are
capped at ``max_keys``, keeping the keys of smallest hash ever seen, which does not
depend on arrival either (a key is admitted only below the current largest hash, which
only falls, so a key evicted or refused never comes back and a kept key has all of its
counts).  The keys made only of buckets and kinds are few by construction and never
capped.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sidecar.memory.evidence import Session, Step
from sidecar.memory.signature import failure_kind, normalize_signature

RISK_FORMAT = 1
MAX_TOOL = 64
"""Characters of a tool name a key keeps (tool names are untrusted input)."""
OUTCOMES = ("abandoned", "completed")
SEP = "\x1f"

STEP_BUCKETS = (0, 1, 2, 3, 5, 8, 12, 20)
"""Lower bounds of the ``steps`` buckets: 0, 1, 2, 3-4, 5-7, 8-11, 12-19, 20+."""
FAIL_BUCKETS = (0, 1, 2, 3)
"""Lower bounds of the ``fails`` buckets: 0, 1, 2, 3+."""

FEATURES = ("steps", "fails", "last", "repeat", "tool")
CAPPED = frozenset({"tool"})
"""Features whose values are untrusted and unbounded: their keys are capped."""


@dataclass(frozen=True)
class RiskParams:
    """The model's settings, chosen on the retail domain alone
    (``benchmarks/failure_risk.py``)."""

    levels: tuple[tuple[str, ...], ...] = (
        ("last",),
        ("last", "fails"),
        ("last", "fails", "repeat"),
        ("last", "fails", "repeat", "tool"),
        ("last", "fails", "repeat", "tool", "steps"),
    )
    strength: float = 8.0
    """Pseudo-sessions a key's rate is smoothed with toward the level above's."""
    max_keys: int = 4096
    """Keys naming a tool the model keeps at most."""
    max_session_keys: int = 512
    """Keys one session teaches at most (the ones of smallest hash past the uncapped)."""

    def __post_init__(self) -> None:
        unknown = {f for level in self.levels for f in level} - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown risk features: {', '.join(sorted(unknown))}")


@dataclass(frozen=True)
class SessionRisk:
    """The answer for one prefix: how likely the session ends abandoned, and why."""

    probability: float
    sessions: int
    """Past sessions the most specific key with any evidence rests on."""
    learned: int
    """Sessions with an outcome the model has learned from."""
    reason: str
    """The feature that moved the estimate most, in words ("" when nothing did)."""
    features: Mapping[str, str] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "probability": round(self.probability, 4),
                "features": dict(self.features)}  # fmt: skip


def _bucket(value: int, bounds: Sequence[int]) -> str:
    """``value``'s bucket as ``low`` or ``low-high`` (``low+`` for the last)."""
    for low, high in zip(bounds, [*bounds[1:], None], strict=True):
        if high is None:
            return f"{low}+"
        if value < high:
            return str(low) if high == low + 1 else f"{low}-{high - 1}"
    return f"{bounds[-1]}+"


class _Prefix:
    """The features of a growing prefix, updated one step at a time (the cost of a
    risk answer is one pass over the steps)."""

    def __init__(self) -> None:
        self.steps = 0
        self.fails = 0
        self.last = "none"
        self.tool = ""
        self.repeat = False
        self._failed: set[tuple[str, str]] = set()

    def add(self, step: Step) -> None:
        self.steps += 1
        self.tool = step.tool[:MAX_TOOL]
        if step.error is None:
            self.last = "ok"
            return
        self.fails += 1
        self.last = failure_kind(step.error)
        failure = (self.tool, normalize_signature(step.error))
        self.repeat = self.repeat or failure in self._failed
        self._failed.add(failure)

    def features(self) -> dict[str, str]:
        return {
            "steps": _bucket(self.steps, STEP_BUCKETS),
            "fails": _bucket(self.fails, FAIL_BUCKETS),
            "last": self.last,
            "repeat": "yes" if self.repeat else "no",
            "tool": self.tool,
        }


def _keys(params: RiskParams, features: Mapping[str, str]) -> list[str]:
    """One key per level: the level's number and its features' values."""
    return [
        SEP.join([str(i), *(features[f] for f in level)]) for i, level in enumerate(params.levels)
    ]


def _capped(params: RiskParams, key: str) -> bool:
    index = int(key.split(SEP, 1)[0])
    return index < len(params.levels) and bool(CAPPED & set(params.levels[index]))


def _hash(key: str) -> tuple[int, str]:
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big"), key


def derive_risk(params: RiskParams, session: Session) -> dict[str, Any] | None:
    """What a session teaches the risk model, as JSON: its outcome and the keys its
    prefixes reached (each once); ``None`` when its outcome is unknown.  The prefixes are
    those before each call (the question is asked before a call); every step counts,
    even those learned with an earlier part of the session, since its outcome is known
    only now."""
    if session.outcome not in OUTCOMES:
        return None
    prefix = _Prefix()
    reached: set[str] = set()
    for step in session.steps:
        reached.update(_keys(params, prefix.features()))
        prefix.add(step)
    free = sorted(k for k in reached if not _capped(params, k))
    capped = sorted((k for k in reached if _capped(params, k)), key=_hash)
    room = max(params.max_session_keys - len(free), 0)
    return {"outcome": session.outcome, "keys": free + sorted(capped[:room])}


class RiskModel:
    """Counts of abandoned and completed sessions per prefix key (see the module)."""

    def __init__(self, params: RiskParams | None = None) -> None:
        self.params = params or RiskParams()
        self.base = [0, 0]
        """Sessions abandoned, completed."""
        self.counts: dict[str, list[int]] = {}
        self._capped: list[tuple[int, str]] = []
        """Heap of the capped keys by negated hash: the largest hash on top."""

    def fold(self, derived: Mapping[str, Any] | None) -> None:
        """Take in what :func:`derive_risk` gave (nothing for ``None``)."""
        if not derived or derived.get("outcome") not in OUTCOMES:
            return
        slot = OUTCOMES.index(derived["outcome"])
        self.base[slot] += 1
        for key in derived["keys"]:
            if self._admit(str(key)):
                self.counts.setdefault(key, [0, 0])[slot] += 1

    def _admit(self, key: str) -> bool:
        """Whether ``key`` is counted: a capped key stays only while its hash is among
        the ``max_keys`` smallest ever seen."""
        if key in self.counts or not _capped(self.params, key):
            return True
        rank, _ = mine = _hash(key)
        if len(self._capped) >= self.params.max_keys:
            largest = (-self._capped[0][0], self._capped[0][1])
            if mine > largest:
                return False
            heapq.heappop(self._capped)
            del self.counts[largest[1]]
        heapq.heappush(self._capped, (-rank, key))
        return True

    def risk(self, steps: Iterable[Step]) -> SessionRisk:
        """The probability that a session with these steps so far ends abandoned."""
        prefix = _Prefix()
        for step in steps:
            prefix.add(step)
        features = prefix.features()
        abandoned, completed = self.base
        p = (abandoned + 1.0) / (abandoned + completed + 2.0)
        resting, best, reason = abandoned + completed, 0.0, ""
        for level, key in zip(self.params.levels, _keys(self.params, features), strict=True):
            a, c = self.counts.get(key, (0, 0))
            if a + c == 0:
                continue
            above = p
            p = (a + self.params.strength * above) / (a + c + self.params.strength)
            moved = abs(_logit(p) - _logit(above))
            if moved > best:
                best, reason = moved, _words(level[-1], features, a, a + c, p > above)
            resting = a + c
        return SessionRisk(p, resting, abandoned + completed, reason, features)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": RISK_FORMAT,
            "params": {**asdict(self.params), "levels": [list(v) for v in self.params.levels]},
            "base": list(self.base),
            "counts": {k: list(v) for k, v in sorted(self.counts.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RiskModel:
        if data.get("format") != RISK_FORMAT:
            raise ValueError(f"unknown risk-model format {data.get('format')!r}")
        raw = dict(data["params"])
        raw["levels"] = tuple(tuple(v) for v in raw["levels"])
        model = cls(RiskParams(**raw))
        model.base = [int(v) for v in data["base"]]
        model.counts = {str(k): [int(a), int(c)] for k, (a, c) in data["counts"].items()}
        model._capped = [(-_hash(k)[0], k) for k in model.counts if _capped(model.params, k)]
        heapq.heapify(model._capped)
        return model


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1.0 - 1e-9)
    return math.log(p / (1.0 - p))


def _words(feature: str, features: Mapping[str, str], abandoned: int, n: int, up: bool) -> str:
    """The feature a level adds, said as a reason: what the prefix shows, and how the
    sessions that showed it ended."""
    value = features[feature]
    said = {
        "steps": f"{value} steps so far",
        "fails": f"{value} failed calls so far",
        "repeat": "a failure repeated" if value == "yes" else "no failure repeated",
        "tool": f"the last call was {value!r}",
        "last": {
            "none": "no call yet",
            "ok": "the last call succeeded",
        }.get(value, f"the last call failed ({value})"),
    }[feature]
    way = "raises" if up else "lowers"
    return f"{said}: {abandoned} of {n} sessions that got here were abandoned ({way} the risk)"
