"""The learner's bounds and judgement settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Independence = Literal["situation", "session"]


@dataclass(frozen=True)
class LearnParams:
    max_failures_per_group: int = 100
    max_values_per_feature: int = 512
    max_bad_values: int = 4096
    max_categorical: int = 12
    """A field of an object or entry with more distinct values than this (over every
    call seen) is an identifier or a name, not a state: no ``==`` / ``not_in`` on it."""
    max_not_in: int = 50
    """A novelty predicate (value never seen to succeed) needs at most this many values
    seen succeeding; beyond that the feature is too varied for novelty to mean much."""
    max_observations_per_group: int = 2000
    min_confidence_kept: float = 0.3
    independence: Independence = "situation"
    """``situation``: sessions sharing a task text or the objects they act on are one
    piece of evidence; ``session``: every session is its own."""
    confirm_chance: float = 0.5
    """A condition is *confirmed* when, with any one of its situations left out, the
    others still make it likelier real than chance (chance at most this)."""
