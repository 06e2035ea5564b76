"""``sidecar demo``: the Tool Chain Sediment Fallacy on a plain index, then prevented.

Runs on the demo catalog shipped with the package (``sidecar/demo/catalog.jsonl``), in
a throw-away home unless one is given.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from sidecar.core import Sidecar
from sidecar.model import CheckResult, IntakeResult, LookupResult
from sidecar.tools.catalog import load_tools, read_documents

TASK = "extract product names and prices from a competitor's product page"
STEPS = (
    "find the competitor's web page with a web search",
    "parse the page HTML into clean text",
    "extract product names and prices from the page text",
)
BIG_PAGE = {"payload_bytes": 7_200_000}
SMALL_PAGE = {"payload_bytes": 180_000}
ABANDONED: dict[str, Any] = {
    "topology": ["web_search", "html_parser", "llm_extractor"],
    "outcome": "abandoned",
    "failure": {
        "signature": "llm_extractor: timeout after 30s on a 7.2 MB payload",
        "kind": None,
        "error": {"type": "Timeout", "payload_bytes": 7_200_000, "timeout_s": 30},
    },
    "constraint": {
        "rule": "IF html_parser output > 5 MB THEN llm_extractor times out",
        "when": [{"step": "html_parser", "field": "payload_bytes", "op": ">", "value": 5_000_000}],
        "gapped": False,
    },
    "logs": [
        "GET https://shop.example.invalid/catalog?api_key=demo-key-123 -> 200 (7.2 MB)",
        "llm_extractor: Authorization: Bearer sk-demo0000000000000000000000 timed out",
    ],
    "session_id": "demo-session-1",
}
COMPLETED = {"topology": ["web_search", "text_summarizer"], "outcome": "completed"}


def catalog_text() -> str:
    return resources.files("sidecar").joinpath("demo/catalog.jsonl").read_text(encoding="utf-8")


def demo_tools() -> list[Any]:
    return load_tools(read_documents(catalog_text(), "demo/catalog.jsonl"), "demo catalog")


def _compose(
    sc: Sidecar, context: dict[str, Any], say: Callable[[str], None]
) -> tuple[list[str], list[LookupResult]]:
    chain: list[str] = []
    results: list[LookupResult] = []
    for query in STEPS:
        result = sc.search(query, k=3, after=chain, context=context)
        results.append(result)
        top = result.hits[0]
        say(f"    lookup {query!r}")
        say(f"      -> {', '.join(h.tool_id for h in result.hits)}; takes {top.tool_id}")
        for w in result.withheld:
            say(f"      withheld {w.tool_id}: {w.rule} [{w.pointer}]")
        for warning in top.warnings:
            say(f"      warning on {top.tool_id}: {warning}")
        chain.append(top.tool_id)
    return chain, results


def run_demo(home: Path | None = None, as_json: bool = False) -> int:
    lines: list[str] = []
    say = lines.append if as_json else print
    with tempfile.TemporaryDirectory(prefix="sidecar-demo-") as scratch:
        where = home or Path(scratch) / "home"
        with Sidecar.open(home=where) as sc:
            tools = demo_tools()
            sc.add_tools(tools)
            say(f"Loaded {len(tools)} demo tools into the active index at {where}.")
            say(f"Task: {TASK} (the page is 7.2 MB).")
            say("")
            first, second = _fallacy(sc, say)
            archived = _report(sc, first, say)
            third, big_results = _prevention(sc, first, say)
            seq, pre = _plan_checks(sc, first, say)
            _audit(sc, archived, say)
            fallacy, prevented = second == first, third != first
            summary = {
                "home": str(where),
                "tools": len(tools),
                "plain_chain": first,
                "successor_on_plain_index": second,
                "fallacy_reproduced": fallacy,
                "archived": archived.to_dict(),
                "successor_with_sidecar": third,
                "prevented": prevented,
                "withheld": [w.to_dict() for r in big_results for w in r.withheld],
                "check_sequence": seq.to_dict(),
                "check_prefix": pre.to_dict(),
            }
    if as_json:
        print(json.dumps({"narrative": lines, **summary}))
    return 0 if fallacy and prevented else 1


def _fallacy(sc: Sidecar, say: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """Act 1: on a plain index a successor composes the chain that failed, again."""
    say("1. A plain index, no failure memory. The first agent composes its chain:")
    first, _ = _compose(sc, BIG_PAGE, say)
    say(f"    {' > '.join(first)}: llm_extractor times out on 7.2 MB; abandoned.")
    say("   A successor gets the same tools back and walks into the same wall:")
    second, _ = _compose(sc, BIG_PAGE, say)
    fallacy = second == first
    say(f"    {' > '.join(second)}: {'the same fatal chain' if fallacy else 'differs'}.")
    say("")
    return first, second


def _report(sc: Sidecar, first: list[str], say: Callable[[str], None]) -> IntakeResult:
    """Act 2: the abandoned chain is reported (and a completed one elsewhere)."""
    say("2. The first agent reports its abandoned chain to the sidecar:")
    # the report names what the first agent actually executed
    rule = ABANDONED["constraint"]
    report = {**ABANDONED, "topology": first}
    report["constraint"] = {**rule, "when": [{**rule["when"][0], "step": first[1]}]}
    archived = sc.report(report)
    say(f"    {archived.status}: {archived.pointer} ({archived.reason})")
    recorded = sc.report(COMPLETED)
    say(f"    web_search > text_summarizer completed elsewhere: {recorded.status}")
    say("")
    return archived


def _prevention(
    sc: Sidecar, first: list[str], say: Callable[[str], None]
) -> tuple[list[str], list[LookupResult]]:
    """Act 3: the successor is steered off the fatal chain; on a small page the same
    continuation is fine, and flagged."""
    say("3. The successor composes again, telling the sidecar what it executed:")
    third, big_results = _compose(sc, BIG_PAGE, say)
    verdict = "fatal sequence avoided" if third != first else "NOT avoided"
    say(f"    {' > '.join(third)}: {verdict}.")
    say("   On a small page the same continuation is fine, and flagged:")
    small = sc.search(STEPS[2], k=3, after=first[:2], context=SMALL_PAGE)
    say(f"      -> {', '.join(h.tool_id for h in small.hits)}")
    for w in small.hits[0].warnings:
        say(f"      warning on {small.hits[0].tool_id}: {w}")
    say("")
    return third, big_results


def _plan_checks(
    sc: Sidecar, first: list[str], say: Callable[[str], None]
) -> tuple[CheckResult, CheckResult]:
    """Act 4: the fatal plan checked in sequence mode (blocked on a big page) and in the
    seed's prefix mode."""
    say("4. Plan checks:")
    seq = sc.check(first, context=BIG_PAGE)
    say(f"    sequence mode, 7.2 MB: {'safe' if seq.safe else 'BLOCKED'}")
    for c in seq.collisions:
        say(f"      {c.reason}")
    pre = sc.check(first, mode="prefix")
    seed_says = pre.collisions[0].reason if pre.collisions else "safe"
    say(f"    prefix mode (the seed's check): {seed_says}")
    say("")
    return seq, pre


def _audit(sc: Sidecar, archived: IntakeResult, say: Callable[[str], None]) -> None:
    """Act 5: the archived record, secrets redacted, and the archive's digest."""
    say(f"5. Audit {archived.pointer}: the full record stays in cold storage.")
    assert archived.pointer is not None
    record = sc.audit(archived.pointer)
    say(f"    logs as archived (secrets redacted): {json.dumps(record['logs'])}")
    say(f"    archive digest: {sc.digest()}")
