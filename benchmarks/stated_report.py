"""The stated-number benchmark's page and plot (:mod:`benchmarks.stated_cost`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.results import md_table, md_targets, pyplot, save_figure

EXTRACTION_COLUMNS = {
    "shape": "shape",
    "arguments": "arguments",
    "expressions": "expressions",
    "build_call_p50_ms": "build_call ms",
    "with_expressions_p50_ms": "+ expressions ms",
    "ratio": "ratio",
    "expressions_p50_ms": "expressions alone ms",
    "uncapped_expressions": "uncapped: expressions",
    "uncapped_p50_ms": "uncapped ms",
    "uncapped_vs_capped": "uncapped / capped",
}
WORK_COLUMNS = {
    "failures": "failing calls kept",
    "unfit_numbers": "unfit numbers",
    "slots_searched": "searches",
    "evaluations": "evaluations",
    "bound": "bound",
    "budget_used_max": "most of a budget used",
    "evaluations_lifted": "evaluations, lifted",
    "pairs_lifted": "pairs tried, lifted",
    "same_conditions_when_lifted": "same conditions lifted",
}
TIME_COLUMNS = {
    "failures": "failing calls kept",
    "unfit_numbers": "unfit numbers",
    "conditions_ms_per_failure": "derivation ms/failure",
    "conditions_lifted_ms_per_failure": "lifted",
    "conditions_lifted_vs_default": "lifted / default",
    "stated_ms_per_failure": "stated search ms/failure",
    "stated_lifted_ms_per_failure": "lifted",
    "stated_lifted_vs_default": "lifted / default",
    "stated_share": "stated share",
}


def _table(columns: Mapping[str, str], rows: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """One row per (name, result row); a column a row lacks shows ``-``."""
    body = [[name, *[r.get(k, "-") for k in columns]] for name, r in rows]
    return md_table(["group", *columns.values()], body)


def markdown(result: Mapping[str, Any]) -> str:
    p, pairs, real = result["params"], result["adversarial_call"], result["booking"]
    groups = [("adversarial", r) for r in result["groups"]] + [("booking", real)]
    extraction = [[r.get(k, "-") for k in EXTRACTION_COLUMNS] for r in result["extraction"]]
    return "\n".join(
        [
            f"## Stated numbers: extraction and the fitting search (FIT_STEPS_PER_CALL "
            f"{p['fit_steps_per_call']}, MAX_EXPRESSIONS {p['max_expressions']})",
            "",
            "Extraction per call, p50 ms; ratio: `build_call` + `expressions` against "
            "`build_call` alone; uncapped: MAX_EXPRESSIONS lifted.",
            "",
            md_table(list(EXTRACTION_COLUMNS.values()), extraction),
            "",
            f"The fitting search's work (the adversarial call: {pairs['expressions']} "
            f"expressions, {pairs['counts']} counts x {pairs['amounts']} amounts, less the "
            f"amount another slot equals; bound: FIT_STEPS_PER_CALL x failing calls stating "
            f"the number, per search; booking: {real['runs']} runs, {real['failing_calls']} "
            f"refused `{p['booking_tool']}` calls):",
            "",
            _table(WORK_COLUMNS, groups),
            "",
            "Its time (p50 ms per failing call kept; the derivation is "
            "`FailureMemory.conditions(tool)`, the stated search the family's "
            "`group_candidates` over the tool's groups):",
            "",
            _table(TIME_COLUMNS, groups),
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: Mapping[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for shape in result["params"]["shapes"]:
        rows = [r for r in result["extraction"] if r["shape"] == shape]
        n = [r["arguments"] for r in rows]
        left.plot(n, [r["build_call_p50_ms"] for r in rows], marker="o", label=f"{shape}: build")
        left.plot(
            n, [r["with_expressions_p50_ms"] for r in rows], marker="s", label=f"{shape}: + expr."
        )
    left.set(xscale="log", yscale="log", xlabel="arguments", ylabel="p50 ms")
    left.set_title("Extraction per call")
    left.legend(fontsize="small")
    groups = [r for r in result["groups"] if r["unfit_numbers"] == 1]
    n = [r["failures"] for r in groups]
    for key, label in (
        ("conditions", "derivation"),
        ("conditions_lifted", "derivation, lifted"),
        ("stated", "stated search"),
        ("stated_lifted", "stated search, lifted"),
    ):
        right.plot(n, [r[f"{key}_ms_per_failure"] for r in groups], marker="o", label=label)
    right.set(yscale="log", xlabel="failing calls in the group", ylabel="p50 ms per failure")
    right.set_title("Adversarial group, one number searched")
    right.legend(fontsize="small")
    return [save_figure(plt, fig, out_dir / "stated.png")]
