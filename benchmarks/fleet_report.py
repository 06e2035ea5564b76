"""The fleet benchmark's page and plot (:mod:`benchmarks.bench_fleet`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness.results import md_table, pyplot, save_figure
from benchmarks.harness.timing import ratio


# ---- the page ------------------------------------------------------------------------------
def _cpu_cell(row: dict[str, Any]) -> str:
    cores = row["cpu"].get("cores", {})
    names = ("replicas", "postgres", "chroma", "s3", "clients", "other")
    return " / ".join(f"{cores[n]:.2f}" if n in cores else "-" for n in names)


def _lock_cell(row: dict[str, Any]) -> str:
    locks = row.get("locks")
    if not locks or not locks.get("samples"):
        return "-"
    return (
        f"{locks['report_lock_held']:.0%} held, {locks['report_lock_waiters_mean']:.1f} waiting; "
        f"commit {locks.get('held', {}).get('commit', 0):.0%}; "
        f"publisher {locks['publisher_busy']:.0%}, pending <= {locks['pending_max']}"
    )


def _step_row(label: str, row: dict[str, Any]) -> list[Any]:
    return [
        label,
        row.get("agents", f"closed {row.get('clients')}"),
        row.get("offered_sessions_per_s", "max"),
        row["sessions_per_s"],
        row["checks_per_s"],
        f"{row['check_call_ms']['p50']} / {row['check_call_ms']['p95']}",
        f"{row['report_ms']['p50']} / {row['report_ms']['p95']}",
        row["errors"],
        _cpu_cell(row),
        _lock_cell(row),
        "; ".join(row.get("saturated", [])) or ("-" if "agents" in row else ""),
    ]


def _summary_row(label: str, c: dict[str, Any], embedded: float) -> list[Any]:
    sat, ok = c["saturated_at"], c["last_unsaturated"]
    closed = c["closed"]["sessions_per_s"] if c.get("closed") else "-"
    return [
        "embedded" if label == "embedded" else f"shared, {label}",
        ok["offered_sessions_per_s"] if ok else "none",
        f"{sat['offered_sessions_per_s']} ({'; '.join(sat['saturated'])})"
        if sat
        else "not reached",
        closed,
        ratio(closed, embedded, 2) if isinstance(closed, float) and embedded else "-",
        c["acknowledged_archived"],
        c["chains"],
        c["lost"],
    ]


def markdown(result: dict[str, Any]) -> str:
    p = result["params"]
    configs = result["configs"]
    embedded = configs["embedded"]["closed"]["sessions_per_s"]
    steps = [
        _step_row(label, row)
        for label, c in configs.items()
        for row in [*c["steps"], *([c["closed"]] if c.get("closed") else [])]
    ]
    bound = ", ".join(f"{op} {ms:g} ms" for op, ms in result["p95_bound_ms"].items())
    return "\n".join(
        [
            f"Agents finish one session every {p['period_s']:g} s (two `check_call`s, one "
            f"report); steps of {p['step_s']:g} s; saturated: achieved < "
            f"{result['saturated_below']:g}x offered, a p95 over its bound ({bound}) or an "
            f"error. Closed loop: {p['closed_clients']} clients, one session per request, "
            f"{p['closed_s']:g} s.",
            "",
            md_table(
                [
                    "config",
                    "serves up to (sessions/s offered)",
                    "saturates at",
                    "closed loop sessions/s",
                    "vs embedded",
                    "archived (acknowledged)",
                    "in the archive",
                    "lost",
                ],
                [_summary_row(k, c, embedded) for k, c in configs.items()],
            ),
            "",
            f"3 replicas / embedded: {result['intake']['three_vs_embedded']}x; "
            f"3 replicas / 1: {result['intake']['three_vs_one']}x.",
            "",
            md_table(
                [
                    "config",
                    "agents",
                    "offered/s",
                    "sessions/s",
                    "checks/s",
                    "check_call p50 / p95 ms",
                    "report p50 / p95 ms",
                    "errors",
                    "cores: replicas / postgres / chroma / s3 / clients / other",
                    "a report's write lock (state or learned), commit lock",
                    "saturated",
                ],
                steps,
            ),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    top = 0.0
    for label, c in result["configs"].items():
        xs = [s["offered_sessions_per_s"] for s in c["steps"]]
        ys = [s["sessions_per_s"] for s in c["steps"]]
        top = max([top, *xs])
        name = "embedded" if label == "embedded" else f"shared, {label} replica(s)"
        ax.plot(xs, ys, "o-", label=name)
    ax.plot([0, top], [0, top], ":", color="grey", label="offered")
    ax.set_xlabel("offered sessions / s")
    ax.set_ylabel("achieved sessions / s")
    ax.set_title("fleet simulation: achieved vs offered")
    ax.legend()
    return [save_figure(plt, fig, out_dir / "fleet.png")]
