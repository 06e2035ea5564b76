"""``bench_failures``'s result as Markdown and a plot: the pooled systems, each domain
(pooled folds and left out), the targets by domain, the same-situation ablation, then
the call memory's studies (folds, families, thresholds, learner variants, misses,
wrong blocks, its warnings by family and by rule, hints, timing) and every target."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.failure_metrics import FAMILY_KEYS, HEADLINE
from benchmarks.failure_risk import markdown_section as risk_section
from benchmarks.failure_warn_report import warnings_section
from benchmarks.harness.results import md_table, md_targets, pyplot, save_figure
from sidecar.memory import FAMILIES

SYSTEM_KEYS = (
    "repeats",
    "repeats_caught",
    "repeats_blocked",
    "blocks",
    "block_precision",
    "warned_calls",
    "warning_precision",
    "successful_runs",
    "successful_runs_wrongly_blocked",
    "successful_runs_any_block",
    "warned_share_in_successful_runs",
    "constraints_contradicted_on_held_out",
)
DOMAIN_KEYS = (
    "repeats",
    "catch_rate",
    "block_catch_rate",
    "blocks",
    "block_precision",
    "warned_calls",
    "warning_precision",
    "successful_runs",
    "successful_runs_wrongly_blocked",
    "warned_share_in_successful_runs",
)
FAMILY_DOMAIN_KEYS = (
    "repeats_flagged",
    "repeats_blocked",
    "blocks_on_ok_calls",
    "warns_on_ok_calls_in_successful_runs",
)


def cell(value: Any) -> Any:
    return "-" if value is None else value


def markdown(result: Mapping[str, Any]) -> str:
    params = result["params"]
    miss_rows = [
        [m["domain"], m["tool"], m["signature"], m["repeats"], m["caught"], m["blocked"]]
        for m in result["misses"]
    ]
    return "\n".join(
        [
            f"## Failure memory on {', '.join(params['domains'])} ({params['folds']} folds by "
            f"task, seeds {params['seeds']})",
            "",
            corpus_line(result["corpus"]),
            "",
            "### Pooled folds, every system",
            "",
            md_table(
                ["system", *SYSTEM_KEYS],
                [[n, *(cell(m[k]) for k in SYSTEM_KEYS)] for n, m in result["systems"].items()],
            ),
            "",
            *domain_section(result),
            *lodo_section(result),
            *targets_section(result),
            *situation_section(result),
            *folds_and_families_section(result),
            *sweeps_section(result),
            "### Real repeats by (domain, tool, signature), pooled folds",
            "",
            md_table(["domain", "tool", "signature", "repeats", "caught", "blocked"], miss_rows),
            "",
            *not_blocked_section(result),
            *wrongly_blocked_section(result),
            *warnings_section(result),
            *hints_section(result),
            *prequential_section(result),
            *risk_section(result),
            timing_line(result["timing"]),
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def folds_and_families_section(result: Mapping[str, Any]) -> list[str]:
    folds = [
        [r["seed"], r["fold"], *(cell(r[k]) for k in HEADLINE)]
        for r in result["per_fold"]["call_memory"]
    ]
    families = [[f, *(cell(v[k]) for k in FAMILY_KEYS)] for f, v in result["families"].items()]
    without = [[f, *(cell(x) for x in v.values())] for f, v in result["without_family"].items()]
    return [
        "### call_memory per (seed, fold), pooled folds",
        "",
        md_table(["seed", "fold", *HEADLINE], folds),
        "",
        "### Families (pooled folds, default thresholds)",
        "",
        md_table(["family", *FAMILY_KEYS], families),
        "",
        "Each family left out:",
        "",
        md_table(["left out", *HEADLINE], without),
        "",
        "Learned conditions per fold, by family and level (mean):",
        "",
        md_table(["family", "block", "warn", "kept, neither"], learned_rows(result)),
        "",
    ]


def sweeps_section(result: Mapping[str, Any]) -> list[str]:
    sweep = [
        [t["thresholds"]["min_support_block"], t["thresholds"]["max_contradictions_block"],
         t["thresholds"]["min_confidence_warn"], *(cell(t[k]) for k in HEADLINE[1:])]
        for t in result["threshold_sweep"]
    ]  # fmt: skip
    variants = [[n, *(cell(v[k]) for k in HEADLINE)] for n, v in result["learn_sweep"].items()]
    return [
        "### Threshold sweep (pooled folds)",
        "",
        md_table(["min support", "max contradictions", "min conf warn", *HEADLINE[1:]], sweep),
        "",
        "Learner variants (distinct values a bound-object field may show and still be a "
        "state; sessions acting on one object counted once or each; repeated runs of one "
        "task counted as independent):",
        "",
        md_table(["variant", *HEADLINE], variants),
        "",
    ]


def corpus_line(notes: Mapping[str, Any]) -> str:
    runs, ok = notes["runs_by_domain"], notes["successful_runs_by_domain"]
    failing = notes["failing_calls_by_domain"]
    parts = [
        f"{d}: {runs.get(d, 0)} runs ({ok.get(d, 0)} successful), {failing.get(d, 0)} failing calls"
        for d in notes["domains"]
    ]
    line = "Corpus: " + "; ".join(parts) + "."
    bfcl = notes.get("bfcl")
    if bfcl:
        kinds = {k.split(":", 1)[1]: v for k, v in bfcl.items() if k.startswith("mutation:")}
        line += (
            f" bfcl: {bfcl['scenarios']} scenarios ({bfcl['scenarios_reserved_dropped']} of "
            f"{bfcl['scenarios_in_category']} dropped for a reserved class), one ground-truth "
            f"run and up to {bfcl['runs_per_scenario']} mutation runs each (seed "
            f"{bfcl['seed']}): " + ", ".join(f"{k} {v}" for k, v in kinds.items()) + "."
        )
    shared = notes.get("tools_shared_across_domains") or {}
    if shared:
        line += (
            " Tools two domains share (one tool to the memory): "
            + ", ".join(f"`{t}` ({', '.join(d)})" for t, d in shared.items())
            + "."
        )
    return line


def _domain_row(label: Sequence[Any], m: Mapping[str, Any]) -> list[Any]:
    return [*label, *(cell(m[k]) for k in DOMAIN_KEYS)]


def domain_section(result: Mapping[str, Any]) -> list[str]:
    rows = []
    for domain, systems in result["per_domain"].items():
        impossible = result["eviction_by_domain"][domain]["made_impossible"]
        for name, m in systems.items():
            rows.append([*_domain_row((domain, name), m),
                         impossible if name == "sidecar" else ""])  # fmt: skip
    return [
        "### Per domain (pooled folds: each domain's held-out calls)",
        "",
        md_table(["domain", "system", *DOMAIN_KEYS, "made impossible"], rows),
        "",
    ]


def lodo_section(result: Mapping[str, Any]) -> list[str]:
    lodo = result["leave_one_domain_out"]
    if "systems" not in lodo:
        return ["### Leave one domain out", "", lodo["note"], ""]
    rows = []
    for name, figures in lodo["systems"].items():
        for domain, m in figures["by_domain"].items():
            rows.append(_domain_row((domain, name), m))
        rows.append(_domain_row(("every domain", name), figures["pooled"]))
    family_rows = [
        [domain, family, *(fam[family][k] for k in FAMILY_DOMAIN_KEYS)]
        for domain, fam in lodo["families"].items()
        for family in FAMILIES
        if any(fam[family][k] for k in FAMILY_DOMAIN_KEYS)
    ]
    return [
        "### Leave one domain out",
        "",
        f"Protocol: {lodo['protocol']}.",
        "",
        md_table(["held out", "system", *DOMAIN_KEYS], rows),
        "",
        "call_memory's families on each held-out domain (families that flagged nothing "
        "are left out):",
        "",
        md_table(["held out", "family", *FAMILY_DOMAIN_KEYS], family_rows),
        "",
    ]


def targets_section(result: Mapping[str, Any]) -> list[str]:
    from benchmarks.failure_metrics import GOAL_NAMES, GOALS, met

    lodo = result["leave_one_domain_out"]
    by_domain = result["eviction_by_domain"]
    total = result["eviction"]["made_impossible"]
    # (label, figures, successful runs made impossible by the pooled folds' eviction)
    columns: list[tuple[str, Mapping[str, Any], Any]] = [
        ("pooled folds", result["systems"]["call_memory"], total)
    ]
    if "systems" in lodo:
        mine = lodo["systems"]["call_memory"]
        columns += [(f"{d} left out", m, by_domain[d]["made_impossible"])
                    for d, m in mine["by_domain"].items()]  # fmt: skip
        columns.append(("every domain left out", mine["pooled"], total))
    else:
        columns += [(f"{d}, pooled folds", s["call_memory"], by_domain[d]["made_impossible"])
                    for d, s in result["per_domain"].items()]  # fmt: skip

    def mark(key: str, value: Any) -> str:
        verdict = met(key, value)
        text = f"{value:.3g}" if isinstance(value, float) else str(cell(value))
        return text if verdict in (None, True) else f"**{text}**"

    rows = [
        [GOAL_NAMES[k], goal, *(mark(k, m[k]) for _, m, _ in columns)]
        for k, (goal, _) in GOALS.items()
    ]
    rows.append(["successful runs made impossible by eviction", "= 0",
                 *(n if n == 0 else f"**{n}**" for _, _, n in columns)])  # fmt: skip
    return [
        "### Targets by domain (call_memory; bold: missed)",
        "",
        md_table(["target", "goal", *(label for label, _, _ in columns)], rows),
        "",
    ]


def situation_section(result: Mapping[str, Any]) -> list[str]:
    from benchmarks.failure_metrics import HEADLINE

    situation = result["same_situation"]
    head = ["### Same-situation ablation", ""]
    if not situation["available"]:
        return [*head, situation["note"] + ".", ""]
    rows = [
        [protocol, name, scope, *(cell(m[k]) for k in HEADLINE)]
        for protocol in ("pooled_folds", "leave_one_domain_out")
        for name, scopes in (situation.get(protocol) or {}).items()
        for scope, m in scopes.items()
    ]
    return [
        *head,
        f"`{situation['variant']}` counts repeated runs of one task as independent evidence; "
        "`call_memory` is the default learner.",
        "",
        md_table(["protocol", "learner", "calls of", *HEADLINE], rows),
        "",
    ]


def learned_rows(result: Mapping[str, Any]) -> list[list[Any]]:
    learned: dict[str, Counter[str]] = defaultdict(Counter)
    for row in result["learned"]:
        for family, levels in row["call_memory"]["by_family"].items():
            learned[family].update(levels)
    n_folds = len(result["learned"]) or 1
    return [
        [f, *(round(learned[f][k] / n_folds, 1) for k in ("block", "warn", "none"))]
        for f in FAMILIES
    ]


def miss_rows(rows: Sequence[Mapping[str, Any]], scope: str) -> list[list[Any]]:
    out = []
    for m in rows:
        reasons = "<br>".join(f"{n}x {text}" for text, n in m["reasons"])
        out.append([scope, m["domain"], m["tool"], m["signature"], m["not_blocked"],
                    m["warned"], reasons])  # fmt: skip
    return out


MISS_HEAD = ["calls of", "domain", "tool", "signature", "not blocked", "warned",
             "reason lines (the strongest condition that held; most frequent first)"]  # fmt: skip


def not_blocked_section(result: Mapping[str, Any]) -> list[str]:
    found = result.get("not_blocked") or {}
    rows = miss_rows(found.get("pooled_folds", []), "pooled folds")
    rows += miss_rows(found.get("leave_one_domain_out", []), "every domain left out")
    return [
        "### Real repeats not blocked, most frequent first, with their reason lines",
        "",
        md_table(MISS_HEAD, rows),
        "",
    ]


def wrongly_blocked_section(result: Mapping[str, Any]) -> list[str]:
    found = result.get("wrongly_blocked") or {}
    rows = [
        [scope, m["domain"], m["tool"], m["blocks"], m["in_successful_runs"], m["reason"]]
        for key, scope in (("pooled_folds", "pooled folds"),
                           ("leave_one_domain_out", "every domain left out"))
        for m in found.get(key, [])
    ]  # fmt: skip
    head = ["calls of", "domain", "tool", "blocks", "in successful runs", "reason line"]
    return [
        "### Calls that did not fail and were blocked, most frequent first",
        "",
        md_table(head, rows) if rows else "none",
        "",
    ]


PREQ_KEYS = (
    "repeats",
    "catch_rate",
    "block_catch_rate",
    "block_precision",
    "warning_precision",
    "successful_runs_wrongly_blocked_share",
    "warned_share_in_successful_runs",
)


FIRSTS_HEAD = (
    "stream",
    "sessions",
    "reported before",
    "first real repeat",
    "first correct block",
    "first wrong block",
    "library / memory disagreements (calls)",
    "seconds",
    "check p50 ms",
    "report p50 ms, first 50 runs",
    "last 50 runs",
)


def _stream_families(streams: Mapping[str, Any]) -> list[list[Any]]:
    """Each family's figures in the streams of one domain alone, and pooled."""
    return [
        [label, family, *(s["families"][family][k] for k in FAMILY_DOMAIN_KEYS)]
        for label, s in streams.items()
        if s["kind"] in ("alone", "pooled")
        for family in FAMILIES
        if any(s["families"][family][k] for k in FAMILY_DOMAIN_KEYS)
    ]


