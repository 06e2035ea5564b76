"""The three retrieval protocols of ``bench_retrieval``, read from the dataset folder.

Each protocol is a catalog (tool ids and the text the sidecar embeds for each, built by
the library's own parsers and :func:`sidecar.tools.records.embedding_text`), test queries
with their relevant tools, and training queries (what a sidecar would have seen before:
completed runs with their query and the tools they called), never the test queries.

- **StableToolBench pooled**: the 765 queries of
  ``toolbench/StableToolBench_solvable_queries/test_instruction/*.json``; the catalog is
  the union of their ``api_list``, keyed by tool and API name; each API becomes the
  function ToolBench's own function-calling data makes of it (name
  ``<api>_for_<tool>`` standardised as ToolBench does, description ``This is the
  subfunction for tool "<tool>" ... The description of this function is: "<api
  description>"``, its parameters); relevant: the query's ``relevant APIs``.  Training
  queries: five folds by query, each fold's lookups learning from the other four.
- **Seal-Tools in-domain**: ``test_in_domain.jsonl`` over the 4,076 tools of
  ``tool.jsonl``; relevant: the tools of ``calling`` (in call order); training:
  ``dev.jsonl`` (the same tools' other queries).
- **ToolBench completed trajectories**: the 600 gpt-3.5 CoT runs of
  ``ToolBench_tooleval_gpt-3.5-turbo_CoT`` over their 2,127 functions
  (:func:`benchmarks.datasets.toolbench`); the queries of the runs that completed with
  at least one call; relevant: the tools the run called, in order.  Training: five
  folds by query.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STB_DIR = Path("toolbench/StableToolBench_solvable_queries/test_instruction")
SEAL_DIR = Path("seal-tools")
FOLDS = 5


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    relevant: tuple[str, ...]
    """Relevant tool ids; in call order where the data has one."""
    fold: int = 0


@dataclass
class Protocol:
    name: str
    ids: list[str]
    texts: list[str]
    queries: list[Query]
    train: list[Query] = field(default_factory=list)
    """Training queries when they are a split of their own (else: the other folds)."""
    folds: int = 0
    """Cross-validation folds over ``queries`` (0: ``train`` is the training set)."""
    notes: dict[str, int] = field(default_factory=dict)
    tools: list[Any] = field(default_factory=list)
    """The catalog as the sidecar's tools (what ``tools add`` would load)."""

    def training(self, fold: int) -> list[Query]:
        """What lookups of ``fold`` may learn from."""
        if not self.folds:
            return self.train
        return [q for q in self.queries if q.fold != fold]


def missing_files(root: Path) -> list[str]:
    from benchmarks.datasets import TOOLBENCH_DIR

    out = [] if any((root / STB_DIR).glob("*.json")) else [str(STB_DIR / "*.json")]
    if not any((root / TOOLBENCH_DIR).glob("G*_*.json")):
        out.append(str(TOOLBENCH_DIR / "G*_*.json"))
    out += [
        str(SEAL_DIR / f)
        for f in ("tool.jsonl", "dev.jsonl", "test_in_domain.jsonl")
        if not (root / SEAL_DIR / f).is_file()
    ]
    return out


# ---- ToolBench's own names ---------------------------------------------------------------
_NOT_NAME = re.compile(r"[^\u4e00-\u9fa5a-zA-Z0-9_]")
_RESERVED = {"from", "class", "return", "false", "true", "id", "and"}


def standardize(name: str) -> str:
    """ToolBench's identifier of a tool or API name: other characters become ``_``, runs
    of ``_`` one, lower case, no ``_`` at either end, a leading digit prefixed
    ``get_``."""
    out = re.sub(r"_+", "_", _NOT_NAME.sub("_", name)).lower().strip("_")
    return f"get_{out}" if out[:1].isdigit() else out


def function_name(tool: str, api: str) -> str:
    api_part = standardize(api)
    if api_part in _RESERVED:
        api_part = f"is_{api_part}"
    return f"{api_part}_for_{standardize(tool)}"[:64]


def _stb_function(api: Mapping[str, Any], name: str) -> dict[str, Any]:
    tool = standardize(str(api.get("tool_name", "")))
    params = [*(api.get("required_parameters") or []), *(api.get("optional_parameters") or [])]
    return {
        "type": "function",
        "name": name,
        "description": (
            f'This is the subfunction for tool "{tool}", you can use this tool.'
            f'The description of this function is: "{api.get("api_description") or ""}"'
        ),
        "parameters": {
            "type": "object",
            "properties": {
                str(p["name"]): {"type": "string", "description": str(p.get("description", ""))}
                for p in params
                if isinstance(p, Mapping) and p.get("name")
            },
        },
    }


