"""API-Bank's dialogues as failure-memory sessions: the ``apibank`` domain of
``bench_failures``, read from ``benchmarks/data/apibank/`` (data derived from API-Bank,
Apache-2.0; what was taken and how: that folder's README).  Nothing is downloaded.

API-Bank's tools are small services behind a token check (``GetUserToken`` hands the
token, every account tool checks it) with state-dependent refusals (an alarm, reminder,
meeting or appointment that does not exist, a username already taken, an account just
deleted, a password just changed).  Its dialogues come with their ground-truth calls,
and every recorded call succeeded.  So, as for the ``bfcl`` domain:

- a *ground-truth run* is one dialogue's recorded calls with their recorded outputs,
  reward 1;
- a *mutation run* changes the ground truth in one seeded way that the service itself
  refuses (:data:`KINDS`), and ends, abandoned, with that refusal.  The refusal is
  simulated here from the behaviour of API-Bank's tools (:mod:`benchmarks.apibank_world`,
  written for this benchmark; none of API-Bank's code runs): the check that fails and
  the words of its message are API-Bank's.  Run ``r`` (``r < runs_per_dialogue``)
  takes the next kind in a round robin over the kinds the dialogue admits, from a
  seeded offset, and a candidate of that kind drawn by
  ``Random("apibank:<seed>:<dialogue>:<r>")``;
- what the agent had been told before a call is the user's turns before it (an
  inserted call belongs to the turn of the call before it);
- ``task`` is ``apibank/<dialogue id>``, ``agent`` ``ground_truth`` or
  ``mutation:<kind>``; the tools are API-Bank's descriptions of the tools the
  dialogues call.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.apibank_world import KINDS, Dialogue, Mutation, candidates
from benchmarks.mutation_runs import mutation_runs
from benchmarks.tau2 import Corpus, Run
from sidecar.memory import Step

DOMAIN = "apibank"
DATA = Path(__file__).parent / "data" / "apibank"
RUNS_PER_DIALOGUE = 1


def missing_files() -> list[str]:
    need = ("dialogues.jsonl", "world.json", "tools.json")
    return [str(DATA / n) for n in need if not (DATA / n).is_file()]


def dialogues(data: Path = DATA) -> list[Dialogue]:
    out = []
    with (data / "dialogues.jsonl").open() as lines:
        for line in lines:
            raw = json.loads(line)
            steps: list[Step] = []
            told: list[str] = []
            heard: list[str] = []
            for event in raw["events"]:
                if "user" in event:
                    heard.append(str(event["user"]))
                    continue
                error = event.get("exception")
                output = None if error else event.get("output")
                steps.append(Step(event["call"], dict(event["arguments"]), output, error))
                told.append("\n".join(heard))
            if steps:  # a dialogue with no call is no session
                out.append(Dialogue(raw["id"], tuple(steps), tuple(told)))
    return out


@dataclass(frozen=True)
class Built:
    run: Run
    dialogue: Dialogue
    mutation: Mutation | None = None


def build(seed: int = 0, runs: int = RUNS_PER_DIALOGUE, data: Path = DATA) -> list[Built]:
    """Every dialogue's ground-truth run and up to ``runs`` mutation runs."""
    world = json.loads((data / "world.json").read_text())
    out: list[Built] = []
    for dialogue in dialogues(data):
        task = f"{DOMAIN}/{dialogue.dialogue_id}"
        out.append(Built(Run(f"{task}#gt", DOMAIN, task, "ground_truth", 1.0, dialogue.steps,
                             dialogue.told), dialogue))  # fmt: skip
        found = candidates(dialogue, world, seed)
        key = f"apibank:{seed}:{dialogue.dialogue_id}"
        for run, mutation in mutation_runs(task, DOMAIN, found, KINDS, runs, key):
            out.append(Built(run, dialogue, mutation))
    return out


READS: frozenset[str] = frozenset({
    "Calculator", "Dictionary", "DocumentQA", "EmergencyKnowledge", "GetToday", "GetUserToken",
    "ImageCaption", "QueryAgenda", "QueryAlarm", "QueryBalance", "QueryHealthData",
    "QueryHistoryToday", "QueryMeeting", "QueryRegistration", "QueryReminder", "QueryScene",
    "QueryStock", "SearchEngine", "SpeechRecognition", "SymptomSearch", "ToolSearcher",
    "Translate", "Wiki",
})  # fmt: skip
"""The tools that only read (an MCP server would mark them ``readOnlyHint``): API-Bank's
descriptions do not say, so they are named here, by what each tool does (``GetUserToken``
hands out the token an account already has)."""


def tools(data: Path = DATA) -> list[Any]:
    """API-Bank's descriptions of the tools the dialogues call, as sidecar tools."""
    from sidecar import Tool

    described = json.loads((data / "tools.json").read_text())
    return [
        Tool(name, d["description"], "read" if name in READS else "write", {
            "type": "object", "properties": {
                p: {"type": "string", "description": str(v.get("description", ""))}
                for p, v in d["parameters"].items()}})
        for name, d in described.items()
    ]  # fmt: skip


def load(seed: int = 0, runs: int = RUNS_PER_DIALOGUE, data: Path = DATA) -> Corpus:
    built = build(seed, runs, data)
    notes: dict[str, Any] = {
        "dialogues": len({b.dialogue.dialogue_id for b in built}),
        "ground_truth_runs": sum(b.mutation is None for b in built),
        "mutation_runs": sum(b.mutation is not None for b in built),
        "calls": sum(len(b.run.steps) for b in built),
    }
    for kind, n in sorted(Counter(b.mutation.kind for b in built if b.mutation).items()):
        notes[f"mutation:{kind}"] = n
    return Corpus([b.run for b in built], notes, tools(data))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The apibank domain: counts and each run.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=RUNS_PER_DIALOGUE)
    args = parser.parse_args(argv)
    built = build(args.seed, args.runs)
    signatures = Counter(
        (s.tool, s.error) for b in built for s in b.run.steps if s.error is not None
    )
    print(json.dumps({"runs": len(built), "failing calls by (tool, error)": [
        [t, e, n] for (t, e), n in signatures.most_common()]}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