def prequential_section(result: Mapping[str, Any]) -> list[str]:
    preq = result.get("prequential") or {}
    head = ["### Learning as it happens (prequential)", ""]
    if "streams" not in preq:
        return [*head, preq.get("note", "not replayed"), ""]
    streams = preq["streams"]
    firsts = [
        [label, s["sessions"], s["prior_sessions"],
         ", ".join(str(cell(f["first_repeat"])) for f in s["firsts"]),
         ", ".join(str(cell(f["first_correct_block"])) for f in s["firsts"]),
         ", ".join(str(cell(f["first_wrong_block"])) for f in s["firsts"]),
         s["disagreements"], s["seconds"], cell(s["timing"]["check_ms_p50"]),
         cell(s["timing"]["report_ms_p50_first_50"]), cell(s["timing"]["report_ms_p50_last_50"])]
        for label, s in streams.items()
    ]  # fmt: skip
    curve = [
        [label, row["after"], *(cell(row["cumulative"][k]) for k in PREQ_KEYS),
         cell(row["window"]["catch_rate"]), cell(row["window"]["block_catch_rate"])]
        for label, s in streams.items()
        for row in s["curve"]
    ]  # fmt: skip
    misses = [row for label, s in streams.items() if s["kind"] in ("alone", "pooled")
              for row in miss_rows(s["misses"][:5], label)]  # fmt: skip
    return [
        *head,
        f"Protocol: {preq['protocol']}. Checked and reported through: `{preq['through']}`. "
        "Streams: each domain alone from an empty memory (seeded order), in time order where "
        "the runs have start times, after every other domain was reported, and every domain "
        "mixed.",
        "",
        "Firsts (position of the run in its stream, per seed; `-`: never):",
        "",
        md_table(FIRSTS_HEAD, firsts),
        "",
        "The learning curve: figures over the first N sessions of each stream (seeds pooled), "
        "and the catch and block rates over the sessions since the checkpoint before:",
        "",
        md_table(["stream", "after", *PREQ_KEYS, "window: caught", "window: blocked"], curve),
        "",
        "Families (each domain alone, and pooled):",
        "",
        md_table(["stream", "family", *FAMILY_DOMAIN_KEYS], _stream_families(streams)),
        "",
        "Real repeats not blocked, most frequent first (each domain alone, and pooled):",
        "",
        md_table(MISS_HEAD, misses),
        "",
    ]


