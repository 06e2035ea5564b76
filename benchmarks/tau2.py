"""Real τ²-bench agent runs (retail, telecom) as failure-memory sessions, read from
``tau2-trajectories/`` in a dataset folder; nothing is downloaded.

- ``trajectories_flat.jsonl``: one run per line, its ordered calls with arguments,
  outputs and error flags, its task, agent and reward;
- ``trajectories/*.json``: the original result files, read only for what the agent was
  told before each call: the user turns before it (default mode) or the task's ticket
  (solo mode, where there is no user).

Choices, each counted in :attr:`Corpus.notes`:

- only the agent's calls are session steps (``requestor == "assistant"``); in default
  telecom runs the simulated user operates the phone through its own tools, whose
  results reach the agent only through the user's words;
- an erroring call's output is its error text and it has no output;
- a run's outcome is ``completed`` when its reward is 1, else ``abandoned``;
- a task is ``(domain, task_id)``: the retail tasks of the gpt-4.1 and fine-tuned
  files are also in the ToolOrchestra file, so most retail tasks have three runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sidecar.memory import Session, Step

TAU2_DIR = Path("tau2-trajectories")
FLAT = TAU2_DIR / "trajectories_flat.jsonl"


@dataclass(frozen=True)
class Run:
    run_id: str
    domain: str
    task: str
    """``domain/task_id``: the unit a split keeps on one side."""
    agent: str
    reward: float
    steps: tuple[Step, ...]
    told_before: tuple[str, ...]
    """What the agent had been told before each step (user turns, or the ticket)."""
    started: str | None = None
    """When the run started (ISO 8601), where the data says: the order of arrival of a
    prequential replay in time order."""

    @property
    def succeeded(self) -> bool:
        return self.reward >= 1.0

    def session(self) -> Session:
        return Session(
            session_id=self.run_id,
            steps=self.steps,
            outcome="completed" if self.succeeded else "abandoned",
            task_input=self.told_before[-1] if self.told_before else None,
        )


@dataclass
class Corpus:
    runs: list[Run]
    notes: dict[str, int] = field(default_factory=dict)
    tools: list[Any] = field(default_factory=list)
    """The agent's tools (:class:`sidecar.Tool`), from ``tools/tool_definitions.json``."""


def missing_files(dataset: Path) -> list[str]:
    return [] if (dataset / FLAT).is_file() else [str(FLAT)]


def load(dataset: Path) -> Corpus:
    notes = {"runs": 0, "agent_calls": 0, "user_calls_dropped": 0, "error_calls": 0}
    told = _told_texts(dataset / TAU2_DIR / "trajectories")
    runs: list[Run] = []
    with (dataset / FLAT).open() as lines:
        for n, line in enumerate(lines):
            raw = json.loads(line)
            steps: list[Step] = []
            before: list[str] = []
            texts = told.get(raw["sim_id"], ([], "", None))
            for call in raw["calls"]:
                if call["requestor"] != "assistant":
                    notes["user_calls_dropped"] += 1
                    continue
                output = call["output"]
                error = output if call["error"] else None
                if error is not None and not isinstance(error, str):
                    error = json.dumps(error)
                steps.append(
                    Step(call["name"], call["args"] or {}, None if error else output, error)
                )
                before.append(_text_before(texts, call["msg_idx"]))
                notes["error_calls"] += error is not None
            notes["agent_calls"] += len(steps)
            runs.append(
                Run(
                    run_id=f"{n}:{raw['sim_id']}",
                    domain=raw["domain"],
                    task=f"{raw['domain']}/{raw['task_id']}",
                    agent=raw["agent_model"],
                    reward=float(raw["reward"] or 0.0),
                    steps=tuple(steps),
                    told_before=tuple(before),
                    started=texts[2],
                )
            )
    notes["runs"] = len(runs)
    return Corpus(runs, notes, _tools(dataset / TAU2_DIR / "tools" / "tool_definitions.json"))


def _tools(path: Path) -> list[Any]:
    """The agent-side tool definitions (OpenAI function tools), when the file is there."""
    from sidecar.tools.catalog import load_tools

    if not path.is_file():
        return []
    defs = [d for d in json.loads(path.read_text()) if d.get("requestor") == "assistant"]
    tools = load_tools([[{"type": "function", "function": d["function"]} for d in defs]], str(path))
    # τ² marks each tool READ, WRITE, GENERIC or THINK: the type a catalog line carries
    types = {d["function"]["name"]: str(d.get("tool_type") or "unspecified").lower() for d in defs}
    return [replace(t, tool_type=types.get(t.tool_id, "unspecified")) for t in tools]


Told = tuple[list[tuple[int, str]], str, str | None]


def _told_texts(folder: Path) -> dict[str, Told]:
    """sim id -> (user turns as (message index, text), the task ticket, the start time)."""
    out: dict[str, Told] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        tickets = {str(t.get("id")): str(t.get("ticket") or "") for t in data.get("tasks", [])}
        solo = "solo" in path.name
        for sim in data.get("simulations", []):
            turns = [
                (i, str(m.get("content")))
                for i, m in enumerate(sim.get("messages", []))
                if m.get("role") == "user" and m.get("content")
            ]
            ticket = tickets.get(str(sim.get("task_id")), "") if solo else ""
            start = sim.get("start_time")
            out[str(sim.get("id"))] = (turns, ticket, str(start) if start else None)
    return out


