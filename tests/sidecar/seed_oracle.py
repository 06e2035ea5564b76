"""The seed's reference behaviour, kept as a test oracle for parity checks.

A compact restatement of ``build_archive`` (digest) and ``check_prefix_collision`` from
the design note in ``../shared/seed/``: tests compare the sidecar's answers to these.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class OracleChain:
    topology: tuple[str, ...]
    signature: str
    rule: str


def oracle_digest(chains: Sequence[OracleChain]) -> str:
    if not chains:
        raise ValueError("Cannot build an empty abandoned chain archive.")
    payload = {"chains": tuple(sorted(f"{'>'.join(c.topology)}::{c.signature}" for c in chains))}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def oracle_prefix_check(
    chains: Sequence[OracleChain], candidate: Sequence[str]
) -> tuple[bool, str | None]:
    for chain in chains:
        prefix_len = len(chain.topology) - 1
        if prefix_len > 0 and len(candidate) >= prefix_len:
            candidate_prefix = tuple(candidate[:prefix_len])
            if candidate_prefix == chain.topology[:prefix_len]:
                return False, (
                    f"PREFIX_COLLISION: Sequence {candidate_prefix} matches the "
                    f"prefix of an abandoned chain. Rule: {chain.rule}. "
                    f"Expected failure: {chain.signature}"
                )
    return True, None
