"""Real tool catalogs and tool chains for the pollution benchmark, read from a dataset
folder (``../shared/datasets`` by default); nothing is downloaded or copied.

ToolBench (``toolbench/ToolBench_tooleval_gpt-3.5-turbo_CoT/G*_*.json``, 600 gpt-3.5 CoT
trajectories).  Parsing choices, each counted in :attr:`Corpus.notes`:

- catalog: every distinct function of every trajectory's ``available_tools`` except the
  ``Finish`` pseudo-tool, read by the library's own OpenAI-function parser (a function
  that recurs in several trajectories is defined identically every time in this data;
  were it not, the last definition in file order would win, as ``load_tools`` does);
- calls: the ``role: "tool"`` nodes of ``answer.answer_details``, depth first along
  ``next`` (every CoT node has at most one child, so this is the call order); the tool
  name is read from the start of the message (``{'name': '...'``), which the ~100
  character truncation never cuts; the arguments and the response usually are cut;
- ``Finish`` calls are not tools: they only give the outcome (the last one counts);
- a call to a name that is not in the trajectory's ``available_tools`` (ToolBench's
  ``invalid_hallucination_function_name`` and other invented names) is dropped: there is
  nothing to retrieve for it;
- consecutive calls of the same tool (retries with other arguments) are one step;
  non-consecutive repeats are kept, in order (the topology is the exact order);
- outcome: ``completed`` when the last ``Finish`` says ``give_answer`` with a non-empty
  final answer; ``abandoned`` otherwise: ``give_up_and_restart``, no ``Finish`` at all
  (ran out of steps), or an empty final answer;
- failure signature: what the trajectory shows: the reason, the number of steps and the
  visible part of the terminal call's ``"error"`` field when the truncation left one.

Seal-Tools (``seal-tools/``): the 4,076 tools of ``tool.jsonl`` and the ordered
``calling`` lists of ``dev``, ``test_in_domain`` and ``test_out_domain``; an ``API_call_k``
argument refers to an earlier call's output, so the list order is the execution order.
The data has no failures: :func:`seal_tools` designates a seeded share of the multi-step
chains as abandoned.  Tool names outside MCP's ``[A-Za-z0-9_.-]`` (one: a name with
spaces) get ``_`` for each offending character, in the catalog and in the chains alike.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from sidecar import Tool

TOOLBENCH_DIR = Path("toolbench/ToolBench_tooleval_gpt-3.5-turbo_CoT")
SEAL_DIR = Path("seal-tools")
SEAL_SPLITS = ("dev.jsonl", "test_in_domain.jsonl", "test_out_domain.jsonl")
FINISH = "Finish"

Outcome = Literal["abandoned", "completed"]

_CALL_NAME = re.compile(r"\{'name': '([^']*)'")
_RETURN_TYPE = re.compile(r"give_up_and_restart|give_answer")
_VISIBLE_ERROR = re.compile(r'"error": "([^"]*)')
_BAD_NAME_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")


@dataclass(frozen=True)
class Task:
    """One trajectory: a task, the ordered chain of tools its agent called, the outcome."""

    task_id: str
    query: str
    chain: tuple[str, ...]
    outcome: Outcome
    reason: str = ""
    """Why it counts as abandoned (empty for completed)."""
    signature: str = ""
    """The failure signature the trajectory shows (empty for completed)."""
    source: str = ""


@dataclass
class Corpus:
    name: str
    tools: list[Tool]
    tasks: list[Task]
    notes: Counter[str] = field(default_factory=Counter)


def missing_files(root: Path) -> list[str]:
    """What the pollution benchmark needs under ``root`` and cannot find."""
    out: list[str] = []
    if not any((root / TOOLBENCH_DIR).glob("G*_*.json")):
        out.append(str(TOOLBENCH_DIR / "G*_*.json"))
    out += [
        str(SEAL_DIR / f)
        for f in ("tool.jsonl", *SEAL_SPLITS)
        if not (root / SEAL_DIR / f).is_file()
    ]
    return out


def collapse_repeats(calls: Sequence[str]) -> tuple[str, ...]:
    """Consecutive calls of one tool are one step."""
    return tuple(t for i, t in enumerate(calls) if i == 0 or calls[i - 1] != t)


# ---- ToolBench -------------------------------------------------------------------------
def _tool_nodes(nodes: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    for node in nodes:
        if node.get("role") == "tool":
            yield str(node.get("message", ""))
        yield from _tool_nodes(node.get("next") or [])


def _final_answer_text(raw: str) -> str:
    try:
        decoded = json.loads(raw)
    except json.JSONDecodeError:
        match = re.search(r'"final_answer":\s*"(.*)', raw, re.S)
        return match.group(1).strip() if match else raw.strip()
    if isinstance(decoded, Mapping):
        return str(decoded.get("final_answer") or "").strip()
    return str(decoded).strip()


def _toolbench_task(
    task_id: str, item: Mapping[str, Any], source: str, notes: Counter[str]
) -> Task:
    available = {str(t.get("name")) for t in item.get("available_tools", [])}
    answer = item.get("answer") or {}
    calls: list[str] = []
    last_message = ""
    return_type: str | None = None
    for message in _tool_nodes(answer.get("answer_details") or []):
        match = _CALL_NAME.match(message)
        if match is None:
            notes["calls_without_a_readable_name"] += 1
            continue
        name = match.group(1)
        if name == FINISH:
            notes["finish_calls"] += 1
            found = _RETURN_TYPE.search(message)
            return_type = found.group(0) if found else "unreadable"
            continue
        if name not in available:
            notes["calls_to_names_outside_available_tools_dropped"] += 1
            continue
        calls.append(name)
        last_message = message
    chain = collapse_repeats(calls)
    notes["calls_kept"] += len(calls)
    notes["repeated_consecutive_calls_merged"] += len(calls) - len(chain)
    if len(set(chain)) < len(chain):
        notes["chains_with_non_consecutive_repeats"] += 1
    final_raw = str(answer.get("final_answer") or "")
    if return_type in (None, "unreadable") and final_raw:
        found = _RETURN_TYPE.search(final_raw)
        return_type = found.group(0) if found else return_type
    if return_type == "give_answer" and _final_answer_text(final_raw):
        return Task(task_id, str(item.get("query", "")), chain, "completed", source=source)
    if return_type == "give_up_and_restart":
        reason = "give_up_and_restart"
    elif return_type == "give_answer":
        reason = "empty final answer"
    else:
        reason = "no Finish call (ran out of steps)"
    return Task(
        task_id,
        str(item.get("query", "")),
        chain,
        "abandoned",
        reason,
        _signature(reason, chain, last_message),
        source,
    )


def _signature(reason: str, chain: Sequence[str], last_message: str) -> str:
    # the tool names are in the topology; kept out of the signature, they cannot sway
    # the classification (``dns`` in ``..._for_viewdns`` reads as a DNS failure)
    text = f"{reason} after {len(chain)} step(s)"
    visible = _VISIBLE_ERROR.search(last_message)
    if visible and visible.group(1).strip():
        text += f"; visible error: {visible.group(1).strip()}"
    return text


def toolbench(root: Path) -> Corpus:
    from sidecar.tools.catalog import load_tools

    folder = root / TOOLBENCH_DIR
    files = sorted(folder.glob("G*_*.json"))
    if not files:
        raise FileNotFoundError(f"no ToolBench trajectories (G*_*.json) under {folder}")
    notes: Counter[str] = Counter()
    definitions: list[Mapping[str, Any]] = []
    tasks: list[Task] = []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        for task_id, item in data.items():
            notes["trajectories"] += 1
            definitions += [d for d in item.get("available_tools", []) if d.get("name") != FINISH]
            tasks.append(_toolbench_task(str(task_id), item, path.name, notes))
    tools = load_tools(definitions, str(folder))
    notes["catalog_tools"] = len(tools)
    notes["function_definitions_read"] = len(definitions)
    for t in tasks:
        notes[f"outcome_{t.outcome}"] += 1
        if t.outcome == "abandoned":
            notes[f"abandoned_{t.reason}"] += 1
            notes["abandoned_with_2plus_steps"] += len(t.chain) >= 2
        else:
            notes["completed_with_2plus_steps"] += len(t.chain) >= 2
        notes["tasks_with_no_tool_call"] += not t.chain
    notes["distinct_task_ids"] = len({t.task_id for t in tasks})
    return Corpus("toolbench", tools, tasks, notes)


# ---- Seal-Tools ------------------------------------------------------------------------
def _seal_name(name: str) -> str:
    return _BAD_NAME_CHAR.sub("_", name)


_SEAL_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
}


def _seal_definition(row: Mapping[str, Any]) -> dict[str, Any]:
    params = row.get("parameters") or {}
    properties = {
        name: {
            "type": _SEAL_TYPES.get(str(spec.get("type", "str")), str(spec.get("type", "string"))),
            "description": str(spec.get("description", "")),
        }
        for name, spec in params.items()
    }
    return {
        "type": "function",
        "name": _seal_name(str(row["api_name"])),
        "description": str(row.get("api_description", "")),
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": list(row.get("required") or []),
        },
    }


def seal_tools(
    root: Path,
    seed: int,
    abandoned_share: float = 0.3,
    max_tasks: int | None = None,
    max_tools: int | None = None,
) -> Corpus:
    """Seal-Tools with a seeded ``abandoned_share`` of its multi-step chains designated
    abandoned (a synthetic deterministic failure at the terminal step).

    ``max_tasks`` / ``max_tools`` subsample (quick runs): a seeded sample of tasks, and a
    catalog holding every tool those tasks call plus seeded distractors up to
    ``max_tools``.
    """
    from sidecar.tools.catalog import load_tools

    folder = root / SEAL_DIR
    notes: Counter[str] = Counter()
    with (folder / "tool.jsonl").open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    notes["renamed_tools"] = sum(_seal_name(r["api_name"]) != r["api_name"] for r in rows)
    raw_tasks: list[tuple[str, str, tuple[str, ...]]] = []
    for split in SEAL_SPLITS:
        with (folder / split).open(encoding="utf-8") as lines:
            items = [json.loads(line) for line in lines]
        for item in items:
            calls = [_seal_name(str(c["api"])) for c in item.get("calling", [])]
            chain = collapse_repeats(calls)
            notes["repeated_consecutive_calls_merged"] += len(calls) - len(chain)
            raw_tasks.append((str(item["id"]), str(item["query"]), chain))
    notes["tasks_read"] = len(raw_tasks)
    rng = random.Random(f"seal-tools:{seed}")
    if max_tasks is not None and max_tasks < len(raw_tasks):
        raw_tasks = sorted(rng.sample(raw_tasks, max_tasks))
    multi = [t for t in raw_tasks if len(t[2]) >= 2]
    doomed = {t[0] for t in rng.sample(multi, round(len(multi) * abandoned_share))}
    tasks: list[Task] = []
    for task_id, query, chain in raw_tasks:
        if task_id in doomed:
            terminal = chain[-1]
            reason = "designated abandoned (synthetic)"
            signature = f"HTTP 422 Unprocessable Entity from {terminal} (synthetic designation)"
            tasks.append(Task(task_id, query, chain, "abandoned", reason, signature, "seal"))
        else:
            tasks.append(Task(task_id, query, chain, "completed", source="seal"))
    by_name = {_seal_name(r["api_name"]): r for r in rows}
    chosen = list(by_name)
    if max_tools is not None and max_tools < len(chosen):
        needed = {t for task in tasks for t in task.chain}
        others = sorted(set(chosen) - needed)
        extra = rng.sample(others, max(0, max_tools - len(needed)))
        chosen = sorted(needed | set(extra))
    tools = load_tools([_seal_definition(by_name[name]) for name in chosen], str(folder))
    notes["catalog_tools"] = len(tools)
    notes["tasks"] = len(tasks)
    notes["multi_step_tasks"] = len(multi)
    notes["designated_abandoned"] = len(doomed)
    notes["calls_to_unknown_tools"] = sum(t not in by_name for task in tasks for t in task.chain)
    return Corpus("seal_tools", tools, tasks, notes)
