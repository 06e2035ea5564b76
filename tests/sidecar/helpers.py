"""Builders shared by the sidecar tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sidecar.model import ArchivedConstraint, Condition


def constraint(
    seq: Sequence[str],
    order: int = 0,
    *,
    when: Sequence[Condition] = (),
    gapped: bool = False,
    rule: str | None = None,
    signature: str = "boom",
) -> ArchivedConstraint:
    cid = f"c{order}"
    return ArchivedConstraint(
        chain_id=cid,
        sequence=tuple(seq),
        rule=rule or f"rule {order}",
        signature=signature,
        when=tuple(when),
        gapped=gapped,
        pointer=f"cold://chains/{cid}",
        order=order,
    )


def abandoned(
    topology: Sequence[str],
    signature: str = "HTTP 413 Payload Too Large",
    *,
    rule: str = "IF a THEN b fails",
    kind: str | None = None,
    when: Sequence[dict[str, Any]] = (),
    gapped: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "topology": list(topology),
        "outcome": "abandoned",
        "failure": {"signature": signature, "kind": kind, "error": extra.pop("error", {})},
        "constraint": {"rule": rule, "when": list(when), "gapped": gapped},
        **extra,
    }


def completed(topology: Sequence[str]) -> dict[str, Any]:
    return {"topology": list(topology), "outcome": "completed"}