def stabletoolbench(root: Path) -> Protocol:
    from sidecar.tools.catalog import load_tools
    from sidecar.tools.records import embedding_text

    files = sorted((root / STB_DIR).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no StableToolBench queries under {root / STB_DIR}")
    names: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    definitions: list[dict[str, Any]] = []
    queries: list[Query] = []
    for path in files:
        for item in json.loads(path.read_text(encoding="utf-8")):
            for api in item["api_list"]:
                key = (str(api["tool_name"]), str(api["api_name"]))
                if key in names:
                    continue
                name = function_name(*key)
                base, n = name, 2
                while name in taken:  # two names that standardise alike
                    name, n = f"{base[:60]}_{n}", n + 1
                taken.add(name)
                names[key] = name
                definitions.append(_stb_function(api, name))
            relevant = tuple(
                dict.fromkeys(names[(str(t), str(a))] for t, a in item["relevant APIs"])
            )
            queries.append(Query(f"{path.stem}:{item['query_id']}", str(item["query"]), relevant))
    tools = load_tools(definitions, str(root / STB_DIR))
    return Protocol(
        "stabletoolbench",
        [t.tool_id for t in tools],
        [embedding_text(t) for t in tools],
        _folded(queries, "stabletoolbench"),
        folds=FOLDS,
        notes={"apis": len(tools), "queries": len(queries)},
        tools=tools,
    )


def seal_tools(root: Path) -> Protocol:
    from benchmarks.datasets import _seal_definition, _seal_name
    from sidecar.tools.catalog import load_tools
    from sidecar.tools.records import embedding_text

    folder = root / SEAL_DIR
    rows = [json.loads(line) for line in (folder / "tool.jsonl").read_text("utf-8").splitlines()]
    tools = load_tools([_seal_definition(r) for r in rows], str(folder))
    known = {t.tool_id for t in tools}

    def split(name: str) -> list[Query]:
        out = []
        for line in (folder / name).read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            calls = [_seal_name(str(c["api"])) for c in item.get("calling", [])]
            relevant = tuple(dict.fromkeys(c for c in calls if c in known))
            if relevant:
                out.append(Query(str(item["id"]), str(item["query"]), relevant))
        return out

    test, train = split("test_in_domain.jsonl"), split("dev.jsonl")
    return Protocol(
        "seal_tools",
        [t.tool_id for t in tools],
        [embedding_text(t) for t in tools],
        test,
        train=train,
        notes={"tools": len(tools), "queries": len(test), "training_queries": len(train)},
        tools=tools,
    )


def toolbench_completed(root: Path) -> Protocol:
    from benchmarks.datasets import toolbench
    from sidecar.tools.records import embedding_text

    corpus = toolbench(root)
    queries = [
        Query(f"{t.source}:{t.task_id}", t.query, tuple(dict.fromkeys(t.chain)))
        for t in corpus.tasks
        if t.outcome == "completed" and t.chain and t.query.strip()
    ]
    return Protocol(
        "toolbench_completed",
        [t.tool_id for t in corpus.tools],
        [embedding_text(t) for t in corpus.tools],
        _folded(queries, "toolbench"),
        folds=FOLDS,
        notes={"tools": len(corpus.tools), "queries": len(queries)},
        tools=corpus.tools,
    )


def _folded(queries: Sequence[Query], salt: str) -> list[Query]:
    order = list(range(len(queries)))
    random.Random(f"folds:{salt}").shuffle(order)
    fold = {i: n % FOLDS for n, i in enumerate(order)}
    return [Query(q.qid, q.text, q.relevant, fold[i]) for i, q in enumerate(queries)]


def sample(protocol: Protocol, n: int | None, seed: int) -> list[Query]:
    """A seeded sample of ``n`` test queries (all when ``n`` is ``None``), in data order."""
    if n is None or n >= len(protocol.queries):
        return list(protocol.queries)
    chosen = set(random.Random(f"{protocol.name}:{seed}").sample(range(len(protocol.queries)), n))
    return [q for i, q in enumerate(protocol.queries) if i in chosen]