def hints_section(result: Mapping[str, Any]) -> list[str]:
    hints = result["lookup_hints"]
    return [
        "Lookup hints (`may_apply` for the tool about to be called, before its arguments):",
        "",
        md_table(
            ["hint level", "repeats hinted", "share of repeats", "share of ok calls, ok runs"],
            [
                [
                    level,
                    h["repeats_hinted"],
                    cell(h["repeats_hinted_share"]),
                    cell(h["ok_calls_in_successful_runs_hinted_share"]),
                ]
                for level, h in hints.items()
            ],
        ),
        "",
    ]


def timing_line(timing: Mapping[str, Any]) -> str:
    synthetic = timing["synthetic"]
    sizes = [k for k in synthetic if k.isdigit()]
    checks = "; ".join(
        f"{synthetic['steps']} steps x {synthetic[k]['conditions']:,} conditions of "
        f"`{synthetic['tool']}`: {synthetic[k]['timings']['call_memory_incremental']['p50_ms']}"
        f" ms incremental, {synthetic[k]['timings']['call_memory_from_scratch']['p50_ms']} ms "
        f"from scratch ({synthetic[k]['incremental_vs_sequence_p50']}x / "
        f"{synthetic[k]['from_scratch_vs_sequence_p50']}x the sequence check)"
        for k in sizes
    )
    replay = timing["replay_check_ms"]["call_memory"]
    index = timing["index_step_ms"]
    learn = timing["learn_session_ms"]
    return (
        f"Check time: replay p50 {replay['p50_ms']} ms, p99 {replay['p99_ms']} ms "
        f"({timing['replay_call_memory_vs_sequence_p50']}x the sequence check at p50); "
        f"indexing each step into the run's trace as it completes: p50 {index['p50_ms']} ms, "
        f"p99 {index['p99_ms']} ms; {checks}. Taking in a session: p50 "
        f"{learn['call_memory']['p50_ms']} ms (sequence memory "
        f"{learn['sequence_memory']['p50_ms']} ms); deriving every condition after "
        f"training: p50 {timing['derive_all_conditions_ms']['p50_ms']} ms."
    )


