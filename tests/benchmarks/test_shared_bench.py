"""The shared-memory benchmark: registered, and at a tiny size every row comes back with
the fields the page and the targets read (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from benchmarks.bench_shared import BREAKDOWN, INTAKE_FOLDER, REPLICAS, markdown, measure, plot
from benchmarks.shared_workload import Sizes

TINY = Sizes(
    tools=20,
    constraints=3,
    rounds=4,
    embedder="hashing",
    sessions_per_client=2,
    clients=2,
    intake_rounds=1,
    breakdown_sessions=2,
    staleness_trials=2,
    move_trials=2,
    delta=(1_000, 500, (500, 1_000), 5, 2),
)


def test_shared_is_a_registered_benchmark() -> None:
    from benchmarks.run import ALL_ORDER, MODULES, build_parser

    assert MODULES["shared"] == "benchmarks.bench_shared" and "shared" in ALL_ORDER
    assert build_parser().parse_args(["shared", "--full"]).quick is False


@pytest.mark.integration  # starts PostgreSQL, a Chroma server and S3: not a unit test
def test_a_tiny_run_has_every_row(tmp_path: Path) -> None:
    result = measure(TINY)
    assert result["benchmark"] == "shared" and "Delta" in result["shared_cold"]

    lookup = result["lookup"]
    assert lookup["same_answers"], lookup["answers"]
    # three sessions teach a condition that warns (a block needs more evidence)
    assert lookup["answers"]["shared"]["check_call"] == "warn"
    assert not lookup["answers"]["shared"]["check_safe"]
    for op in ("search", "check", "check_call"):
        row = lookup["ops"][op]
        assert row["embedded"]["n"] == row["shared"]["n"] == TINY.rounds
        assert row["shared_cached"]["n"] == row["shared_leased"]["n"] == TINY.rounds
        assert row["p50_ratio"] > 0 and row["p99_ratio"] > 0 and row["cached_p50_ratio"] > 0
        assert row["leased_p50_ratio"] > 0

    runs = result["intake"]["runs"]
    assert set(runs) == {
        "embedded",
        *(str(n) for n in REPLICAS),
        *(f"{n} folder" for n in INTAKE_FOLDER),
    }
    for run in runs.values():
        # every session sent was taken, on every replica count
        assert run["sessions"] == TINY.clients * TINY.sessions_per_client, run
        assert run["statuses"] == {"archived": run["sessions"]} and not run["errors"]

    breakdown = result["intake_breakdown"]
    assert set(breakdown) == set(BREAKDOWN)
    assert all(b["n"] == TINY.breakdown_sessions for b in breakdown.values())

    for key in ("uncached", "cached", "leased"):
        stale = result["staleness"][key]
        for kind in ("evict", "report"):
            for where in ("other", "same"):
                assert stale[kind][where]["n"] == TINY.staleness_trials // 2
                assert stale[kind][where]["never"] == 0
                if key != "cached":  # the next request sees the write: no stale answer
                    assert stale[kind][where]["stale_answers"] == 0, (key, kind, where)

    assert result["move"]["embedded"]["n"] == result["move"]["shared"]["n"] == TINY.move_trials
    assert [p["chains"] for p in result["delta"]["points"]] == [500, 1_000]
    assert {t["met"] for t in result["targets"]} <= {True, False, None}

    page = markdown(result)
    assert "## 2. Intake" in page and "## 5. Delta" in page
    with contextlib.suppress(ImportError):  # matplotlib is in the `bench` extra
        assert [p.name for p in plot(result, tmp_path)] == ["shared.png"]


@pytest.mark.integration  # starts PostgreSQL and two lease holders
def test_the_lease_cost_of_a_write_has_a_row_per_holder_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.bench_shared_checks import main

    main(["--writes", "--rounds", "5"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert [row.split("|")[1].strip() for row in rows] == ["0 leased", "1 leased", "2 leased"]
    assert rows[0].split("|")[4].strip() == "1.0"  # the baseline against itself
