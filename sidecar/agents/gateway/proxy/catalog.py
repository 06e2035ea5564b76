"""The merged tool catalog of every upstream: which name the agent sees for which
upstream tool, and the definitions handed to the failure memory.

Names.  A tool keeps its upstream name when that name is valid in MCP (1-128 of
``A-Z a-z 0-9 _ - .``, the grammar the hot index holds too) and unique.  A name outside
the grammar (``files/read``, ``read file``) is mapped to a valid one: each run of other
characters becomes ``_``, and ``_`` plus six hex digits of the original's SHA-256 are
appended, so that two names never meet; the route keeps the original, which is what the
upstream is called with.  A name that another upstream (or one of the gateway's own
tools) also uses is exposed as ``UPSTREAM_NAME`` for every holder.  Names are recomputed
on each change, so a new upstream can rename another's tool: :meth:`Catalog.
changed_sources` says whose exposed definitions moved since they were last synced.

Renames never lose what the memory knows.  A rule may have been learned while the tool
was exposed under its plain name or under its prefixed one, so a call is checked under
both (:meth:`Catalog.views`), each with the session's steps named the same way, and the
strictest answer wins: a rename can make the gateway stricter, never fail open.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sidecar.agents.gateway.guard.backend import Step
from sidecar.trust.toolnames import MAX_NAME, suffixed, tool_id_for

if TYPE_CHECKING:
    from mcp.types import Tool

log = logging.getLogger("sidecar.agents.gateway")


def valid_name(name: str) -> str:
    """``name`` when MCP accepts it, else the valid name it is mapped to (the mapping the
    OTLP intake shares: :func:`sidecar.trust.toolnames.tool_id_for`)."""
    return tool_id_for(name)


def _fit(name: str) -> str:
    """A prefixed name cut to the grammar's length, with a digest when cut."""
    if len(name) <= MAX_NAME:
        return name
    return suffixed(name, name)


@dataclass(frozen=True)
class Route:
    exposed: str
    upstream: str
    name: str
    """The tool's name on its upstream."""
    plain: str = ""
    """Its valid name without a prefix (``name`` itself when valid)."""
    prefixed: str = ""
    """Its valid name with its upstream's prefix."""


class Catalog:
    def __init__(self, reserved: frozenset[str] = frozenset()) -> None:
        self._reserved = reserved
        self._listed: dict[str, list[Tool]] = {}  # upstream -> its tools, in its order
        self._routes: dict[str, Route] = {}
        self._exposed: dict[str, Tool] = {}
        self._synced: dict[str, str] = {}  # upstream -> digest of what was last synced
        self._mapped: set[tuple[str, str]] = set()  # (upstream, name) already logged
        self.generation = 0
        """Bumped whenever names are recomputed (what a kept view was renamed under)."""

    def update(self, upstream: str, tools: list[Tool]) -> None:
        self._listed[upstream] = list(tools)
        self._rebuild()

    def _rebuild(self) -> None:
        plain = {
            (upstream, tool.name): valid_name(tool.name)
            for upstream, tools in self._listed.items()
            for tool in tools
        }
        counts = Counter(plain.values())
        routes: dict[str, Route] = {}
        exposed: dict[str, Tool] = {}
        for upstream, tools in self._listed.items():
            for tool in tools:
                base = plain[(upstream, tool.name)]
                if base != tool.name:
                    self._note_mapped(upstream, tool.name, base)
                prefixed = _fit(f"{upstream}_{base}")
                clash = counts[base] > 1 or base in self._reserved
                name = prefixed if clash else base
                if name in routes or name in self._reserved:
                    continue  # a prefixed name that itself collides: first listed wins
                routes[name] = Route(name, upstream, tool.name, base, prefixed)
                update: dict[str, Any] = {} if name == tool.name else {"name": name}
                if _takes_nothing(tool.input_schema):
                    update["input_schema"] = {**tool.input_schema, "additionalProperties": False}
                exposed[name] = tool.model_copy(update=update) if update else tool
        self._routes, self._exposed = routes, exposed
        self.generation += 1

    def _note_mapped(self, upstream: str, name: str, mapped: str) -> None:
        if (upstream, name) in self._mapped:
            return
        self._mapped.add((upstream, name))
        log.warning(
            '{"event": "tool_name_mapped", "upstream": %s, "name": %s, "exposed": %s}',
            json.dumps(upstream),
            json.dumps(name[:200]),
            json.dumps(mapped),
        )

    # -- reading
    def route(self, exposed: str) -> Route | None:
        return self._routes.get(exposed)

    def tool(self, exposed: str) -> Tool | None:
        return self._exposed.get(exposed)

    def tools(self) -> list[Tool]:
        return list(self._exposed.values())

    def input_schema(self, exposed: str) -> dict[str, Any] | None:
        tool = self._exposed.get(exposed)
        return None if tool is None else tool.input_schema

    def upstreams(self) -> list[str]:
        return list(self._listed)

    def definitions(self, upstream: str) -> list[dict[str, Any]]:
        """``upstream``'s tools as MCP ``Tool`` dicts under their exposed names."""
        return [
            {
                "name": route.exposed,
                "description": self._exposed[route.exposed].description or "",
                "inputSchema": self._exposed[route.exposed].input_schema,
                **_read_hint(self._exposed[route.exposed]),
            }
            for route in self._routes.values()
            if route.upstream == upstream
        ]

    def views(self, steps: Sequence[Step], exposed: str) -> list[tuple[list[Step], str]]:
        """The ``(steps, tool)`` pairs a call of ``exposed`` is checked as: as named now,
        every tool under its plain name, and every tool under its prefixed name (the
        distinct ones only)."""
        now = list(steps)
        route = self._routes.get(exposed)
        if route is None:
            return [(now, exposed)]
        out = [(now, exposed)]
        seen = {(exposed, tuple(s.tool for s in now))}
        for plain in (True, False):
            tool = route.plain if plain else route.prefixed
            renamed = [self.renamed(s, plain) for s in now]
            key = (tool, tuple(s.tool for s in renamed))
            if key not in seen:
                seen.add(key)
                out.append((renamed, tool))
        return out

    def renamed(self, step: Step, plain: bool) -> Step:
        route = self._routes.get(step.tool)
        if route is None:
            return step
        name = route.plain if plain else route.prefixed
        # a plain constructor: a session's steps are renamed on every call
        return step if name == step.tool else Step(name, step.arguments, step.output, step.error)

    # -- syncing
    def changed_sources(self) -> list[str]:
        return [u for u in self._listed if self._synced.get(u) != _digest(self.definitions(u))]

    def mark_synced(self, upstream: str, definitions: list[dict[str, Any]]) -> None:
        self._synced[upstream] = _digest(definitions)


def _takes_nothing(schema: dict[str, Any]) -> bool:
    """An object schema that declares no property and says nothing of others: a tool
    with no parameters, listed as MCP recommends it (``additionalProperties: false``), the
    form OpenAI's strict mode can take."""
    return (
        schema.get("type") == "object"
        and not schema.get("properties")
        and "additionalProperties" not in schema
        and not any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref", "patternProperties"))
    )


def _digest(definitions: list[dict[str, Any]]) -> str:
    text = json.dumps(definitions, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _read_hint(tool: Tool) -> dict[str, Any]:
    """The upstream's word that a tool only reads, passed on (the memory holds warnings
    on reads to established rules); nothing else of its annotations is kept."""
    hints = tool.annotations
    return {"annotations": {"readOnlyHint": True}} if hints and hints.read_only_hint else {}
