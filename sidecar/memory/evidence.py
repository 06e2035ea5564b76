"""What the failure memory learns from: the ordered steps of a session and its outcome.

A step is one tool call as the runtime saw it: the tool, its arguments, and either its
output (JSON-decoded or text) or an error text.  Every type here converts to and from
plain JSON dicts, so the library can persist sessions and features as it likes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

SessionOutcome = Literal["completed", "abandoned", "unknown"]
OUTCOMES: tuple[str, ...] = ("completed", "abandoned", "unknown")


@dataclass(frozen=True)
class Step:
    """One tool call: ``error`` is the failure text when the call failed, else ``None``."""

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict, hash=False)
    output: Any = field(default=None, hash=False)
    """The result as JSON (dict, list, scalar) or text; text holding JSON is decoded
    when the session is indexed."""
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "output": self.output,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        tool = data.get("tool")
        if not isinstance(tool, str) or not tool:
            raise ValueError("a step needs a non-empty 'tool' string")
        arguments = data.get("arguments") or {}
        if not isinstance(arguments, Mapping):
            raise ValueError("a step's 'arguments' must be an object")
        error = data.get("error")
        if error is not None and not isinstance(error, str):
            raise ValueError("a step's 'error' must be a string or null")
        return cls(tool, dict(arguments), data.get("output"), error)


@dataclass(frozen=True)
class Session:
    """The ordered steps of one agent run and how it ended."""

    session_id: str
    steps: tuple[Step, ...]
    outcome: SessionOutcome = "unknown"
    task_input: str | None = None
    """The text the agent was given (task statement, user turns), when known."""
    source: str = "local"
    """Who reported it (a token's name, ``gateway``, ``otlp``): evidence counts per
    source as well as per situation."""
    context_known: bool = True
    """Whether its steps are all its calls.  A gateway's calls that nothing could tie
    together are a session of one call whose context is not known: it teaches only
    what the call alone shows (its arguments), never what came before it."""
    context_only: frozenset[int] = frozenset()
    """Positions of steps that are context only: what they showed grounds the calls
    after them, but they teach nothing of their own tool (an untrusted source's calls of
    tools in no catalog)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "session_id": self.session_id,
            "steps": [s.to_dict() for s in self.steps],
            "outcome": self.outcome,
            "task_input": self.task_input,
            "source": self.source,
        }
        if not self.context_known:
            out["context"] = "unknown"
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Session:
        session_id = data.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("a session needs a non-empty 'session_id' string")
        outcome = data.get("outcome", "unknown")
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
        steps = data.get("steps") or []
        if not isinstance(steps, Sequence) or isinstance(steps, str | bytes):
            raise ValueError("a session's 'steps' must be a list")
        task_input = data.get("task_input")
        if task_input is not None and not isinstance(task_input, str):
            raise ValueError("a session's 'task_input' must be a string or null")
        source = data.get("source", "local")
        if not isinstance(source, str) or not source:
            raise ValueError("a session's 'source' must be a non-empty string")
        context = data.get("context", "known")
        if context not in ("known", "unknown"):
            raise ValueError(f"a session's 'context' is 'known' or 'unknown', got {context!r}")
        steps_ = tuple(Step.from_dict(s) for s in steps)
        return cls(session_id, steps_, outcome, task_input, source, context == "known")


def decoded(output: Any) -> Any:
    """The output as JSON when it is JSON text (tools often return serialised JSON)."""
    if isinstance(output, str):
        text = output.strip()
        if text[:1] in ("{", "["):
            try:
                return json.loads(text)
            except ValueError:
                return output
    return output