def plot(result: Mapping[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    names = list(result["systems"])
    m = result["systems"]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.2
    series = (
        ("repeats caught", "catch_rate"),
        ("block precision", "block_precision"),
        ("warning precision", "warning_precision"),
        ("ok runs wrongly blocked", "successful_runs_wrongly_blocked_share"),
    )
    for i, (label, key) in enumerate(series):
        xs = [j + (i - 1.5) * width for j in range(len(names))]
        ax.bar(xs, [m[n][key] or 0.0 for n in names], width, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Failure memories on held-out runs ({', '.join(result['params']['domains'])})")
    ax.legend()
    return [save_figure(plt, fig, out_dir / "failures.png"), *learning_plot(plt, result, out_dir)]


def learning_plot(plt: Any, result: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """The learning curves: repeats caught and blocked, and warned calls in successful
    runs, over the first N sessions of each stream."""
    streams = (result.get("prequential") or {}).get("streams")
    if not streams:
        return []
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharex=True)
    panels = (
        ("real repeats caught", "catch_rate"),
        ("real repeats blocked", "block_catch_rate"),
        ("warned calls, successful runs", "warned_share_in_successful_runs"),
    )
    for ax, (title, key) in zip(axes, panels, strict=True):
        for label, s in streams.items():
            points = [(r["after"], r["cumulative"][key]) for r in s["curve"]
                      if r["cumulative"][key] is not None]  # fmt: skip
            if points:
                style = "--" if s["kind"] == "after_others" else "-"
                ax.plot(*zip(*points, strict=True), style, marker="o", label=label)
        ax.set_xscale("log")
        ax.set_title(title)
        ax.set_xlabel("sessions arrived")
    axes[0].legend(fontsize=7)
    fig.suptitle("Learning as it happens: figures over the first N sessions")
    return [save_figure(plt, fig, out_dir / "failures_learning.png")]
