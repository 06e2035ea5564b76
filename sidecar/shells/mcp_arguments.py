"""The arguments of the MCP tools (:mod:`sidecar.shells.mcp_server`), typed so that their JSON
schemas are explicit and convert under OpenAI's strict mode (the Agents SDK's
``convert_schemas_to_strict=True``) without losing anything a tool needs.

A strict schema has no "any object": every object is closed and lists its properties.
So the values that are free-form by nature travel as JSON text: a call's ``arguments``,
a step's ``output``, a ``context`` of runtime facts, a failure's ``error`` record, a
hand-written ``constraint``.  Each still accepts the object itself from clients that send
one (the forms the HTTP API and the CLI take), so nothing that worked before stops
working.  A step's ``output`` given as text is read as JSON when it parses (``"{...}"``,
``"42"``), else kept as the text it is.  The library then validates the values as it
does for every shell.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from sidecar.limits import MAX_STEPS


def _object(value: Any) -> Any:
    """A JSON object given as text becomes the object; anything else is left for the
    type check (which refuses what is not an object)."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            raise ValueError("not a JSON object (give one as text)") from None
    return value


def _value(value: Any) -> Any:
    """JSON given as text becomes its value; other text is kept as text."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _json_text(what: str) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "description": what})


JsonObject = Annotated[
    dict[str, Any],
    BeforeValidator(_object),
    _json_text('a JSON object, as text, e.g. {"order_id": "#W1"}'),
]
JsonValue = Annotated[
    Any,
    BeforeValidator(_value),
    WithJsonSchema(
        {
            "type": ["string", "null"],
            "description": "JSON as text (an object, a list, a number...), or plain text",
        }
    ),
]


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def plain(self) -> dict[str, Any]:
        """The library's form: the fields that were given."""
        return self.model_dump(exclude_none=True)


class StepArg(Closed):
    """One call of the session so far."""

    tool: str = Field(min_length=1, max_length=128)
    arguments: JsonObject | None = None
    output: JsonValue = None
    error: str | None = None


class NextArg(Closed):
    """The call about to be made."""

    tool: str = Field(min_length=1, max_length=128)
    arguments: JsonObject | None = None


class FailureArg(Closed):
    """How a chain failed at its last step."""

    signature: str
    kind: Literal["deterministic", "transient"] | None = None
    error: JsonObject | None = None


class ReportArg(Closed):
    """A session as its ``steps`` and ``outcome``, or (the older form) a chain's
    ``topology`` with its ``failure``; the same object as a line of ``sidecar report``."""

    steps: list[StepArg] | None = Field(default=None, max_length=MAX_STEPS)
    topology: list[str] | None = None
    outcome: Literal["completed", "abandoned", "unknown"] | None = None
    task_input: str | None = None
    session_id: str | None = None
    report_id: str | None = None
    reported_at: str | None = None
    failure: FailureArg | None = None
    constraint: JsonObject | None = Field(
        default=None, description="hand-written conditions (operators only), a JSON object"
    )
    logs: JsonValue = None


def steps_of(steps: list[StepArg] | None) -> list[dict[str, Any]]:
    return [s.plain() for s in steps or []]


def inlined(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with every ``$ref`` replaced by what it names: the Agents
    SDK refuses a reference in an MCP tool's schema under strict mode."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                extra = {k: v for k, v in node.items() if k != "$ref"}
                return resolve({**defs[ref.removeprefix("#/$defs/")], **extra})
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


def _optional(schema: dict[str, Any]) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [schema, {"type": "null"}], "default": None})


Steps = Annotated[
    list[StepArg] | None,
    _optional({"type": "array", "items": inlined(StepArg), "description": "the session so far"}),
]
Next = Annotated[
    NextArg | None,
    _optional({**inlined(NextArg), "description": "the call about to be made"}),
]
Report = Annotated[ReportArg, WithJsonSchema(inlined(ReportArg))]
