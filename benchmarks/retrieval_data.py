"""The three retrieval protocols of ``bench_retrieval``, read from the dataset folder.

Each protocol is a catalog (tool ids and the text the sidecar embeds for each, built by
the library's own parsers, :func:`sidecar.tools.records.embedding_text` and
:func:`sidecar.tools.records.lexical_text`), test queries
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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STB_DIR = Path("toolbench/StableToolBench_solvable_queries/test_instruction")
SEAL_DIR = Path("seal-tools")
APIBENCH_DIR = Path("apibench")
APIBENCH_HUBS = ("torchhub", "tensorflow", "huggingface")
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
    lexical: list[str] = field(default_factory=list)
    """The text BM25 indexes for each tool (:func:`sidecar.tools.records.lexical_text`)."""

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
    out += [
        str(APIBENCH_DIR / f"{hub}_eval.json")
        for hub in APIBENCH_HUBS
        if not (root / APIBENCH_DIR / f"{hub}_eval.json").is_file()
    ]
    if not (root / APIBENCH_DIR / "torchhub_train.json").is_file():
        out.append(str(APIBENCH_DIR / "torchhub_train.json"))
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
    from sidecar.tools.records import embedding_text, lexical_text

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
        lexical=[lexical_text(t) for t in tools],
    )


def seal_tools(root: Path) -> Protocol:
    from benchmarks.datasets import _seal_definition, _seal_name
    from sidecar.tools.catalog import load_tools
    from sidecar.tools.records import embedding_text, lexical_text

    folder = root / SEAL_DIR
    lines = (folder / "tool.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    tools = load_tools([_seal_definition(r) for r in rows], str(folder))
    known = {t.tool_id for t in tools}

    def split(name: str) -> list[Query]:
        out = []
        for line in (folder / name).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
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
        lexical=[lexical_text(t) for t in tools],
    )


def toolbench_completed(root: Path) -> Protocol:
    from benchmarks.datasets import toolbench
    from sidecar.tools.records import embedding_text, lexical_text

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
        lexical=[lexical_text(t) for t in corpus.tools],
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


# ---- APIBench --------------------------------------------------------------------------
_INSTRUCTION = re.compile(r"Instruction'?:\s*(.*?)(?:,\s*'Output'|\n\s*###\s*Output)", re.S)
_QUOTED = re.compile(r"""['"]([^'"]+)['"]""")


def instruction(code: str) -> str:
    """The user's request inside an APIBench ``code`` field (the text after
    ``Instruction:``, up to the ``Output``), unquoted."""
    found = _INSTRUCTION.search(code)
    text = found.group(1) if found else code
    return text.strip().strip("\"'").strip()


def _api_call(data: Mapping[str, Any]) -> str:
    return "call:" + re.sub(r"\s+", "", str(data.get("api_call") or data.get("api_name") or ""))


def _api_text(data: Mapping[str, Any]) -> str:
    return "text:" + json.dumps(
        [str(data.get(k) or "") for k in ("api_name", "functionality", "description")]
    )


def _api_groups(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each call and each description (name, functionality, description) of ``rows``,
    mapped to the API it belongs to: calls described alike are one API (no lookup can
    tell them apart), and so are the several descriptions of one call."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for row in rows:
        a, b = root(_api_call(row["api_data"])), root(_api_text(row["api_data"]))
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {key: root(key) for key in list(parent)}


def _api_parameters(arguments: Any) -> dict[str, dict[str, str]]:
    """An API's ``api_arguments`` as parameters: a mapping's keys (each value as its
    description), a list's names (``name=value`` items by their name), or one string."""
    if isinstance(arguments, Mapping):
        return {str(k): {"type": "string", "description": str(v)} for k, v in arguments.items()}
    items = arguments if isinstance(arguments, list) else [arguments] if arguments else []
    out: dict[str, dict[str, str]] = {}
    for item in items:
        name = str(item).split("=", 1)[0].strip().strip("\"'")
        if name:
            out[_BAD_ID.sub("_", name)[:64]] = {"type": "string", "description": str(item)}
    return out


_BAD_ID = re.compile(r"[^A-Za-z0-9_.\-]+")


def _api_function(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    functionality = str(data.get("functionality") or "")
    description = str(data.get("description") or "")
    return {
        "type": "function",
        "name": name,
        "description": f"{functionality}. {description}".strip(". ") or name,
        "parameters": {"type": "object", "properties": _api_parameters(data.get("api_arguments"))},
    }


def _api_name(data: Mapping[str, Any], taken: set[str]) -> str:
    """A tool id for an API: its name, else the model its call loads, made unique."""
    base = _BAD_ID.sub("_", str(data.get("api_name") or "")).strip("_.-")[:100]
    if not base or base in taken:
        quoted = _QUOTED.findall(str(data.get("api_call") or ""))
        model = _BAD_ID.sub("_", quoted[-1] if quoted else "").strip("_.-")[:60]
        base = f"{base}_{model}".strip("_") if model else base or "api"
    name, n = base, 2
    while name in taken:
        name, n = f"{base[:120]}_{n}", n + 1
    taken.add(name)
    return name


def apibench(root: Path, hub: str = "torchhub") -> Protocol:
    """APIBench's ``hub``: the catalog is its distinct APIs (:func:`_api_groups`), each
    described by the ``api_data`` (name, functionality, description, arguments) that
    most of its rows give it (the first of them on a tie); each instruction is a
    single-tool request for the API that served it.  ``torchhub`` has a training file of
    its own (its usage); the other hubs are split in five folds by instruction."""
    from sidecar.tools.catalog import load_tools
    from sidecar.tools.records import embedding_text, lexical_text

    folder = root / APIBENCH_DIR
    splits: dict[str, list[Mapping[str, Any]]] = {}
    for split in ("train", "eval"):
        path = folder / f"{hub}_{split}.json"
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            splits[split] = [json.loads(line) for line in text.splitlines() if line.strip()]
    if "eval" not in splits:
        raise FileNotFoundError(f"no {hub}_eval.json under {folder}")
    group = _api_groups([row for rows in splits.values() for row in rows])
    variants: dict[str, Counter[str]] = {}
    for rows in splits.values():
        for row in rows:
            text = json.dumps(row["api_data"], sort_keys=True)
            variants.setdefault(group[_api_call(row["api_data"])], Counter())[text] += 1
    names: dict[str, str] = {}
    taken: set[str] = set()
    definitions: list[dict[str, Any]] = []
    for key, seen in variants.items():
        data = json.loads(seen.most_common(1)[0][0])
        names[key] = _api_name(data, taken)
        definitions.append(_api_function(data, names[key]))
    queries = {
        split: [
            Query(
                f"{hub}-{split}:{i}",
                instruction(str(r["code"])),
                (names[group[_api_call(r["api_data"])]],),
            )
            for i, r in enumerate(rows)
        ]
        for split, rows in splits.items()
    }
    tools = load_tools(definitions, str(folder))
    train = queries.get("train", [])
    test = queries["eval"] if train else _folded(queries["eval"], f"apibench-{hub}")
    return Protocol(
        f"apibench_{hub}",
        [t.tool_id for t in tools],
        [embedding_text(t) for t in tools],
        test,
        train=train,
        folds=0 if train else FOLDS,
        notes={"apis": len(tools), "queries": len(test), "training_queries": len(train)},
        tools=tools,
        lexical=[lexical_text(t) for t in tools],
    )
