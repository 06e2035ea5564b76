"""How much ordinary text does the redaction change, and how much of that do the shapes
of :mod:`sidecar.trust.secretshapes` (connection strings, password flags, login failures)
change?  Every string of real agent data (tau2-bench trajectories' arguments, outputs and
errors; ToolBench's CoT trajectories; Seal-Tools' catalog) is redacted; none is meant to
hold a secret, so a changed string is a false positive or a real secret in the data
(the examples say which).  The cost of the shapes is the time of the redaction with them
against the same redaction without them, on the same strings, in the same run.

    python -m benchmarks.bench_redact [--dataset ../shared/datasets] [--out FILE]
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import dataset_main

SOURCES = {
    "tau2 trajectories": "tau2-trajectories/trajectories_flat.jsonl",
    "ToolBench CoT trajectories": "toolbench/ToolBench_tooleval_gpt-3.5-turbo_CoT",
    "Seal-Tools catalog": "seal-tools/tool.jsonl",
}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def texts(dataset: Path) -> dict[str, list[str]]:
    """Every distinct string of each source."""
    out: dict[str, list[str]] = {}
    tau2 = dataset / SOURCES["tau2 trajectories"]
    calls = [c for line in tau2.read_text().splitlines() for c in json.loads(line)["calls"]]
    out["tau2 trajectories"] = [
        s for c in calls for part in (c.get("args"), c.get("output")) for s in _strings(part)
    ]
    folder = dataset / SOURCES["ToolBench CoT trajectories"]
    out["ToolBench CoT trajectories"] = [
        s for f in sorted(folder.glob("*.json")) for s in _strings(json.loads(f.read_text()))
    ]
    seal = dataset / SOURCES["Seal-Tools catalog"]
    out["Seal-Tools catalog"] = [
        s for line in seal.read_text().splitlines() for s in _strings(json.loads(line))
    ]
    return {name: list(dict.fromkeys(found)) for name, found in out.items()}


def _apply(rules: Sequence[Any], text: str) -> str:
    """:func:`sidecar.trust.redact.redact_text`'s loop over ``rules`` (the same shortcuts)."""
    from sidecar.trust.redact import apply_rule

    lowered = text.lower()
    for rule in rules:
        if len(text) >= rule.least and (not rule.needs or any(n in lowered for n in rule.needs)):
            text = apply_rule(rule, text)
    return text


def run(quick: bool, seed: int, dataset: Path) -> dict[str, Any]:
    from sidecar.trust.redact import RULES, redact_text
    from sidecar.trust.secretshapes import SHAPES

    del seed  # nothing is sampled
    shape_names = {s.name for s in SHAPES}
    shapes = [r for r in RULES if r.name in shape_names]
    without = [r for r in RULES if r.name not in shape_names]
    sources = texts(dataset)
    result: dict[str, Any] = {"question": __doc__.split("\n\n")[0], "sources": {}}
    every: list[str] = []
    for name, found in sources.items():
        if quick:
            found = found[:5_000]
        every += found
        changed = [t for t in found if redact_text(t) != t]
        by_shape: Counter[str] = Counter()
        examples: list[str] = []
        for text in found:
            for rule in shapes:
                if _apply([rule], text) != text:
                    by_shape[rule.name] += 1
                    if len(examples) < 5:
                        examples.append(text[:160])
        result["sources"][name] = {
            "strings": len(found),
            "changed by the redaction": len(changed),
            "changed by the shapes": dict(by_shape),
            "examples changed by the shapes": examples,
        }
    timings: dict[str, list[float]] = {"with the shapes": [], "without": []}
    for _ in range(3):
        for label, rules in (("with the shapes", RULES), ("without", without)):
            start = time.perf_counter()
            for text in every:
                _apply(rules, text)
            timings[label].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in timings.items()}
    result["strings"] = len(every)
    result["seconds (best of 3)"] = best
    result["cost of the shapes (ratio)"] = round(best["with the shapes"] / best["without"], 3)
    return result


def main(argv: list[str] | None = None) -> None:
    dataset_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
