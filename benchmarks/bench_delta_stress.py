"""Question: do many writer processes on one Delta table on S3, meeting injected delays,
503s and lost replies at every step of a commit, lose any acknowledged row or store one
twice (``python -m benchmarks.run delta --stress [--full]``)?

Each phase starts a test S3 server behind a fault proxy (``benchmarks/s3server.py``),
creates the table without faults, lets the writers (``benchmarks/delta_stress.py``) go
at once with the faults on, then checks the table against what each writer was told.
Quick: 6 writers x 12 appends; full: 8 writers x 40 appends; 4 chains a batch; once
with faults at every step, once with faults only at the log entry's put, once with 0.2%
of the log's listings and reads taken by the store and answered by nothing for 40 s,
past the writers' 30 s deadline on each call into deltalake.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from benchmarks.delta_stress import CALL_DEADLINE_S, check, committed_rows, run_writers
from benchmarks.harness.results import machine, md_table, md_targets, target
from benchmarks.s3server import FaultSpec, S3Server
from cold_store import ColdStore

STRESS_FAULTS = {
    "every step": "delay=0.2,max_delay_s=0.05,fail=0.05,lose_reply=0.05",
    "the log entry's put": "fail=0.2,lose_reply=0.3,only=log write",
    # the store takes the request and its reply never comes within the call deadline
    "replies held past the deadline": "lose_reply=0.002,lost_reply_s=40,only=list|log read",
}


def stress(quick: bool, seed: int = 7) -> dict[str, Any]:
    """Quick: 6 writers x 12 appends; full: 8 writers x 40 appends; 4 chains a batch;
    one phase per pattern of :data:`STRESS_FAULTS`."""
    started = time.perf_counter()
    workers, appends, size = (6, 12, 4) if quick else (8, 40, 4)
    phases = [
        _stress_phase(where, spec, seed, workers, appends, size)
        for where, spec in STRESS_FAULTS.items()
    ]
    ok = all(p["report"]["ok"] for p in phases)
    bad = sum(len(p["report"]["lost"]) + len(p["report"]["written_twice"]) for p in phases)
    return {
        "benchmark": "delta",
        "mode_of_run": "stress",
        "question": (
            "many writer processes on one Delta table on S3 with faults injected at every "
            "step of a commit: is every acknowledged row stored, exactly once?"
        ),
        "machine": machine(),
        "params": {"workers": workers, "appends": appends, "size": size},
        "phases": phases,
        "targets": [target("stress: acknowledged rows lost, or stored twice", "none", bad, ok)],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _stress_phase(
    where: str, faults: str, seed: int, workers: int, appends: int, size: int
) -> dict[str, Any]:
    started = time.perf_counter()
    spec = FaultSpec.parse(f"seed={seed},{faults}")
    server = S3Server(faults=spec)
    try:
        location = f"s3://{server.new_bucket()}/stress"
        server.set_faults(False)
        ColdStore(location, s3=server.options()).close()
        server.set_faults(True)
        outputs = run_writers(location, server.endpoint, workers, appends, size, seed)
        server.set_faults(False)
        faults_seen = server.fault_counts()
        store = ColdStore(location, s3=server.options())
        try:
            committed = committed_rows(location, server.options(), "chains")
            report = check(store, committed, outputs, workers, appends, size)
            commits = store.chains.version  # version 0 created the table
        finally:
            store.close()
    finally:
        server.close()
    report.faults = faults_seen
    report.seconds = round(time.perf_counter() - started, 1)
    return {
        "where": where,
        "faults": spec.text(),
        "commits": commits,
        "report": {**asdict(report), "ok": report.ok},
    }


def stress_markdown(result: dict[str, Any]) -> str:
    p = result["params"]
    lines = [
        "## Stress: writers meeting faults at every step of a commit",
        "",
        f"{p['workers']} writer processes x {p['appends']} appends of {p['size']} chains "
        "(every third a batch all writers replay; some group commits of two batches); "
        "each failed call retried with the same batch; each call into deltalake abandoned "
        f"after {CALL_DEADLINE_S:g} s.",
        "",
        md_table(
            [
                "faults at",
                "commits",
                "expected keys",
                "stored",
                "rows (copies included)",
                "acknowledged",
                "lost",
                "reported written twice",
                "gave up",
                "bad reads",
                "errors met",
                "calls still hung at the end",
                "s",
            ],
            [
                [
                    ph["where"],
                    ph.get("commits", ""),
                    r["expected"],
                    r["stored"],
                    r["rows"],
                    r["acknowledged"],
                    len(r["lost"]),
                    len(r["written_twice"]),
                    len(r["gave_up"]),
                    len(r["bad_reads"]),
                    ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items())) or "none",
                    r.get("hung_at_exit", 0),
                    r["seconds"],
                ]
                for ph in result["phases"]
                for r in [ph["report"]]
            ],
        ),
        "",
    ]
    for ph in result["phases"]:
        faults = sorted(ph["report"]["faults"].items(), key=lambda kv: -kv[1])
        lines += [f"Faults injected, {ph['where']} (`{ph['faults']}`):", ""]
        lines += [md_table(["step: kind", "requests"], faults), ""]
    return "\n".join([*lines, md_targets(result["targets"]), ""])
