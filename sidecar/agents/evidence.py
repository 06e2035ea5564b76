"""Turning observed tool calls (the gateway's, the OTLP intake's) into step evidence:
bounded first, then redacted (:func:`sidecar.trust.redact.redact`), then capped, before
anything leaves the process.

Every value is *clipped* before anything else reads it: at most about ``max_chars``
characters of its strings, :data:`MAX_ITEMS` entries per container and
:data:`MAX_DEPTH` levels of nesting, each cut leaving a marker.  Only the clipped copy
is parsed and redacted, so the work per call is bounded whatever the upstream returned
(a 20 MB result costs what a 5 KB one does) and a result nested 5,000 levels deep
becomes a marker, not a recursion error.  A string cut by the clip is redacted with
:data:`MARGIN` more characters than are kept, and that margin is dropped afterwards: a
secret the cut runs through is seen whole by the redaction and never shown in part.

Arguments keep their keys (conditions are learned per argument); an oversized value is
cut, not dropped.  Outputs keep their structure when small, else become a truncated JSON
preview.  Text that parses as a JSON object or array (up to :data:`PARSE_LIMIT`
characters) is kept parsed, since most MCP servers return structured data as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.memory import Step
from sidecar.trust.redact import redact, redact_text

DEFAULT_MAX_CHARS = 4_096
MAX_DEPTH = 32
"""Levels of nesting kept; deeper values become :data:`DEEP`."""
MAX_ITEMS = 256
"""Entries kept per list or mapping."""
MARGIN = 1_024
"""Characters past a cut that the redaction still sees (then dropped)."""
PARSE_LIMIT = 65_536
"""Longest text tried as JSON; a longer one is kept as (cut) text."""
MAX_KEY_CHARS = 256
TRUNCATED = "…[truncated {n} chars]"
DEEP = "…[nested deeper than {n} levels]"
MORE_ITEMS = "…[{n} more items]"
MORE_KEY = "…"
# where a clipped string was cut: `keep` characters are to be kept in the end, `dropped`
# were never read; private-use characters, which neither JSON nor redaction produce
_MARK = "\ue000{keep}:{dropped}\ue001"
_MARK_RE = re.compile("\ue000(\\d+):(\\d+)\ue001$")


# ---- the three steps: clip, (redact), finish --------------------------------------------
def clip(value: Any, max_chars: int = DEFAULT_MAX_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """A copy of ``value`` (JSON-like) with at most about ``max_chars`` characters of
    strings, :data:`MAX_ITEMS` entries per container and ``max_depth`` levels.  Strings
    cut here carry an internal mark until :func:`finish` cuts them for good."""
    budget = [max(max_chars, 0)]
    return _clip(value, budget, max_chars, 0, max_depth)


def _clip(value: Any, budget: list[int], max_chars: int, depth: int, max_depth: int) -> Any:
    if value is None or isinstance(value, bool | int | float):
        budget[0] -= 8
        return value
    if isinstance(value, str):
        out = clip_text(value, min(max_chars, max(budget[0], 0)))
        budget[0] -= min(len(value), max_chars)
        return out
    if isinstance(value, Mapping | list | tuple) and depth >= max_depth:
        budget[0] -= 40
        return DEEP.format(n=max_depth)
    if isinstance(value, Mapping):
        out_map: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= MAX_ITEMS or budget[0] <= 0:
                out_map[MORE_KEY] = MORE_ITEMS.format(n=len(value) - i)
                break
            skey = str(key)[:MAX_KEY_CHARS]
            budget[0] -= len(skey) + 4
            out_map[skey] = _clip(item, budget, max_chars, depth + 1, max_depth)
        return out_map
    if isinstance(value, list | tuple):
        out_list: list[Any] = []
        for i, item in enumerate(value):
            if i >= MAX_ITEMS or budget[0] <= 0:
                out_list.append(MORE_ITEMS.format(n=len(value) - i))
                break
            budget[0] -= 2
            out_list.append(_clip(item, budget, max_chars, depth + 1, max_depth))
        return out_list
    return _clip(str(value), budget, max_chars, depth, max_depth)


def clip_text(text: str, keep: int, total: int | None = None) -> str:
    """``text`` when it is at most ``keep`` characters; else its first ``keep`` +
    :data:`MARGIN` characters and a mark for :func:`finish`.  ``total`` is the length of
    the whole text when ``text`` is already a prefix of it."""
    total = len(text) if total is None else total
    if total <= keep:
        return text
    window = text[: keep + MARGIN]
    return window + _MARK.format(keep=keep, dropped=total - len(window))


def finish(value: Any) -> Any:
    """``value`` (clipped, then redacted) with every marked string cut for good."""
    if isinstance(value, str):
        return _finish_text(value)
    if isinstance(value, dict):
        return {k: finish(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finish(v) for v in value]
    return value


def _finish_text(text: str) -> str:
    mark = _MARK_RE.search(text)
    if mark is None:
        return text
    keep, dropped = int(mark.group(1)), int(mark.group(2))
    body = text[: mark.start()]
    if dropped:
        # the window's last MARGIN characters may hold the part of a secret the window
        # cut off, which the redaction could not recognise: never kept
        body = body[: max(len(body) - MARGIN, 0)]
    kept = body[:keep]
    return kept + TRUNCATED.format(n=dropped + len(body) - len(kept) + _dropped_margin(dropped))


def _dropped_margin(dropped: int) -> int:
    return MARGIN if dropped else 0


def cap(value: Any, max_chars: int = DEFAULT_MAX_CHARS) -> Any:
    """``value`` unchanged when its JSON fits in ``max_chars``; else a cut string (for a
    string) or a cut JSON preview (for a structure, clipped first)."""
    if isinstance(value, str):
        return _cut(value, max_chars)
    return _capped(finish(clip(value, max_chars)), max_chars)


def _capped(bounded: Any, max_chars: int) -> Any:
    """:func:`cap` for a value already clipped and finished (its strings are cut)."""
    if bounded is None or isinstance(bounded, bool | int | float | str):
        return bounded
    text = _dumps(bounded)
    return bounded if len(text) <= max_chars else _cut(text, max_chars)


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + TRUNCATED.format(n=len(text) - max_chars)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


# ---- evidence -----------------------------------------------------------------------
def arguments_evidence(
    arguments: Mapping[str, Any] | None, max_chars: int = DEFAULT_MAX_CHARS
) -> dict[str, Any]:
    """Redacted arguments, each value clipped and capped on its own so that every key
    survives."""
    clipped = {
        str(k)[:MAX_KEY_CHARS]: clip(v, max_chars)
        for k, v in _first_items(dict(arguments or {}), MAX_ITEMS)
    }
    cleaned = redact(clipped)
    return {str(k): _capped(finish(v), max_chars) for k, v in cleaned.items()}


def _first_items(mapping: dict[str, Any], n: int) -> list[tuple[str, Any]]:
    items = list(mapping.items())
    if len(items) <= n:
        return items
    return [*items[:n], (MORE_KEY, MORE_ITEMS.format(n=len(items) - n))]


def output_evidence(value: Any, max_chars: int = DEFAULT_MAX_CHARS) -> Any:
    """A tool's output as evidence: a string is tried as JSON (when short enough), a
    structure is clipped, redacted and capped."""
    if isinstance(value, str):
        return text_evidence(value, max_chars)
    return _capped(finish(redact(clip(value, max_chars))), max_chars)


def text_evidence(text: str, max_chars: int = DEFAULT_MAX_CHARS, total: int | None = None) -> Any:
    """A text output as evidence: parsed when it is a short JSON object or array, else
    clipped, redacted and cut.  ``total``: as for :func:`clip_text`."""
    whole = len(text) if total is None else total
    if whole == len(text):
        parsed = _parsed(text)
        if parsed is not None:
            return _capped(finish(redact(clip(parsed, max_chars))), max_chars)
    return _finish_text(redact_text(clip_text(text, max_chars, whole)))


def error_evidence(text: str, max_chars: int = DEFAULT_MAX_CHARS, total: int | None = None) -> str:
    return _finish_text(redact_text(clip_text(text, max_chars, total))) or "error"


def _parsed(text: str) -> Any | None:
    if len(text) > PARSE_LIMIT:
        return None
    stripped = text.strip()
    if stripped[:1] not in ("{", "["):
        return None
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
        return None


def result_text(content: Sequence[Any], limit: int | None = None) -> tuple[str, int]:
    """The text of an MCP result's content blocks (other kinds named, not inlined), read
    up to ``limit`` characters, and the length of the whole."""
    parts: list[str] = []
    kept = total = 0
    for block in content:
        kind = getattr(block, "type", None) or (
            block.get("type") if isinstance(block, dict) else None
        )
        if kind == "text":
            text = getattr(block, "text", None)
            part = text if isinstance(text, str) else str(block.get("text", ""))
        else:
            part = f"[{kind or 'content'}]"
        if parts:
            total += 1
            kept += 1
            parts.append("\n")
        total += len(part)
        if limit is None or kept < limit:
            room = len(part) if limit is None else limit - kept
            parts.append(part[:room])
            kept += min(len(part), room)
    return "".join(parts), total


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
        text, total = result_text(content, max_chars + MARGIN)
        return Step(tool, args, None, error_evidence(text, max_chars, total))
    if structured is not None:
        return Step(tool, args, output_evidence(structured, max_chars), None)
    text, total = result_text(content, PARSE_LIMIT + 1)
    return Step(tool, args, text_evidence(text, max_chars, total), None)


def step_from_error(
    tool: str, arguments: Mapping[str, Any] | None, error: str, max_chars: int = DEFAULT_MAX_CHARS
) -> Step:
    return Step(
        tool, arguments_evidence(arguments, max_chars), None, error_evidence(error, max_chars)
    )


def result_size(structured: Any | None, content: Sequence[Any]) -> int:
    """A cheap upper bound on the work :func:`step_from_result` does for a result (its
    text length, or a count for a structure): small results are taken on the event loop,
    large ones on a worker thread."""
    size = 0
    for block in content:
        text = getattr(block, "text", None)
        size += len(text) if isinstance(text, str) else 16
    if structured is not None:
        size += _rough_size(structured, 0)
    return size


def _rough_size(value: Any, depth: int) -> int:
    if isinstance(value, str):
        return len(value)
    if depth > 4 or not isinstance(value, Mapping | list | tuple):
        return 8 if depth <= 4 else 1_000_000  # deep: treat as large, do not walk it
    items = value.values() if isinstance(value, Mapping) else value
    if len(items) > 64:
        return 1_000_000
    return sum(_rough_size(v, depth + 1) + 4 for v in items)
