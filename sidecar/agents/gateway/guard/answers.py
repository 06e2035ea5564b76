"""What an agent is shown of a verdict: a refusal (an ``isError`` result naming the rule),
or a forwarded result that carries the warning.

A warning travels twice: as ``_meta["sidecar/warnings"]`` (structured, for clients that
read ``_meta``) and, unless turned off, as a short text block appended to the result's
content, because most clients hand the model the content alone (``langchain-mcp-adapters``
and the OpenAI Agents SDK drop ``_meta``): a warning only in ``_meta`` is a warning the
model never sees.  A reason's words are the sidecar's own (:mod:`sidecar.rules.wording`):
free text of the evidence comes only for an agent that may read it, on a line of its own
as labelled, escaped data.  Every text shown is neutralized as well
(:func:`sidecar.trust.neutralize.neutralize`), a second line of defence.  Markup in it is
defused too: a tag (``</tool_result>``, ``<system>``) has its angle brackets replaced by
angle quotation marks, and a code fence its backticks, so that an upstream's error text
cannot open or close a section of whatever prompt a client wraps tool results in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sidecar.agents.gateway.guard.backend import GuardReason, GuardVerdict
from sidecar.agents.gateway.guard.linking import SESSION_META_KEY
from sidecar.trust.neutralize import as_data, neutralize

if TYPE_CHECKING:
    from mcp.types import CallToolResult

WARNINGS_META_KEY = "sidecar/warnings"
CONTEST_META_KEY = "sidecar/contest"
WARNING_PREFIX = "[sidecar warning]"
"""How the warning block starts (what a client or a test can look for)."""
SHOWN_REASONS = 3
"""Reasons spelled out in a warning block; the rest are counted."""
REASON_CHARS = 400
_LT, _GT = "<\uff1c", ">\uff1e"  # and their full-width forms
_TAG = re.compile(f"[{_LT}](/?[A-Za-z!?][^{_LT}{_GT}\\s]*(?:\\s[^{_LT}{_GT}]*)?/?)[{_GT}]")
"""A tag-like run (``<system>``, ``</tool_result>``, ``<!-- -->``); a comparison such as
``size > 5 MB`` has no ``<`` before a name, and stays."""
CONTEST_NOTE = (
    "the memory would have refused this call; it was forwarded as a sample, so that its "
    "outcome can confirm or contest the rule"
)


def error(text: str) -> CallToolResult:
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def refusal(tool: str, reasons: Sequence[GuardReason], appeal: str | None = None) -> CallToolResult:
    """The answer to a blocked call: not run, and why; with ``appeal`` (the name of the
    gateway's tool that files an appeal), how to contest it."""
    lines = [f"Refused: {tool} was not run, because calls like this one failed before."]
    for r in reasons:
        line = f"- rule: {_shown(r.rule)}. {_shown(r.explanation)} Evidence: {_shown(r.evidence)}"
        lines.append(line + (f" (record: {r.pointer})" if r.pointer else ""))
        if r.quoted:
            lines.append(f"  {_shown(as_data(r.quoted))}")
    if appeal is not None:
        ids = json.dumps([r.rule_id for r in reasons if r.rule_id])
        lines.append(
            f"If this block is wrong, call {appeal} with this tool, these arguments, "
            f"constraint_ids {ids} and your reason; an operator will judge it."
        )
    return error("\n".join(lines))


def warning_text(tool: str, reasons: Sequence[GuardReason], sampled: bool = False) -> str:
    """The short block a warned call's result carries for the model to read."""
    head = (
        f"{WARNING_PREFIX} {tool} was run, but calls like this one failed before"
        + (f" ({CONTEST_NOTE})" if sampled else "")
        + ":"
    )
    lines = [head]
    for r in reasons[:SHOWN_REASONS]:
        lines.append(f"- {_shown(f'{r.rule}: {r.explanation}')}")
        if r.quoted:
            lines.append(f"  {_shown(as_data(r.quoted))}")
    if len(reasons) > SHOWN_REASONS:
        lines.append(f"- and {len(reasons) - SHOWN_REASONS} more rule(s)")
    return "\n".join(lines)


def warned(
    result: CallToolResult, tool: str, verdict: GuardVerdict, sampled: bool, text: bool
) -> CallToolResult:
    """``result`` of a forwarded call the memory warned about (or sampled): the reasons
    in ``_meta`` and, with ``text``, in a text block after the content."""
    from mcp import types

    update: dict[str, Any] = {WARNINGS_META_KEY: [reason_dict(r) for r in verdict.reasons]}
    if sampled:
        update[CONTEST_META_KEY] = {"sampled": True, "note": CONTEST_NOTE}
    changes: dict[str, Any] = {"meta": {**(result.meta or {}), **update}}
    if text:
        # on a line of its own, even where a client joins the blocks with nothing between
        shown = "\n" + warning_text(tool, verdict.reasons, sampled)
        block = types.TextContent(type="text", text=shown)
        changes["content"] = [*result.content, block]
    return result.model_copy(update=changes)


def with_handle(result: CallToolResult, handle: str | None) -> CallToolResult:
    """``result`` with the handle of the session the gateway put its call in, for a
    client that keeps no session and declared none: sent back as
    ``_meta["sidecar/session"]`` (or the ``Sidecar-Session`` header), it declares that
    session, so that its next calls join it whatever they share."""
    if handle is None:
        return result
    return result.model_copy(update={"meta": {**(result.meta or {}), SESSION_META_KEY: handle}})


def reason_dict(reason: GuardReason) -> dict[str, Any]:
    return {
        "rule": reason.rule,
        "explanation": reason.explanation,
        "evidence": reason.evidence,
        "pointer": reason.pointer,
        "quoted": dict(reason.quoted),
    }


def _shown(text: str) -> str:
    """``text`` as a rule's reason is shown to the model: neutralized, on one line,
    bounded, with no markup."""
    shown = neutralize(text, REASON_CHARS, one_line=True)
    # after neutralizing: the same length, and nothing it keeps can form a tag again
    return _TAG.sub("\u2039\\1\u203a", shown).replace("`" * 3, "'" * 3)
