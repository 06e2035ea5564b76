"""A session's risk of ending abandoned, in the check's answer and at the gateway: learned
from reported outcomes, carried over the wire, and a warning only where a gateway was
told to warn at that level."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.agents.gateway.guard.backend import GuardReason, GuardVerdict
from sidecar.agents.gateway.guard.calls import _at_risk
from sidecar.errors import ConfigError
from sidecar.memory import SessionRisk
from sidecar.model import CallCheck
from sidecar.rules.verdict import RISK_RULE, risk_warning
from sidecar.settings import Settings, validate
from sidecar.wire import dump, load


def run(n: int, failing: bool) -> dict[str, Any]:
    """A session that opens with a lookup; a failing one is refused, looks again, and is
    abandoned (the risk is learned from the steps before each call)."""
    order = f"#R{n}"
    lookup = {"tool": "get_order", "arguments": {"order_id": order},
              "output": {"order_id": order, "status": "pending"}, "error": None}  # fmt: skip
    if failing:
        refused = {"tool": "cancel_order", "arguments": {"order_id": order}, "output": None,
                   "error": "Error: order cannot be cancelled"}  # fmt: skip
        return {"steps": [lookup, refused, lookup], "outcome": "abandoned", "session_id": f"f{n}"}
    done = {"tool": "cancel_order", "arguments": {"order_id": order},
            "output": {"cancelled": True}, "error": None}  # fmt: skip
    return {"steps": [lookup, done], "outcome": "completed", "session_id": f"ok{n}"}


def test_a_check_answers_the_sessions_risk_learned_from_outcomes(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("cancel_order", "cancel")])
        empty = sc.check_call([], "get_order", {"order_id": "#R0"})
        assert empty.risk is not None and empty.risk.learned == 0
        sc.report_many([run(n, failing=n % 2 == 0) for n in range(20)])
        lookup = run(99, failing=False)["steps"][:1]
        refused = run(98, failing=True)["steps"][:2]
        calm = sc.check_call(lookup, "cancel_order", {"order_id": "#R99"})
        after_failure = sc.check_call(refused, "get_order", {"order_id": "#R98"})
        assert calm.risk is not None and after_failure.risk is not None
        assert calm.risk.learned == after_failure.risk.learned == 20
        # every session that met the refusal was abandoned: the risk after it is higher
        assert after_failure.risk.probability > calm.risk.probability
        assert after_failure.risk.probability > 0.5 and after_failure.risk.reason
        # the answer goes over the wire whole
        back = load(CallCheck, dump(after_failure))
        shown = round(after_failure.risk.probability, 4)  # four digits on the wire
        assert back.risk == replace(after_failure.risk, probability=shown)


def test_the_gateway_warns_an_allowed_call_at_the_risk_it_was_told() -> None:
    risk = SessionRisk(0.8, 40, 100, "the last call failed", {"last": "deterministic"})
    allowed = GuardVerdict("allow", (), risk)
    assert _at_risk(allowed, None) is allowed  # not told: never
    assert _at_risk(allowed, 0.9) is allowed  # below the level
    warned = _at_risk(allowed, 0.7)
    assert warned.decision == "warn" and warned.risk is risk
    (reason,) = warned.reasons
    assert reason.rule_id == RISK_RULE and "0.80" in reason.explanation
    assert "the last call failed" in reason.explanation and "last deterministic" in reason.evidence
    # a call the memory warns about or blocks keeps its own reasons
    blocked = GuardVerdict("block", (GuardReason("r", "why", "seen"),), risk)
    assert _at_risk(blocked, 0.1) is blocked
    assert _at_risk(GuardVerdict("allow"), 0.1).decision == "allow"  # no risk answered
    assert risk_warning(risk, 0.8) is not None and risk_warning(risk, 0.81) is None


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_a_risk_level_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match="gateway_warn_risk"):
        validate(Settings(gateway_warn_risk=bad))
    assert validate(Settings(gateway_warn_risk=0.7)).gateway_warn_risk == 0.7


def _learned(sc: Sidecar) -> int:
    risk = sc.check_call([], "get_order", {"order_id": "#R0"}).risk
    assert risk is not None
    return risk.learned


def test_an_outcome_sent_after_the_steps_teaches_the_risk_once(tmp_path: Path) -> None:
    """A stateless client reports steps as they happen (outcome unknown) and the outcome
    at the end with the same steps: the outcome still teaches, and only once."""
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("cancel_order", "cancel")])
        session = run(1, failing=True)
        sc.report_many([{**session, "outcome": "unknown"}])
        assert _learned(sc) == 0
        sc.report_many([session])
        assert _learned(sc) == 1
        sc.report_many([session, {**session, "outcome": "completed"}])  # sent again
        assert _learned(sc) == 1
        after = sc.check_call(session["steps"][:2], "get_order", {"order_id": "#R1"}).risk
        assert after is not None and after.probability > 0.5  # abandoned, not completed


def test_a_session_in_two_parts_each_with_an_outcome_counts_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.add_tools([Tool("get_order", "look up an order"), Tool("cancel_order", "cancel")])
        session = run(2, failing=True)
        sc.report_many([{**session, "steps": session["steps"][:2]}])
        sc.report_many([session])  # longer, the same outcome
        assert _learned(sc) == 1
        # forgetting the source takes the outcome with the session
        sc.forget("local")
        assert _learned(sc) == 0
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        assert _learned(sc) == 0
