"""Results: the machine and revision a run is recorded with, target lines, Markdown
tables and pages, JSON files and plots, written into ``benchmarks/results/`` by
default (git ignores it)."""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT_DIR = REPO_ROOT / "benchmarks" / "results"


def machine() -> dict[str, Any]:
    import os

    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "system": platform.system(),
        "machine": platform.machine(),
        **cpu_model(),
    }


def cpu_model() -> dict[str, Any]:
    """The CPU's name and the vector extensions that decide onnxruntime's int8 kernels
    (two machines with the same CPU name may differ in them)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = set(next((v for k, v in fields.items() if k.strip() == "flags"), "").split())
    name = next((v.strip() for k, v in fields.items() if k.strip() == "model name"), "")
    wanted = ("avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni")
    return {"cpu": name, "cpu_flags": [f for f in wanted if f in flags]}


def revision() -> str | None:
    """The commit the library was measured at (``+dirty`` when its packages have
    uncommitted changes), or ``None`` outside a git checkout."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--", "sidecar", "indexes", "cold_store")
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head}+dirty" if dirty else head


def target(name: str, goal: str, measured: Any, met: bool | None, note: str = "") -> dict[str, Any]:
    """One target line: ``met`` is ``None`` when the target does not apply to this run."""
    out: dict[str, Any] = {"target": name, "goal": goal, "measured": measured, "met": met}
    if note:
        out["note"] = note
    return out


# ---- Markdown -------------------------------------------------------------------------
def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def md_targets(targets: Sequence[Mapping[str, Any]]) -> str:
    def verdict(met: bool | None) -> str:
        return "n/a" if met is None else ("met" if met else "**missed**")

    rows = [
        (t["target"], t["goal"], _short(t["measured"]), verdict(t["met"]), t.get("note", ""))
        for t in targets
    ]
    return md_table(["target", "goal", "measured", "verdict", "note"], rows)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_short(v)}" for k, v in value.items())
    return str(value)


def machine_line(m: Mapping[str, Any]) -> str:
    return f"{m.get('cpus')} CPUs, {m.get('system')} {m.get('machine', '')}, Python {m['python']}"


def page(name: str, result: Mapping[str, Any], body: str) -> str:
    """``NAME.md``: what was run, where and when, the question, then ``body`` and the
    plots."""
    head = [
        f"# Benchmark: {name}",
        "",
        f"`{result['command']}` ({result['mode']}), {result['generated_at']}, "
        f"{result['elapsed_s']} s on {machine_line(result.get('machine') or machine())}, "
        f"library at {result.get('library_revision') or 'an unknown revision'}, 1-minute "
        f"load {result['load_average_1m']['before']} before and "
        f"{result['load_average_1m']['after']} after.",
        "",
        f"Question: {result.get('question', '')}.",
        "",
    ]
    figures = [f"![{p}]({p})" for p in result.get("plots", [])]
    return "\n".join([*head, body, *figures, ""])


def summary_page(combined: Mapping[str, Any]) -> str:
    """``all.md``: every target's verdict and a link to each benchmark's page."""
    rows = [
        f"- {name}: {r['elapsed_s']} s, [{name}.md]({name}.md)"
        for name, r in combined["benchmarks"].items()
    ]
    return "\n".join(
        [
            "# Benchmarks: every target",
            "",
            f"`{combined['command']}` ({combined['mode']}), {combined['elapsed_s']} s on "
            f"{machine_line(combined['machine'])}, library at "
            f"{combined.get('library_revision') or 'an unknown revision'}.",
            "",
            md_targets(combined["targets"]),
            "",
            *rows,
            "",
        ]
    )


# ---- files ----------------------------------------------------------------------------
def write_json(result: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def emit(result: dict[str, Any], out: Path | None) -> None:
    """The standalone modules' output: JSON on stdout, and in ``out`` when given."""
    text = json.dumps(result, indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    print(text)


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported only when a plot is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt: Any, fig: Any, path: Path) -> Path:
    """Lay out, write and close one matplotlib figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