def _text_before(texts: Told, msg_idx: Any) -> str:
    turns, ticket, _ = texts
    limit = msg_idx if isinstance(msg_idx, int) else 0
    parts = [ticket] if ticket else []
    parts += [text for i, text in turns if i < limit]
    return "\n".join(parts)


# ---- the runs as sidecar input ------------------------------------------------------------
def report_line(run: Run) -> dict[str, Any]:
    """A run as the session report the sidecar takes (``sidecar report``)."""
    session = run.session()
    return {
        "steps": [s.to_dict() for s in session.steps],
        "outcome": session.outcome,
        "task_input": session.task_input,
        "session_id": run.run_id,
    }


def tool_lines(corpus: Corpus) -> list[dict[str, Any]]:
    """The agent's tools as sidecar tool records, one per name (``sidecar tools add``
    reads them as JSON lines); a tool both domains define is kept once."""
    seen: dict[str, dict[str, Any]] = {}
    for tool in corpus.tools:
        seen.setdefault(tool.tool_id, tool.to_dict())
    return list(seen.values())


def steps_file(run: Run, until: str) -> dict[str, Any] | None:
    """The steps of ``run`` before its first call of ``until``, and that call as ``next``:
    the body ``sidecar check --steps`` and ``POST /v1/check`` take as they stand.
    ``what_happened`` says what the call really did (the check never reads it)."""
    tools = [s.tool for s in run.steps]
    if until not in tools:
        return None
    j = tools.index(until)
    call = run.steps[j]
    return {
        "steps": [s.to_dict() for s in run.steps[:j]],
        "task_input": run.told_before[j],
        "next": {"tool": call.tool, "arguments": dict(call.arguments)},
        "what_happened": call.error or "succeeded",
    }


DESCRIPTION = """\
The τ²-bench agent runs of a dataset folder as sidecar input, for the README's worked
example: the agents' tools, every run as a session report, or one run's steps before a
call (with that call as `next`).  Reads DATASET/tau2-trajectories/; downloads nothing.

  python -m benchmarks.tau2 tools --out tau2-tools.jsonl
  python -m benchmarks.tau2 reports --except-task retail/86 --out reports.jsonl
  python -m benchmarks.tau2 steps --task retail/86 --agent ft \\
      --until exchange_delivered_order_items --out steps.json
"""


def parser() -> Any:
    import argparse

    from benchmarks.common import DEFAULT_DATASETS

    p = argparse.ArgumentParser(
        prog="python -m benchmarks.tau2",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "what",
        choices=["tools", "reports", "steps"],
        help="tools: the agents' tools, one JSON line each (for `sidecar tools add`); "
        "reports: every run as a session report, one JSON line each (for `sidecar report`); "
        "steps: one run's calls before --until and that call as `next` (for `sidecar check "
        "--steps` and POST /v1/check)",
    )
    p.add_argument(
        "--dataset",
        type=Path,
        default=DEFAULT_DATASETS,
        help=f"the folder holding tau2-trajectories/ (default {DEFAULT_DATASETS})",
    )
    p.add_argument(
        "--out", type=Path, default=None, metavar="FILE", help="write here (default: stdout)"
    )
    p.add_argument(
        "--except-task",
        default=None,
        metavar="DOMAIN/ID",
        help="reports: leave out this task's runs (the held-out task), e.g. retail/86",
    )
    p.add_argument(
        "--task", default=None, metavar="DOMAIN/ID", help="steps: the task, e.g. retail/86"
    )
    p.add_argument(
        "--agent",
        default="",
        help="steps: a part of the agent's model name (default: any); the first matching "
        "run is taken",
    )
    p.add_argument(
        "--until",
        default=None,
        metavar="TOOL",
        help="steps: the run's first call of this tool becomes `next`",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.tau2 tools|reports|steps``: see :data:`DESCRIPTION`."""
    import sys

    p = parser()
    args = p.parse_args(argv)
    if args.what == "steps" and (args.task is None or args.until is None):
        p.error("steps needs --task DOMAIN/ID and --until TOOL")
    if missing_files(args.dataset):
        p.error(f"no {FLAT} under {args.dataset} (give the dataset folder with --dataset)")
    corpus = load(args.dataset)
    if args.what == "steps":
        found = next(
            (
                body
                for run in corpus.runs
                if run.task == args.task and args.agent in run.agent
                if (body := steps_file(run, args.until)) is not None
            ),
            None,
        )
        if found is None:
            agent = args.agent or "any agent"
            print(f"no run of {args.task} by {agent} calls {args.until}", file=sys.stderr)
            return 1
        text = json.dumps(found, indent=1) + "\n"
        what = f"{len(found['steps'])} step(s) and the next call ({args.until})"
    else:
        if args.what == "tools":
            lines = tool_lines(corpus)
        else:
            lines = [report_line(run) for run in corpus.runs if run.task != args.except_task]
        text = "".join(json.dumps(line) + "\n" for line in lines)
        what = f"{len(lines)} {args.what[:-1]}(s)"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {what} to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
