"""The fleet simulation: registered, its saturation rule and probes, and a tiny run in
which every acknowledged session is in the archive afterwards (no timing is asserted:
the machine is shared)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.bench_fleet import CLOSED, Sizes, markdown, measure, plot, saturation
from benchmarks.fleet_probes import WATCHED, CpuProbe, lock_key

TINY = Sizes(
    period_s=1.0, agents=(2,), step_s=3.0, replicas=(1,), closed_clients=2, closed_s=2.0
)  # fmt: skip


def test_fleet_is_a_registered_benchmark() -> None:
    from benchmarks.run import ALL_ORDER, MODULES, build_parser

    assert MODULES["fleet"] == "benchmarks.bench_fleet" and "fleet" in ALL_ORDER
    assert build_parser().parse_args(["fleet", "--full"]).quick is False


def _row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "achieved_vs_offered": 1.0,
        "check_call_ms": {"p50": 3.0, "p95": 5.0},
        "report_ms": {"p50": 20.0, "p95": 40.0},
        "errors": 0,
    }
    return row | over


def test_a_step_saturates_on_throughput_latency_or_errors() -> None:
    assert saturation(_row()) == []
    assert saturation(_row(achieved_vs_offered=0.89)) == ["achieved 0.89x offered"]
    assert saturation(_row(report_ms={"p50": 900.0, "p95": 2500.0})) == [
        "report p95 2500.0 ms > 2000"
    ]
    assert saturation(_row(check_call_ms={"p50": 1.0, "p95": 251.0}))
    assert saturation(_row(errors=1)) == ["1 errors"]


def test_the_lock_probe_watches_the_key_the_state_locks() -> None:
    from sidecar.storage.backends.postgres import PostgresDatabase

    db = SimpleNamespace(schema="m_abc")
    for name in WATCHED:
        assert lock_key("m_abc", name) == PostgresDatabase.key(db, name)  # type: ignore[arg-type]


def test_the_cpu_probe_counts_this_process() -> None:
    probe = CpuProbe({"clients": [__import__("os").getpid()]})
    probe.start()
    started = time.perf_counter()
    while time.perf_counter() - started < 0.3:
        sum(range(10_000))
    cores = probe.stop(time.perf_counter() - started)["cores"]
    assert cores["clients"] > 0 and cores["machine"] >= 0 and "other" in cores


@pytest.mark.integration  # starts PostgreSQL, a Chroma server, S3 and servers
def test_a_tiny_fleet_loses_nothing(tmp_path: Path) -> None:
    result = measure(TINY)
    assert result["benchmark"] == "fleet"
    configs = result["configs"]
    assert set(configs) == {"embedded", "1"}
    for label, config in configs.items():
        assert [s["agents"] for s in config["steps"]] == [2]
        first = config["steps"][0]
        assert first["offered_sessions_per_s"] == 2.0 and first["sessions"] > 0
        assert {"check_call_ms", "report_ms", "cpu", "saturated"} <= set(first)
        assert first["errors"] == 0 and set(first["statuses"]) == {"archived"}
        # two checks before the two calls of every session
        assert first["checks_per_s"] == pytest.approx(2 * first["sessions_per_s"], abs=0.01)
        assert (config["closed"] is not None) == (label in CLOSED)
        # every session answered `archived` is counted in the archive once the
        # publisher has nothing left, and nothing else is
        assert config["pending_records"] == 0 and config["lost"] == 0
        assert config["chains"] == config["acknowledged_archived"] > first["sessions"]
    shared = configs["1"]["steps"][0]["locks"]
    assert shared["samples"] > 0 and 0 <= shared["report_lock_held"] <= 1
    assert set(result["intake"]["sessions_per_s"]) == {"embedded", "1"}
    assert {t["met"] for t in result["targets"]} <= {True, False, None}

    page = markdown(result)
    assert "saturates at" in page and "shared, 1" in page
    with contextlib.suppress(ImportError):  # matplotlib is in the `bench` extra
        assert [p.name for p in plot(result, tmp_path)] == ["fleet.png"]


def test_the_stack_sampler_counts_every_thread_and_adds_servers_up(tmp_path: Path) -> None:
    import json
    import threading

    from benchmarks.bench_fleet import merged_stacks
    from benchmarks.stack_sampler import Sampler

    sampler = Sampler(interval=0.002)
    sleeper = threading.Thread(target=time.sleep, args=(0.2,))
    sampler.start()
    sleeper.start()
    sleeper.join()
    for name in ("a.json", "b.json"):
        sampler.dump(tmp_path / name)
    one = json.loads((tmp_path / "a.json").read_text())
    assert one["samples"] > 0 and any(k.startswith("(outside)") for k in one["innermost"])
    both = merged_stacks([tmp_path / "a.json", tmp_path / "b.json"])
    assert both["servers"] == 2 and both["samples"] == 2 * one["samples"]
