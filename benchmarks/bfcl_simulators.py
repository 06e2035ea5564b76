"""BFCL's multi-turn scenarios and simulators, read from the installed ``bfcl-eval``
package (nothing is downloaded): the filter that keeps the four development classes,
the scenarios' ground-truth calls, and fresh simulator instances to execute them on.

Only ``TravelAPI``, ``TradingBot``, ``GorillaFileSystem`` and ``MathAPI`` are used.  A
scenario is kept when its involved classes are a subset of those and no reserved class
(``VehicleControlAPI``, ``TicketAPI``, ``TwitterAPI``, ``MessageAPI``) is named in its
classes, its path or its initial configuration.  The filter runs on each question row
before anything else is read of it; the ground truth of a dropped scenario is never
decoded, and the reserved classes' modules are never imported.

A call's outcome, as the simulators report it (read from their code): most refusals are
a returned dict with an ``"error"`` key (``{"error": ...}``, ``{"booking_status": False,
"error": ...}``); TradingBot's list views answer an unauthenticated caller with a list
holding one such dict or one ``"Error: ..."`` string; a few raise (an unknown route or
currency), recorded as ``"Error during execution: <message>"``, the wording of the
package's own executor.  Anything else is a result, converted to JSON (numeric keys as
text, ``Decimal`` and ``mpmath`` numbers as floats).
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sidecar.memory import Step

PACKAGE = "bfcl-eval==2026.3.23"
INSTALL = f"pip install --no-deps {PACKAGE} mpmath"
CATEGORY = "multi_turn_base"
SIMULATORS = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
}
"""The development classes and their modules (and function-doc files) in the package."""
RESERVED = ("VehicleControlAPI", "TicketAPI", "TwitterAPI", "MessageAPI")
"""Kept for evaluation: never executed, read for tuning or put in tests."""
_MODULE_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
_ID = re.compile(r'\s*\{\s*"id"\s*:\s*"([^"]+)"')


@dataclass(frozen=True)
class Call:
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict, hash=False)
    turn: int = 0
    """The user turn the call answers (an index into :attr:`Scenario.turns`)."""


@dataclass(frozen=True)
class Scenario:
    scenario_id: str
    classes: tuple[str, ...]
    turns: tuple[str, ...]
    """The user's text of each turn."""
    initial_config: Mapping[str, Any] = field(hash=False)
    calls: tuple[Call, ...] = ()
    """The ground truth: every turn's calls, in order."""

    def told_before(self, turn: int) -> str:
        """What the user has said up to and including ``turn``."""
        return "\n".join(t for t in self.turns[: turn + 1] if t)


def missing() -> list[str]:
    """What is not installed (empty when the package and its simulators import), with
    the command that installs it into the interpreter running now."""
    try:
        for name in SIMULATORS:
            simulator_class(name)
    except ImportError as exc:
        command = f"{sys.executable} -m {INSTALL}"
        return [f"{PACKAGE} is not installed ({exc}): install it with `{command}`"]
    return []


def data_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("bfcl_eval") / "data"))


def allowed(row: Mapping[str, Any]) -> bool:
    """Whether a question row uses only the development classes."""
    classes = set(row.get("involved_classes") or ())
    if not classes or not classes <= set(SIMULATORS):
        return False
    named = [*classes, *(str(p).split(".")[0] for p in row.get("path") or ())]
    named += list((row.get("initial_config") or {}).keys())
    return not any(name in RESERVED for name in named)


def read_scenarios(folder: Path | None = None) -> tuple[list[Scenario], dict[str, int]]:
    """The category's scenarios that pass :func:`allowed`, in file order, and counts."""
    folder = folder or data_dir()
    rows = [json.loads(line) for line in _lines(folder / f"BFCL_v4_{CATEGORY}.json")]
    kept = [r for r in rows if allowed(r)]
    wanted = {r["id"] for r in kept}
    truth: dict[str, Any] = {}
    for line in _lines(folder / "possible_answer" / f"BFCL_v4_{CATEGORY}.json"):
        # the id leads each line: a dropped scenario's answer is never decoded
        head = _ID.match(line)
        if head is None or head.group(1) not in wanted:
            continue
        answer = json.loads(line)
        truth[answer["id"]] = answer["ground_truth"]
    scenarios = [_scenario(r, truth[r["id"]]) for r in kept]
    notes = {
        "scenarios_in_category": len(rows),
        "scenarios_reserved_dropped": len(rows) - len(kept),
        "scenarios": len(scenarios),
    }
    return scenarios, notes


def _lines(path: Path) -> Iterator[str]:
    with path.open() as lines:
        yield from (line for line in lines if line.strip())


def _scenario(row: Mapping[str, Any], truth: Sequence[Sequence[str]]) -> Scenario:
    classes = tuple(row["involved_classes"])
    owners = _owners(classes)
    turns = tuple(
        "\n".join(str(m.get("content") or "") for m in turn if m.get("role") == "user")
        for turn in row["question"]
    )
    calls = tuple(
        parse_call(text, owners, turn) for turn, texts in enumerate(truth) for text in texts
    )
    return Scenario(row["id"], classes, turns, row.get("initial_config") or {}, calls)


