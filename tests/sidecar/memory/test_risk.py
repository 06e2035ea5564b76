"""A session's risk of ending abandoned, from its prefix: learned from outcomes only,
order-free, calibrated, bounded, explained, and kept through checkpoints and the log."""

from __future__ import annotations

import json
import random

import pytest

from sidecar.memory import FailureMemory, Session, Step, Trace
from sidecar.memory.risk import RiskModel, RiskParams, SessionRisk, derive_risk

REFUSED = "Error: order #W123 cannot be cancelled: status is delivered"
"""A business-rule refusal: a deterministic failure."""


def run(n: int, outcome: str, failing: bool, tool: str = "cancel_order") -> Session:
    steps = [Step("get_user", {"id": f"u{n}"}, {"name": "x"})]
    steps.append(Step(tool, {"order": f"#W{n}"}, error=REFUSED if failing else None))
    steps.append(Step("respond", {"text": "done"}, "ok"))
    return Session(f"s{n}", tuple(steps), outcome, "a task")  # type: ignore[arg-type]


def stream(n: int, seed: int = 0, bad: float = 0.8, clean: float = 0.2) -> list[Session]:
    """Sessions whose chance of ending abandoned is ``bad`` after a refused call and
    ``clean`` without one (half of each)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        failing = i % 2 == 0
        abandoned = rng.random() < (bad if failing else clean)
        out.append(run(i, "abandoned" if abandoned else "completed", failing))
    return out


FAILED_PREFIX = list(run(0, "unknown", True).steps[:2])
CLEAN_PREFIX = list(run(0, "unknown", False).steps[:2])


def learned(sessions: list[Session], params: RiskParams | None = None) -> FailureMemory:
    memory = FailureMemory(risk=params)
    for s in sessions:
        memory.add_session(s)
    return memory


def test_the_same_sessions_in_any_order_give_the_same_risk() -> None:
    sessions = stream(300)
    shuffled = sessions[:]
    random.Random(5).shuffle(shuffled)
    a, b = learned(sessions), learned(shuffled)
    assert a.risk_model.to_dict() == b.risk_model.to_dict()
    assert a.risk(FAILED_PREFIX) == b.risk(FAILED_PREFIX)


def test_the_risk_is_calibrated_on_a_stream_whose_rates_are_known() -> None:
    memory = learned(stream(4000, seed=1))
    failed, clean = memory.risk(FAILED_PREFIX), memory.risk(CLEAN_PREFIX)
    assert failed.probability == pytest.approx(0.8, abs=0.04)
    assert clean.probability == pytest.approx(0.2, abs=0.04)
    # before any call every session is alike: the base rate, 0.5 here
    assert memory.risk([]).probability == pytest.approx(0.5, abs=0.04)


def test_a_refused_call_ranks_riskier_than_a_clean_prefix_and_says_why() -> None:
    memory = learned(stream(200, seed=2))
    failed, clean = memory.risk(FAILED_PREFIX), memory.risk(CLEAN_PREFIX)
    assert failed.probability > clean.probability
    assert "failed (deterministic)" in failed.reason and "raises" in failed.reason
    assert failed.learned == 200 and 0 < failed.sessions <= 200
    assert failed.features["last"] == "deterministic"
    assert json.loads(json.dumps(failed.to_dict()))["probability"] == round(failed.probability, 4)


def test_a_trace_is_asked_like_its_steps() -> None:
    memory = learned(stream(100, seed=3))
    assert memory.risk(Trace(FAILED_PREFIX)) == memory.risk(FAILED_PREFIX)


def test_nothing_learned_answers_even_odds_resting_on_nothing() -> None:
    answer = FailureMemory().risk(FAILED_PREFIX)
    assert answer == SessionRisk(0.5, 0, 0, "", answer.features)


def test_unknown_outcomes_teach_nothing() -> None:
    memory = learned([run(i, "unknown", True) for i in range(50)])
    assert derive_risk(RiskParams(), run(0, "unknown", True)) is None
    assert memory.risk_model.to_dict() == RiskModel().to_dict()


def test_the_keys_naming_tools_are_capped_whatever_the_order() -> None:
    params = RiskParams(max_keys=40, max_session_keys=30)
    sessions = [run(i, "abandoned" if i % 3 else "completed", i % 2 == 0, f"tool_{i}" * 9)
                for i in range(600)]  # fmt: skip
    shuffled = sessions[:]
    random.Random(9).shuffle(shuffled)
    a, b = learned(sessions, params), learned(shuffled, params)
    model = a.risk_model
    capped = [k for k in model.counts if "tool_" in k]
    assert 0 < len(capped) <= 40
    assert len(model.counts) - len(capped) < 100  # buckets and kinds only
    assert all(len(part) <= 64 for k in model.counts for part in k.split("\x1f"))
    assert model.to_dict() == b.risk_model.to_dict()
    # a session's own keys are capped too
    many = Session("long", tuple(Step(f"t{i}") for i in range(500)), "abandoned")
    assert len(derive_risk(params, many)["keys"]) <= 30  # type: ignore[index]


def test_the_risk_survives_a_checkpoint_and_a_fold_of_the_log() -> None:
    sessions = stream(120, seed=4)
    memory = learned(sessions)
    restored = FailureMemory.from_dict(json.loads(json.dumps(memory.to_dict())))
    assert restored.risk(FAILED_PREFIX) == memory.risk(FAILED_PREFIX)
    # the log: each session's derived payload and its outcome's, as JSON, folded by a
    # fresh learner in another order
    rows = [("session", json.dumps(memory.derive(s))) for s in sessions]
    rows += [("outcome", json.dumps(memory.derive_outcome(s))) for s in sessions]
    refolded = FailureMemory()
    for kind, row in reversed(rows):
        if kind == "session":
            refolded.fold(json.loads(row))
        else:
            refolded.learn_outcome(json.loads(row))
    assert refolded.risk_model.to_dict() == memory.risk_model.to_dict()
    # a capped model restored keeps capping as the one it came from
    params = RiskParams(max_keys=5)
    small = learned([run(i, "abandoned", False, f"x{i}") for i in range(30)], params)
    again = FailureMemory.from_dict(small.to_dict())
    extra = run(99, "completed", True, "x99")
    small.add_session(extra)
    again.add_session(extra)
    assert again.risk_model.to_dict() == small.risk_model.to_dict()


def test_an_old_checkpoint_is_refused_so_the_log_is_folded_again() -> None:
    old = FailureMemory().to_dict()
    old["format"] = 3
    del old["risk"]
    with pytest.raises(ValueError):
        FailureMemory.from_dict(old)
    risk = RiskModel().to_dict()
    risk["format"] = 0
    with pytest.raises(ValueError):
        RiskModel.from_dict(risk)


def test_a_sessions_row_teaches_the_risk_nothing_its_outcomes_row_does() -> None:
    """A session's row carries no outcome (a row logged before the risk model had none
    either); its outcome is a row of its own.  A row of the layout that carried the
    outcome inside ("risk") still teaches it."""
    session = run(1, "abandoned", True)
    source = FailureMemory()
    row = source.derive(session)
    assert "risk" not in row
    memory = FailureMemory()
    memory.fold(row)
    assert memory.risk_model.base == [0, 0]
    assert memory.summary()["sessions"] == 1
    memory.learn_outcome(source.derive_outcome(session))
    assert memory.risk_model.base == [1, 0]
    earlier = FailureMemory()
    earlier.fold({**row, "risk": source.derive_outcome(session)})
    assert earlier.risk_model.to_dict() == memory.risk_model.to_dict()
    assert source.derive_outcome(run(2, "unknown", True)) is None


def test_unknown_features_are_refused() -> None:
    with pytest.raises(ValueError):
        RiskParams(levels=(("colour",),))
