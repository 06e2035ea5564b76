"""The seed's archive and its linear prefix check, restated as the benchmarks' baseline.

The seed (``docs/design.md``) gives ``ToolChainArchiver.build_archive`` and
``check_prefix_collision``; this module keeps their data classes, their loop (a tuple of
tool ids rebuilt for every archived chain on every check, first match in archive order)
and their message, so that the compiled checks are timed against what the seed does and
their verdicts can be compared with its verdicts.  Written for the benchmarks; the test
suite has its own oracle.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum, auto


class ToolType(Enum):
    SEARCH = auto()
    PARSER = auto()
    EXTRACTOR = auto()
    API_CLIENT = auto()


@dataclass(frozen=True)
class ToolNode:
    tool_id: str
    tool_type: ToolType


@dataclass(frozen=True)
class AbandonedChain:
    topology: tuple[ToolNode, ...]
    terminal_falsification_signature: str
    negative_constraint_rule: str


@dataclass(frozen=True)
class ChainArchive:
    chains: tuple[AbandonedChain, ...]
    archive_digest: str


@dataclass(frozen=True)
class CandidateToolSequence:
    sequence: tuple[str, ...]


def build_archive(chains: tuple[AbandonedChain, ...]) -> ChainArchive:
    """The seed's ``build_archive``: the chains as given, and their digest."""
    if not chains:
        raise ValueError("Cannot build an empty abandoned chain archive.")
    payload = {
        "chains": tuple(
            sorted(
                f"{'>'.join(t.tool_id for t in c.topology)}::{c.terminal_falsification_signature}"
                for c in chains
            )
        )
    }
    digest = hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")
    ).hexdigest()
    return ChainArchive(chains=chains, archive_digest=digest)


def check_prefix_collision(
    archive: ChainArchive, candidate: CandidateToolSequence
) -> tuple[bool, str | None]:
    """The seed's fetching-time check, line for line: ``(is_safe, rejection_reason)``."""
    for chain in archive.chains:
        abandoned_ids = tuple(t.tool_id for t in chain.topology)
        prefix_len = len(abandoned_ids) - 1
        if prefix_len > 0 and len(candidate.sequence) >= prefix_len:
            candidate_prefix = candidate.sequence[:prefix_len]
            abandoned_prefix = abandoned_ids[:prefix_len]
            if candidate_prefix == abandoned_prefix:
                return False, (
                    f"PREFIX_COLLISION: Sequence {candidate_prefix} matches the "
                    f"prefix of an abandoned chain. Rule: {chain.negative_constraint_rule}. "
                    f"Expected failure: {chain.terminal_falsification_signature}"
                )
    return True, None


def seed_archive(chains: Iterable[tuple[Sequence[str], str, str]]) -> ChainArchive:
    """An archive of ``(topology, signature, rule)`` triples, in the order given."""
    return build_archive(
        tuple(
            AbandonedChain(
                tuple(ToolNode(t, ToolType.API_CLIENT) for t in topology), signature, rule
            )
            for topology, signature, rule in chains
        )
    )


def seed_check(archive: ChainArchive, plan: Sequence[str]) -> tuple[bool, str | None]:
    return check_prefix_collision(archive, CandidateToolSequence(tuple(plan)))