def parse_call(text: str, owners: Mapping[str, str], turn: int = 0) -> Call:
    """``name(arg=literal, ...)`` (positional arguments named from the method's
    signature) as a :class:`Call`; anything else is a ``ValueError``."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {text!r}")
    tool = node.func.id
    if tool not in owners:
        raise ValueError(f"no simulator method {tool!r}: {text!r}")
    method = getattr(simulator_class(owners[tool]), tool)
    names = [p for p in inspect.signature(method).parameters if p != "self"]
    arguments = {names[i]: ast.literal_eval(v) for i, v in enumerate(node.args)}
    arguments |= {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    return Call(tool, arguments, turn)


@cache
def simulator_class(name: str) -> Any:
    if name not in SIMULATORS:
        raise ValueError(f"{name} is not a development class")
    module = importlib.import_module(f"{_MODULE_PREFIX}.{SIMULATORS[name]}")
    return getattr(module, name)


def _owners(classes: Sequence[str]) -> dict[str, str]:
    """Public method name -> the class that has it."""
    out: dict[str, str] = {}
    for name in classes:
        for method, _ in inspect.getmembers(simulator_class(name), inspect.isfunction):
            if not method.startswith("_"):
                out[method] = name
    return out


class World:
    """Fresh simulator instances for one scenario, each loaded with a deep copy of the
    scenario's initial configuration (``state`` overrides some of its fields)."""

    def __init__(
        self, scenario: Scenario, state: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        self.instances: dict[str, Any] = {}
        for name in scenario.classes:
            instance = simulator_class(name)()
            if hasattr(instance, "_load_scenario"):  # MathAPI is stateless
                config = copy.deepcopy(dict(scenario.initial_config.get(name) or {}))
                config |= copy.deepcopy(dict((state or {}).get(name) or {}))
                instance._load_scenario(config, long_context=False)
            self.instances[name] = instance
        self._owners = _owners(scenario.classes)

    def call(self, call: Call) -> Step:
        instance = self.instances[self._owners[call.tool]]
        arguments = copy.deepcopy(dict(call.arguments))
        try:
            # a copy: a simulator may keep or change what it is given
            result = getattr(instance, call.tool)(**copy.deepcopy(arguments))
        except Exception as exc:  # the simulators raise for a few refusals
            return Step(call.tool, arguments, None, f"Error during execution: {exc}")
        output, error = outcome(result)
        return Step(call.tool, arguments, output, error)


def outcome(result: Any) -> tuple[Any, str | None]:
    """(output as JSON, None) for a result, (None, error text) for a refusal."""
    if isinstance(result, Mapping) and "error" in result:
        return None, str(result["error"])
    if isinstance(result, list) and len(result) == 1:
        only = result[0]
        if isinstance(only, Mapping) and "error" in only:
            return None, str(only["error"])
        if isinstance(only, str) and only.startswith("Error"):
            return None, only
    return jsonable(result), None


def jsonable(value: Any) -> Any:
    """A copy of ``value`` as plain JSON (the simulators return their own state dicts,
    which later calls change)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    try:
        number = float(value)  # Decimal, mpmath's mpf
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else str(value)


def execute(
    scenario: Scenario,
    calls: Sequence[Call],
    state: Mapping[str, Mapping[str, Any]] | None = None,
    stop_at_error: bool = True,
) -> tuple[list[Step], int | None]:
    """The steps of ``calls`` on a fresh :class:`World`, and the index of the first
    failing one (the steps end there when ``stop_at_error``)."""
    world = World(scenario, state)
    steps: list[Step] = []
    failed: int | None = None
    for call in calls:
        step = world.call(call)
        steps.append(step)
        if step.error is not None and failed is None:
            failed = len(steps) - 1
            if stop_at_error:
                break
    return steps, failed


def world_before(scenario: Scenario, index: int) -> World:
    """A world after the first ``index`` ground-truth calls."""
    world = World(scenario)
    for call in scenario.calls[:index]:
        world.call(call)
    return world


def tool_definitions(folder: Path | None = None) -> list[dict[str, Any]]:
    """The package's function docs of the development classes, as OpenAI function tools
    (BFCL's ``dict`` / ``float`` / ``tuple`` types as JSON Schema's)."""
    folder = folder or data_dir()
    out: list[dict[str, Any]] = []
    for module in SIMULATORS.values():
        for line in _lines(folder / "multi_turn_func_doc" / f"{module}.json"):
            doc = json.loads(line)
            function = {
                "name": doc["name"],
                "description": doc.get("description", ""),
                "parameters": _schema(doc.get("parameters") or {"type": "object"}),
            }
            out.append({"type": "function", "function": function})
    return out


READS: frozenset[str] = frozenset({
    # GorillaFileSystem: what reads the tree and changes nothing
    "cat", "diff", "du", "find", "grep", "ls", "pwd", "tail", "wc",
    # MathAPI: pure functions
    "absolute_value", "add", "divide", "imperial_si_conversion", "logarithm", "max_value",
    "mean", "min_value", "multiply", "percentage", "power", "round_number",
    "si_unit_conversion", "sort", "square_root", "standard_deviation", "subtract",
    "sum_values",
    # TradingBot and TravelAPI: lookups
    "filter_stocks_by_price", "get_account_info", "get_available_stocks", "get_order_details",
    "get_order_history", "get_stock_info", "get_symbol_by_name", "get_transaction_history",
    "get_watchlist", "trading_get_login_status", "compute_exchange_rate",
    "get_all_credit_cards", "get_booking_history", "get_budget_fiscal_year",
    "get_credit_card_balance", "get_current_time", "get_flight_cost",
    "get_nearest_airport_by_city", "list_all_airports", "retrieve_invoice",
    "travel_get_login_status", "verify_traveler_information",
})  # fmt: skip
"""The tools that only read (an MCP server would mark them ``readOnlyHint``): the
package's docs do not say, so they are named here, by what each simulator's code does."""


def tool_type(name: str) -> str:
    return "read" if name in READS else "write"


_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def _schema(node: Any) -> Any:
    if isinstance(node, Mapping):
        out = {k: _schema(v) for k, v in node.items()}
        if isinstance(out.get("type"), str):
            out["type"] = _TYPES.get(out["type"], out["type"])
        return out
    if isinstance(node, list):
        return [_schema(v) for v in node]
    return node
