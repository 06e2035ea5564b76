"""Every check of a caller's arguments, in one place: the library's methods call these
at their boundary, before anything is read or written, and every shell shows the
:class:`~sidecar.errors.InvalidInput` they raise the same way."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sidecar.errors import InvalidInput
from sidecar.limits import (
    CHECK_MODES,
    MAX_CONTEXT,
    MAX_K,
    MAX_MIN_CHAINS,
    MAX_PLAN,
    MAX_QUERY,
    MAX_REASON,
    CheckMode,
)
from sidecar.trust.redact import redact_text

# MCP tool-name rules: 1-128 characters from A-Z a-z 0-9 _ - .
TOOL_ID_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
TOOL_TYPE_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")


MAX_DEPTH = 32
"""Nesting allowed in free-form JSON (logs, error bodies, arguments, outputs)."""


def check_text(value: str, where: str) -> str:
    """Refuse text that cannot be stored as UTF-8 (a lone surrogate from ``\\ud800``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"{where} is not valid Unicode text (it holds a lone surrogate)"
        ) from None
    return value


def check_json_value(value: object, where: str, depth: int = 0) -> None:
    """Refuse free-form JSON that is nested deeper than :data:`MAX_DEPTH`, holds text
    that cannot be stored, or a number that is not finite."""
    if depth > MAX_DEPTH:
        raise InvalidInput(f"{where} is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, where)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{where} holds a number that is not finite ({value!r})")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            name = ascii(str(key))[:40]
            check_text(str(key), f"{where} key {name}")
            check_json_value(item, f"{where}[{name}]", depth + 1)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_json_value(item, f"{where}[{i}]", depth + 1)


def check_tool_id(value: object, where: str = "tool id") -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a string, got {type(value).__name__}")
    if not TOOL_ID_PATTERN.fullmatch(value):
        raise InvalidInput(
            f"{where} {value[:140]!r} is not a valid tool name: 1-128 characters from "
            "A-Z, a-z, 0-9, '_', '-' and '.'"
        )
    return value


def query_text(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("query must be a non-empty string")
    if len(query) > MAX_QUERY:
        raise InvalidInput(f"query is longer than {MAX_QUERY} characters")
    return query


def k_value(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an integer from 1 to {MAX_K}")
    return k


def check_mode(mode: object) -> CheckMode:
    if mode not in CHECK_MODES:
        raise InvalidInput(f"mode must be 'sequence' or 'prefix', got {mode!r}")
    return mode  # type: ignore[return-value]


def tool_list(tools: object, where: str) -> tuple[str, ...]:
    if isinstance(tools, str) or not isinstance(tools, Sequence):
        raise InvalidInput(f"{where} must be a list of tool ids")
    if len(tools) > MAX_PLAN:
        raise InvalidInput(f"{where} has {len(tools)} tools; at most {MAX_PLAN}")
    return tuple(check_tool_id(t, f"{where}[{i}]") for i, t in enumerate(tools))


def context_values(context: object) -> dict[str, Any]:
    """A lookup or check context: field -> scalar.  A number that is not finite (NaN,
    infinity) is refused: no condition could be evaluated against it."""
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise InvalidInput("context must be an object of field -> value")
    if len(context) > MAX_CONTEXT:
        raise InvalidInput(f"context has {len(context)} fields; at most {MAX_CONTEXT}")
    for key, value in context.items():
        if not isinstance(key, str) or not key:
            raise InvalidInput("context keys must be non-empty strings")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InvalidInput(f"context[{key!r}] must be a string, number, boolean or null")
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInput(f"context[{key!r}] must be a finite number, got {value!r}")
    return dict(context)


def call_arguments(arguments: object) -> dict[str, Any]:
    """The arguments of a call about to be made: an object of JSON values."""
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise InvalidInput("next.arguments must be an object")
    args = dict(arguments)
    check_json_value(args, "next.arguments")
    return args


def reason(value: object, missing: str) -> str:
    """An operator's reason for a change: non-empty, bounded, stored redacted."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(missing)
    if len(value) > MAX_REASON:
        raise InvalidInput(f"a reason is at most {MAX_REASON} characters")
    return redact_text(check_text(value, "reason"))


def min_chains(value: Any) -> int | None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MIN_CHAINS
    ):
        raise InvalidInput(f"min_chains must be an integer >= 1, got {value!r}")
    return value


MAX_UNIX_TIME = 1e11
"""Past the year 5000: a larger time is no time a record can have (and an integer this
large would not fit the state's column)."""


def since(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput("since must be a Unix time in seconds")
    try:
        at = float(value)
    except OverflowError:  # an integer no float holds
        at = math.inf
    if not (math.isfinite(at) and -MAX_UNIX_TIME <= at <= MAX_UNIX_TIME):
        raise InvalidInput(f"since must be a Unix time in seconds, at most {MAX_UNIX_TIME:.0e}")
    return at


def retention(hours: object, default: timedelta, least: timedelta) -> timedelta:
    """How long the archive keeps files no commit names."""
    if hours is None:
        return default
    if isinstance(hours, bool) or not isinstance(hours, int | float):
        raise InvalidInput("retention_hours must be a number")
    found = timedelta(hours=hours)
    if found < least:
        raise InvalidInput(
            f"retention_hours must be at least {least.seconds // 3600}: "
            "a writer may still commit a younger file"
        )
    return found


def viewer(name: object) -> str | None:
    """The agent token an answer is worded for (``None``: an operator)."""
    if name is None:
        return None
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}", name):
        raise InvalidInput(f"viewer must be a token's name, got {name!r}")
    return name
