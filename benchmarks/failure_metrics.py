"""The figures ``bench_failures`` reports for a system's calls, whatever the protocol
(pooled folds, a domain left out, runs arriving one by one): what a *real repeat* is,
the catch and block rates, block and warning precision, the cost to successful runs, the
families and rules behind them, the misses, and the targets they are held to."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.failure_systems import Check, decide
from benchmarks.harness.results import target
from benchmarks.tau2 import Corpus
from sidecar.memory import FAMILIES, Thresholds
from sidecar.memory import normalize_signature as signature_of

Decision = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Call:
    seed: int
    fold: int
    run: int
    """Index of the run in the corpus."""
    step: int
    failed: bool
    repeat: bool
    """A failure whose (tool, normalized signature) occurred in training."""
    run_succeeded: bool
    check: Check
    hinted: str | None = None
    """``call_memory``: the level of the strongest "may apply" hint a lookup of the tool
    would have carried here (``None``: no hint)."""


def metrics(calls: Sequence[Call], decisions: Sequence[Decision]) -> dict[str, Any]:
    """The figures of one system over ``calls`` (``decisions`` aligned with them)."""
    pairs = list(zip(calls, decisions, strict=True))
    repeats = [d for c, d in pairs if c.repeat]
    failures = [d for c, d in pairs if c.failed]
    blocked = [c for c, d in pairs if d[0] == "block"]
    ok_calls = [(c, d) for c, d in pairs if c.run_succeeded]
    ok_runs = {(c.seed, c.run) for c, _ in ok_calls}
    wrong_runs = {(c.seed, c.run) for c, d in ok_calls if d[0] == "block" and not c.failed}
    any_block_runs = {(c.seed, c.run) for c, d in ok_calls if d[0] == "block"}
    warned = sum(d[0] == "warn" for _, d in ok_calls)
    warned_calls = [c for c, d in pairs if d[0] == "warn"]
    contradicted = {i for c, d in pairs if d[0] == "block" and not c.failed for i in d[1]}
    really_failed = sum(c.failed for c in blocked)
    warned_failed = sum(c.failed for c in warned_calls)
    return {
        "calls": len(calls),
        "failures": len(failures),
        "failures_caught": sum(d[0] != "allow" for d in failures),
        "repeats": len(repeats),
        "repeats_caught": sum(d[0] != "allow" for d in repeats),
        "repeats_blocked": sum(d[0] == "block" for d in repeats),
        "catch_rate": _share(sum(d[0] != "allow" for d in repeats), len(repeats)),
        "block_catch_rate": _share(sum(d[0] == "block" for d in repeats), len(repeats)),
        "blocks": len(blocked),
        "blocks_failed": really_failed,
        "block_precision": _share(really_failed, len(blocked)),
        "warned_calls": len(warned_calls),
        "warned_calls_failed": warned_failed,
        "warning_precision": _share(warned_failed, len(warned_calls)),
        "successful_runs": len(ok_runs),
        "successful_runs_wrongly_blocked": len(wrong_runs),
        "successful_runs_wrongly_blocked_share": _share(len(wrong_runs), len(ok_runs)),
        "successful_runs_any_block": len(any_block_runs),
        "successful_runs_any_block_share": _share(len(any_block_runs), len(ok_runs)),
        "calls_in_successful_runs": len(ok_calls),
        "warned_calls_in_successful_runs": warned,
        "warned_share_in_successful_runs": _share(warned, len(ok_calls)),
        "constraints_contradicted_on_held_out": len(contradicted),
    }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


HEADLINE = (
    "repeats",
    "catch_rate",
    "block_catch_rate",
    "block_precision",
    "blocks",
    "warning_precision",
    "successful_runs_wrongly_blocked_share",
    "warned_share_in_successful_runs",
)


def headline(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in HEADLINE}


def family_figures(calls: Sequence[Call], thresholds: Thresholds) -> dict[str, dict[str, Any]]:
    """Per family: the repeats its conditions flag and block, the failing calls it blocks,
    and its blocks and warnings on calls that did not fail (the family's strongest level
    on the call, whatever the decision); then the calls the memory warned on (decision
    ``warn``) with a condition of the family behind the warning: how many, how many
    failed, how many were in successful runs; and its block and warning precision."""
    out: dict[str, dict[str, Any]] = {}
    for family in FAMILIES:
        row: Counter[str] = Counter()
        for call in calls:
            levels = {thresholds.level(c) for c in call.check.holding if c.family == family}
            top = "block" if "block" in levels else "warn" if "warn" in levels else None
            if top is None:
                continue
            if call.repeat:
                row["repeats_flagged"] += 1
                row["repeats_blocked"] += top == "block"
            if call.failed:
                row["failures_blocked"] += top == "block"
            else:
                row[f"{top}s_on_ok_calls"] += 1
                row[f"{top}s_on_ok_calls_in_successful_runs"] += call.run_succeeded
            row.update(_warned(call, family, thresholds))
        blocks = row["failures_blocked"] + row["blocks_on_ok_calls"]
        out[family] = {
            **{k: row[k] for k in FAMILY_COUNTS},
            "block_precision": _share(row["failures_blocked"], blocks),
            "warning_precision": _share(row["warned_calls_failed"], row["warned_calls"]),
        }
    return out


def _warned(call: Call, family: str, thresholds: Thresholds) -> Counter[str]:
    """A call the memory warned on with a condition of ``family`` behind the warning, as
    counts; nothing for any other call."""
    decision, ids = decide(call.check.holding, thresholds, call.check.read_only)
    if decision != "warn" or family not in {c.family for c in call.check.holding
                                            if c.condition_id in ids}:  # fmt: skip
        return Counter()
    return Counter(
        warned_calls=1,
        warned_calls_failed=int(call.failed),
        warned_calls_in_successful_runs=int(call.run_succeeded),
    )


FAMILY_COUNTS = (
    "repeats_flagged",
    "repeats_blocked",
    "failures_blocked",
    "blocks_on_ok_calls",
    "warns_on_ok_calls",
    "blocks_on_ok_calls_in_successful_runs",
    "warns_on_ok_calls_in_successful_runs",
    "warned_calls",
    "warned_calls_failed",
    "warned_calls_in_successful_runs",
)
FAMILY_KEYS = (*FAMILY_COUNTS, "block_precision", "warning_precision")


def without_family(calls: Sequence[Call], family: str, thresholds: Thresholds) -> dict[str, Any]:
    decisions = [
        decide(
            [c for c in call.check.holding if c.family != family], thresholds, call.check.read_only
        )
        for call in calls
    ]
    return headline(metrics(calls, decisions))


def hint_figures(calls: Sequence[Call]) -> dict[str, Any]:
    """The lookup hints: for the tool about to be called, before its arguments exist,
    whether a condition may apply (any level; block level only)."""
    repeats = [c for c in calls if c.repeat]
    ok = [c for c in calls if c.run_succeeded and not c.failed]
    out: dict[str, Any] = {}
    for name, levels in (("any", ("warn", "block")), ("block_level", ("block",))):
        hinted_repeats = sum(c.hinted in levels for c in repeats)
        out[name] = {
            "repeats_hinted": hinted_repeats,
            "repeats_hinted_share": _share(hinted_repeats, len(repeats)),
            "ok_calls_in_successful_runs_hinted_share": _share(
                sum(c.hinted in levels for c in ok), len(ok)
            ),
        }
    return out


def misses(corpus: Corpus, calls: Sequence[Call]) -> list[dict[str, Any]]:
    """Real repeats by (domain, tool, signature): how many, how many flagged, blocked."""
    rows: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for call in calls:
        if call.repeat:
            run = corpus.runs[call.run]
            step = run.steps[call.step]
            row = rows[(run.domain, step.tool, signature_of(step.error or ""))]
            row["repeats"] += 1
            row["caught"] += call.check.decision != "allow"
            row["blocked"] += call.check.decision == "block"
    return [
        {"domain": domain, "tool": tool, "signature": sig,
         **{k: row[k] for k in ("repeats", "caught", "blocked")}}
        for (domain, tool, sig), row in sorted(rows.items(), key=lambda kv: -kv[1]["repeats"])
    ]  # fmt: skip


GOALS = {
    "block_precision": (">= 0.97", lambda v: v >= 0.97),
    "catch_rate": (">= 0.7", lambda v: v >= 0.7),
    "block_catch_rate": (">= 0.5", lambda v: v >= 0.5),
    "successful_runs_wrongly_blocked_share": ("<= 0.005", lambda v: v <= 0.005),
    "warned_share_in_successful_runs": ("<= 0.03", lambda v: v <= 0.03),
    "warning_precision": (">= 0.5", lambda v: v >= 0.5),
}
"""The targets every domain is held to, and the pooled figures too (issue 26: warned
calls in successful runs <= 3%, warning precision >= 0.5, successful runs wrongly
blocked <= 0.5%)."""
GOAL_NAMES = {
    "block_precision": "block precision",
    "catch_rate": "real repeats caught before the call (warn or block)",
    "block_catch_rate": "real repeats blocked before the call",
    "successful_runs_wrongly_blocked_share": "successful runs with a wrongly blocked call",
    "warned_share_in_successful_runs": "warned calls in successful runs",
    "warning_precision": "warning precision",
}


def met(key: str, value: Any) -> bool | None:
    """Whether a figure meets its goal; ``None`` when there is nothing to judge (no
    repeats, no blocks)."""
    return None if value is None else bool(GOALS[key][1](value))


def assess_targets(
    m: Mapping[str, Any],
    name: str = "call_memory",
    impossible: int | None = None,
    any_block: bool = False,
    note: str = "",
) -> list[dict[str, Any]]:
    out = [target(f"{name}: {GOAL_NAMES[k]}", goal, m[k], met(k, m[k]), note)
           for k, (goal, _) in GOALS.items()]  # fmt: skip
    if any_block:
        anyblock = m["successful_runs_any_block_share"]
        out.append(
            target(f"{name}: successful runs with any blocked call", "<= 0.005", anyblock,
                   None if anyblock is None else anyblock <= 0.005,
                   "includes blocks of calls that really failed in a run that then recovered")
        )  # fmt: skip
    if impossible is not None:
        out.append(
            target(f"{name}: successful runs made impossible by eviction", "= 0", impossible,
                   impossible == 0, "eviction after each pooled fold's training")
        )  # fmt: skip
    return out


def decisions_of(calls: Sequence[Call]) -> list[Decision]:
    return [(c.check.decision, c.check.constraints) for c in calls]


def by_domain(corpus: Corpus, calls: Sequence[Call], domain: str) -> list[Call]:
    return [c for c in calls if corpus.runs[c.run].domain == domain]


def unblocked(
    corpus: Corpus, calls: Sequence[Call], thresholds: Thresholds, top: int = 10
) -> list[dict[str, Any]]:
    """The most frequent real repeats not blocked, by (domain, tool, signature): how
    many, how many warned, and the reason lines the memory had for them (the strongest
    condition that held, with its level; or none held)."""
    rows: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    example: dict[str, str] = {}
    for call in calls:
        if not call.repeat or call.check.decision == "block":
            continue
        run = corpus.runs[call.run]
        step = run.steps[call.step]
        row = rows[(run.domain, step.tool, signature_of(step.error or ""))]
        row["not_blocked"] += 1
        row["warned"] += call.check.decision == "warn"
        line = reason_line(call.check.holding, thresholds)
        # the same condition with other counts is one reason: grouped without them
        key = _EVIDENCE.sub("", line)
        row[f"reason:{key}"] += 1
        example.setdefault(key, line)
    ranked = sorted(rows.items(), key=lambda kv: -kv[1]["not_blocked"])[:top]
    return [
        {"domain": domain, "tool": tool, "signature": sig, "not_blocked": row["not_blocked"],
         "warned": row["warned"],
         "reasons": [[example[k[7:]], n] for k, n in row.most_common()
                     if k.startswith("reason:")][:3]}
        for (domain, tool, sig), row in ranked
    ]  # fmt: skip


def wrongly_blocked(
    corpus: Corpus, calls: Sequence[Call], thresholds: Thresholds, top: int = 10
) -> list[dict[str, Any]]:
    """The calls that did not fail and were blocked, by (domain, tool, the blocking
    condition's reason without its counts): how many, how many in successful runs, and
    one reason line as written."""
    rows: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    example: dict[tuple[str, str, str], str] = {}
    for call in calls:
        if call.failed or call.check.decision != "block":
            continue
        run = corpus.runs[call.run]
        line = reason_line(call.check.holding, thresholds)
        key = (run.domain, run.steps[call.step].tool, _EVIDENCE.sub("", line))
        rows[key]["blocks"] += 1
        rows[key]["in_successful_runs"] += call.run_succeeded
        example.setdefault(key, line)
    ranked = sorted(rows.items(), key=lambda kv: -kv[1]["blocks"])[:top]
    return [
        {"domain": domain, "tool": tool, "blocks": row["blocks"],
         "in_successful_runs": row["in_successful_runs"], "reason": example[key]}
        for key, row in ranked
        for domain, tool, _ in [key]
    ]  # fmt: skip


def warned_by_rule(
    calls: Sequence[Call], thresholds: Thresholds, top: int = 10
) -> list[dict[str, Any]]:
    """The rules (learned conditions) behind the memory's warnings, those that warned on
    the most calls of successful runs first: each with its tool, family and one of its
    reason lines, the calls it warned on (decision ``warn``, the condition among those
    behind it), how many of them failed (its warning precision) and how many were in
    successful runs.  A call warned by two rules counts for each."""
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    found: dict[str, Any] = {}
    for call in calls:
        decision, ids = decide(call.check.holding, thresholds, call.check.read_only)
        if decision != "warn":
            continue
        for condition in call.check.holding:
            if condition.condition_id not in ids:
                continue
            row = rows[condition.condition_id]
            row["warned_calls"] += 1
            row["failed"] += call.failed
            row["in_successful_runs"] += call.run_succeeded
            found.setdefault(condition.condition_id, condition)
    ranked = sorted(rows.items(), key=lambda kv: (-kv[1]["in_successful_runs"],
                                                  -kv[1]["warned_calls"], kv[0]))  # fmt: skip
    return [
        {"condition_id": cid, "tool": found[cid].tool, "family": found[cid].family,
         "warned_calls": row["warned_calls"], "failed": row["failed"],
         "warning_precision": _share(row["failed"], row["warned_calls"]),
         "in_successful_runs": row["in_successful_runs"],
         "reason": reason_line([found[cid]], thresholds)}
        for cid, row in ranked[:top]
    ]  # fmt: skip


_EVIDENCE = re.compile(r" \(\d+ situations?, .*\)$")


def reason_line(holding: Sequence[Any], thresholds: Thresholds) -> str:
    """The strongest condition that held for a call, as a reason line with its level
    under ``thresholds`` ("below warn" when it held at neither)."""
    if not holding:
        return "no learned condition held"
    rank = {"block": 2, "warn": 1, None: 0}
    best = max(holding, key=lambda c: (rank[thresholds.level(c)], c.confidence))
    level = thresholds.level(best) or "below warn"
    return f"{level} [{best.family}]: {best.explanation}"
