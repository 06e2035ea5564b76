"""Turning observed tool calls into :class:`~sidecar.gateway.backend.Step` evidence:
secrets redacted (:func:`sidecar.redact.redact`) and sizes capped before anything leaves
the process.

Arguments keep their keys (conditions are learned per argument); an oversized value is
cut, not dropped.  Outputs keep their structure when small, else become a truncated JSON
preview.  Text that parses as a JSON object or array is kept parsed, since most MCP
servers return structured data as text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.gateway.backend import Step
from sidecar.redact import redact, redact_text

DEFAULT_MAX_CHARS = 4_096
TRUNCATED = "…[truncated {n} chars]"


def cap(value: Any, max_chars: int = DEFAULT_MAX_CHARS) -> Any:
    """``value`` unchanged when its JSON fits in ``max_chars``; else a cut string (for a
    string) or a cut JSON preview (for a structure)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _cut(value, max_chars)
    text = _dumps(value)
    return value if len(text) <= max_chars else _cut(text, max_chars)


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + TRUNCATED.format(n=len(text) - max_chars)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def arguments_evidence(
    arguments: Mapping[str, Any] | None, max_chars: int = DEFAULT_MAX_CHARS
) -> dict[str, Any]:
    """Redacted arguments, each value capped on its own so that every key survives."""
    cleaned = redact(dict(arguments or {}))
    return {str(k): cap(v, max_chars) for k, v in cleaned.items()}


def output_evidence(value: Any, max_chars: int = DEFAULT_MAX_CHARS) -> Any:
    return cap(redact(_parsed(value)), max_chars)


def error_evidence(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    return _cut(redact_text(text), max_chars) or "error"


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and len(stripped) <= 1_000_000:
            try:
                return json.loads(stripped)
            except ValueError:
                return value
    return value


def result_text(content: Sequence[Any]) -> str:
    """The text of an MCP result's content blocks (other kinds named, not inlined)."""
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", None) or (
            block.get("type") if isinstance(block, dict) else None
        )
        if kind == "text":
            text = getattr(block, "text", None)
            parts.append(text if isinstance(text, str) else str(block.get("text", "")))
        else:
            parts.append(f"[{kind or 'content'}]")
    return "\n".join(parts)


def step_from_result(
    tool: str,
    arguments: Mapping[str, Any] | None,
    *,
    structured: Any | None,
    content: Sequence[Any],
    is_error: bool,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Step:
    """The step an MCP ``CallToolResult`` amounts to: an upstream ``isError`` result is a
    failure whose error is the result's text."""
    args = arguments_evidence(arguments, max_chars)
    if is_error:
        return Step(tool, args, None, error_evidence(result_text(content), max_chars))
    output = structured if structured is not None else result_text(content)
    return Step(tool, args, output_evidence(output, max_chars), None)


def step_from_error(
    tool: str, arguments: Mapping[str, Any] | None, error: str, max_chars: int = DEFAULT_MAX_CHARS
) -> Step:
    return Step(
        tool, arguments_evidence(arguments, max_chars), None, error_evidence(error, max_chars)
    )
