"""The prequential protocol of ``bench_failures``: runs arrive one at a time, every call
is checked before its run is reported, and the learning curve and the firsts are
counted from what the library answered at the time."""

from __future__ import annotations

import pytest

from benchmarks.prequential import (
    checkpoints,
    curve,
    figures,
    first_block_targets,
    replay_stream,
    streams,
)
from benchmarks.tau2 import Corpus, Run
from sidecar.memory import Step, Thresholds

REFUSED = "Error: Non-delivered order cannot be exchanged"


def shop_run(n: int, status: str, started: str | None = None) -> Run:
    """A run that reads an order and exchanges it: refused when the order is pending."""
    order = f"#W{n}"
    read = Step("get_order", {"order_id": order}, {"order_id": order, "status": status})
    fails = status == "pending"
    exchange = Step("exchange", {"order_id": order}, None if fails else "ok",
                    REFUSED if fails else None)  # fmt: skip
    return Run(f"r{n}", "shop", f"shop/{n}", "agent", 0.0 if fails else 1.0, (read, exchange),
               ("", ""), started)  # fmt: skip


def shop() -> Corpus:
    """Twelve delivered orders exchanged, then pending ones refused (in this order)."""
    runs = [shop_run(n, "delivered", f"2025-01-01T00:{n:02d}") for n in range(12)]
    runs += [shop_run(12 + n, "pending", f"2025-01-01T01:{n:02d}") for n in range(6)]
    return Corpus(runs)


@pytest.mark.parametrize("through", ["sidecar", "call_memory"])
def test_each_call_is_checked_before_its_run_is_learned(through: str) -> None:
    corpus = shop()
    [time_order] = [s for s in streams(corpus, ["shop"], [3]) if s.kind == "time"]
    assert list(time_order.order) == list(range(18))  # the runs' start times
    replayed = replay_stream(corpus, time_order, 0, through)
    assert replayed.disagreements == 0
    refused = [a for a in replayed.arrivals if a.call.failed]
    # the first refusal is no repeat and nothing is known of it yet
    assert refused[0].position == 13 and not refused[0].call.repeat
    assert refused[0].call.check.decision == "allow"
    # later refusals repeat it; one failing situation warns, a second one can block
    assert all(a.call.repeat for a in refused[1:])
    assert refused[1].call.check.decision == "warn"
    decisions = [a.call.check.decision for a in refused]
    assert "block" in decisions
    # no successful call was blocked on the way
    assert all(a.call.check.decision != "block" for a in replayed.arrivals if not a.call.failed)
    [row] = figures(corpus, [replayed], Thresholds()).values()
    [first] = row["firsts"]
    assert first["first_repeat"] == 14
    assert first["first_correct_block"] == 13 + decisions.index("block")
    assert first["first_wrong_block"] is None


def test_streams_cover_each_domain_alone_after_the_others_and_pooled() -> None:
    runs = [shop_run(n, "delivered") for n in range(4)]
    runs += [Run(f"o{n}", "other", f"other/{n}", "agent", 1.0, (Step("ping", {}, "pong"),),
                 ("",)) for n in range(3)]  # fmt: skip
    corpus = Corpus(runs)
    made = streams(corpus, ["shop", "other"], [1, 2])
    labels = sorted({s.label for s in made})
    assert labels == ["other after the others", "other alone", "pooled", "shop after the others",
                      "shop alone"]  # fmt: skip
    for s in made:
        if s.kind == "after_others":
            assert {runs[i].domain for i in s.order} == {s.domain}
            assert {runs[i].domain for i in s.prior} == {"shop", "other"} - {s.domain}
        if s.kind == "pooled":
            assert sorted(s.order) == list(range(7)) and not s.prior
    # the seeded orders are the same for the same seed
    assert streams(corpus, ["shop", "other"], [1, 2]) == made


def test_the_curve_counts_the_first_n_sessions_and_each_window() -> None:
    assert checkpoints(7) == [7]
    assert checkpoints(60) == [10, 25, 50, 60]
    corpus = shop()
    [alone] = [s for s in streams(corpus, ["shop"], [3]) if s.kind == "alone"]
    replayed = replay_stream(corpus, alone, 0, "call_memory")
    rows = curve(replayed.arrivals, len(alone.order))
    assert [r["after"] for r in rows] == [10, 18]
    assert rows[-1]["cumulative"]["repeats"] == sum(a.call.repeat for a in replayed.arrivals)
    assert (
        rows[0]["window"]["repeats"] + rows[1]["window"]["repeats"]
        == (rows[-1]["cumulative"]["repeats"])
    )


def test_the_first_block_target_applies_only_where_a_repeat_came_early() -> None:
    def stream(first_repeat: int | None, first_block: int | None) -> dict[str, object]:
        firsts = {"first_repeat": first_repeat, "first_correct_block": first_block}
        return {"kind": "alone", "firsts": [firsts]}

    found = first_block_targets(
        {"a alone": stream(3, 9), "b alone": stream(40, None), "c alone": stream(5, None)}
    )
    verdicts = {t["target"].split(", ")[2].split(":")[0]: t["met"] for t in found}
    assert verdicts == {"a alone": True, "b alone": None, "c alone": False}
