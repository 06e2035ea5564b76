"""A session sent again longer (a conversation reported after each of its turns) is
one session: its first steps are not learned twice, its new ones are learned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar


@pytest.fixture
def sc(tmp_path: Path) -> Iterator[Sidecar]:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as s:
        yield s


def _get(invoice: str, status: str) -> dict[str, Any]:
    return {
        "tool": "get_invoice",
        "arguments": {"invoice_id": invoice},
        "output": {"invoice_id": invoice, "state": status},
    }


def _refund(invoice: str) -> dict[str, Any]:
    error = "Error: Unpaid invoice cannot be refunded"
    return {"tool": "refund", "arguments": {"invoice_id": invoice}, "error": error}


def _cancel(invoice: str) -> dict[str, Any]:
    error = "Error: Paid invoice cannot be cancelled"
    return {"tool": "cancel", "arguments": {"invoice_id": invoice}, "error": error}


def _support(sc: Sidecar, tool: str) -> dict[str, int]:
    return {
        str(v.condition["predicate"]["value"]): v.support
        for v in sc.constraints(include_lifted=True)
        if v.kind == "call" and v.sequence == (tool,) and v.condition is not None
        if v.condition["predicate"]["feature"] == "obj:invoice_id.state"
    }


def _report(sc: Sidecar, steps: list[dict[str, Any]], session: str) -> None:
    result = sc.report({"steps": steps, "outcome": "abandoned", "session_id": session})
    assert result.status in ("archived", "recorded"), result


def test_a_session_sent_again_longer_teaches_its_new_steps_once(sc: Sidecar) -> None:
    first = [_get("#I1", "unpaid"), _refund("#I1")]
    _report(sc, first, "conv")
    longer = [*first, _get("#I2", "paid"), _cancel("#I2")]
    _report(sc, longer, "conv")
    _report(sc, longer, "conv")  # a replay of the longer one: nothing new
    _report(sc, [_get("#I3", "unpaid"), _refund("#I3"), _get("#I4", "paid"), _cancel("#I4")], "b")
    # the first turn counts once for the conversation, the second turn was learned
    assert _support(sc, "refund") == {"unpaid": 2}
    assert _support(sc, "cancel") == {"paid": 2}


def test_another_session_under_a_known_id_teaches_nothing(sc: Sidecar) -> None:
    _report(sc, [_get("#I1", "paid"), _cancel("#I1")], "conv")
    # the same id, other first steps: not an extension of what was learned
    _report(sc, [_get("#I9", "paid"), _cancel("#I9"), _get("#I8", "paid"), _cancel("#I8")], "conv")
    _report(sc, [_get("#I3", "paid"), _cancel("#I3")], "other")
    assert _support(sc, "cancel") == {"paid": 2}


def test_a_learning_transaction_that_fails_leaves_no_trace_in_the_process(
    tmp_path: Path,
) -> None:
    """The learner folds a batch's rows inside the transaction; when that transaction
    fails after the fold, the process must not keep the batch (the state did not), nor
    skip the next batch's rows, which take the same sequence numbers: its memory stays
    the one a fresh process folds from the state."""
    from sidecar.errors import SidecarError
    from tests.support.shop import good_session

    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.report_many([good_session(n) for n in range(5)])
        repo = sc.state.conditions
        kept = repo.bump_conditions

        def fail(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError("the disk is full")

        repo.bump_conditions = fail  # type: ignore[method-assign]
        with pytest.raises((RuntimeError, SidecarError)):
            sc.report(good_session(100))
        repo.bump_conditions = kept  # type: ignore[method-assign]
        sc.report_many([good_session(200), good_session(201)])
        mine = sc.rules.conditions.memory().to_dict()
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as fresh:
        assert mine == fresh.rules.conditions.memory().to_dict()
