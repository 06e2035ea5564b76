"""``bench_failures``'s Markdown on the call memory's warnings: by family and by rule
(the learned condition behind each warning), in the pooled folds and with each domain
left out, each with its warning precision beside its block precision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAMILY_HEAD = ["calls of", "family", "warned calls", "failed", "warning precision",
               "in successful runs", "blocks", "block precision"]  # fmt: skip
RULE_HEAD = ["calls of", "tool", "family", "warned calls", "failed", "warning precision",
             "in successful runs", "condition", "reason line"]  # fmt: skip


def cell(value: Any) -> Any:
    return "-" if value is None else value


def scopes(pooled: Any, left_out: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """(label, figures) for the pooled folds, then each domain left out."""
    return [("pooled folds", pooled),
            *((f"{d} left out", v) for d, v in (left_out or {}).items())]  # fmt: skip


def family_rows(result: Mapping[str, Any]) -> list[list[Any]]:
    lodo = result["leave_one_domain_out"]
    rows = []
    for label, families in scopes(result["families"], lodo.get("families")):
        for family, f in families.items():
            blocks = f["failures_blocked"] + f["blocks_on_ok_calls"]
            if not (f["warned_calls"] or blocks):
                continue
            rows.append([label, family, f["warned_calls"], f["warned_calls_failed"],
                         cell(f["warning_precision"]), f["warned_calls_in_successful_runs"],
                         blocks, cell(f["block_precision"])])  # fmt: skip
    return rows


def rule_rows(result: Mapping[str, Any]) -> list[list[Any]]:
    found = result.get("warned_by_rule") or {}
    rows = []
    for label, rules in scopes(found.get("pooled_folds", []),
                               found.get("leave_one_domain_out")):  # fmt: skip
        rows += [[label, r["tool"], r["family"], r["warned_calls"], r["failed"],
                  cell(r["warning_precision"]), r["in_successful_runs"],
                  f"`{r['condition_id']}`", r["reason"]] for r in rules]  # fmt: skip
    return rows


def warnings_section(result: Mapping[str, Any]) -> list[str]:
    from benchmarks.harness.results import md_table

    mine = result["systems"]["call_memory"]
    rules = rule_rows(result)
    return [
        "### Where the warnings come from: by family and by rule (call_memory)",
        "",
        f"Pooled folds: {mine['warned_calls']} calls warned, of which "
        f"{mine['warned_calls_failed']} failed (warning precision "
        f"{cell(mine['warning_precision'])}; block precision "
        f"{cell(mine['block_precision'])} over {mine['blocks']} blocks); "
        f"{mine['warned_calls_in_successful_runs']} warned calls in successful runs "
        f"({cell(mine['warned_share_in_successful_runs'])} of their calls).",
        "",
        "By family: the calls the memory warned on (decision `warn`) with a condition of "
        "the family behind the warning (a call two families warned counts for each), how "
        "many failed, how many were in successful runs; the family's blocks (calls its "
        "conditions blocked) and their precision. Families with neither are left out:",
        "",
        md_table(FAMILY_HEAD, family_rows(result)),
        "",
        "By rule, the 10 that warned on the most calls of successful runs per scope (a "
        "call two rules warned counts for each; one reason line of the rule as learned):",
        "",
        md_table(RULE_HEAD, rules) if rules else "none",
        "",
    ]
