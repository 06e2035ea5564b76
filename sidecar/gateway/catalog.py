"""The merged tool catalog of every upstream: which name the agent sees for which
upstream tool, and the definitions handed to the failure memory.

A tool keeps its upstream name unless another upstream (or one of the gateway's own
tools) uses the same name; then every holder of the name is exposed as
``UPSTREAM_NAME``.  Names are recomputed on each change, so a rename in one upstream can
rename another's tool: :meth:`Catalog.changed_sources` says whose exposed definitions
moved since they were last synced.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.types import Tool


@dataclass(frozen=True)
class Route:
    exposed: str
    upstream: str
    name: str
    """The tool's name on its upstream."""


class Catalog:
    def __init__(self, reserved: frozenset[str] = frozenset()) -> None:
        self._reserved = reserved
        self._listed: dict[str, list[Tool]] = {}  # upstream -> its tools, in its order
        self._routes: dict[str, Route] = {}
        self._exposed: dict[str, Tool] = {}
        self._synced: dict[str, str] = {}  # upstream -> digest of what was last synced

    def update(self, upstream: str, tools: list[Tool]) -> None:
        self._listed[upstream] = list(tools)
        self._rebuild()

    def _rebuild(self) -> None:
        counts = Counter(t.name for tools in self._listed.values() for t in tools)
        routes: dict[str, Route] = {}
        exposed: dict[str, Tool] = {}
        for upstream, tools in self._listed.items():
            for tool in tools:
                clash = counts[tool.name] > 1 or tool.name in self._reserved
                name = f"{upstream}_{tool.name}" if clash else tool.name
                if name in routes or name in self._reserved:
                    continue  # a prefixed name that itself collides: first listed wins
                routes[name] = Route(name, upstream, tool.name)
                exposed[name] = (
                    tool if name == tool.name else tool.model_copy(update={"name": name})
                )
        self._routes, self._exposed = routes, exposed

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
            }
            for route in self._routes.values()
            if route.upstream == upstream
        ]

    # -- syncing
    def changed_sources(self) -> list[str]:
        return [u for u in self._listed if self._synced.get(u) != _digest(self.definitions(u))]

    def mark_synced(self, upstream: str, definitions: list[dict[str, Any]]) -> None:
        self._synced[upstream] = _digest(definitions)


def _digest(definitions: list[dict[str, Any]]) -> str:
    text = json.dumps(definitions, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
