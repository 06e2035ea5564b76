"""The upstreams' resources, resource templates, subscriptions and prompts, merged for
the gateway's clients, and each request on them routed to the upstream that listed what
it names (see :mod:`sidecar.agents.gateway.proxy.relay`, which sends what it cannot
route itself)."""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sidecar.agents.gateway.proxy.upstream import UpstreamLink


class Upstreams(Protocol):
    """What the listings use of the relay (:class:`~sidecar.agents.gateway.proxy.relay.Relay`)."""

    links: Mapping[str, UpstreamLink]
    timeout_s: float | None

    def with_capability(self, kind: str) -> list[str]: ...

    async def each(self, kind: str) -> list[str]: ...

    async def forward(
        self, upstream: str, session: str, ctx: Any, request: Any, result_type: type[Any]
    ) -> Any: ...


@dataclass(frozen=True)
class _PromptRoute:
    upstream: str
    name: str


class Listings:
    def __init__(self, relay: Upstreams) -> None:
        self._relay = relay
        self._uris: dict[str, str] = {}  # resource uri -> upstream
        self._templates: list[tuple[re.Pattern[str], str, str]] = []  # regex, upstream, tpl
        self._prompts: dict[str, _PromptRoute] = {}
        self._subs: dict[tuple[str, str], set[str]] = {}  # (upstream, uri) -> sessions

    @property
    def subscriptions(self) -> int:
        return len(self._subs)

    def subscribers(self, upstream: str, uri: str) -> list[str]:
        """The sessions subscribed to ``uri`` of ``upstream``."""
        return sorted(self._subs.get((upstream, uri), ()))

    async def session_closed(self, session: str) -> None:
        """Drop ``session``'s subscriptions (unsubscribed upstream when no other session
        holds them)."""
        from mcp import types

        for (upstream, uri), holders in list(self._subs.items()):
            if session not in holders:
                continue
            holders.discard(session)
            if holders:
                continue
            del self._subs[(upstream, uri)]
            request = types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
            with contextlib.suppress(Exception):
                await self._relay.links[upstream].request(request, types.EmptyResult, timeout=5)

    # ---- resources --------------------------------------------------------------------
    async def list_resources(self, session: str, ctx: Any) -> Any:
        from mcp import types

        items: list[Any] = []
        routes: dict[str, str] = {}
        for name in await self._relay.each("resources"):
            async for resource in self._relay.links[name].pages(
                "resources/list",
                types.ListResourcesRequest,
                types.ListResourcesResult,
                "resources",
                self._relay.timeout_s,
            ):
                uri = str(resource.uri)
                if uri not in routes:
                    routes[uri] = name
                    items.append(resource)
        self._uris = routes
        return types.ListResourcesResult(resources=items)

    async def list_templates(self, session: str, ctx: Any) -> Any:
        from mcp import types

        items: list[Any] = []
        templates: list[tuple[re.Pattern[str], str, str]] = []
        for name in await self._relay.each("resources"):
            async for template in self._relay.links[name].pages(
                "resources/templates/list",
                types.ListResourceTemplatesRequest,
                types.ListResourceTemplatesResult,
                "resource_templates",
                self._relay.timeout_s,
            ):
                templates.append(
                    (template_pattern(template.uri_template), name, template.uri_template)
                )
                items.append(template)
        self._templates = templates
        return types.ListResourceTemplatesResult(resource_templates=items)

    def _owners(self, uri: str) -> list[str]:
        exact = self._uris.get(uri)
        if exact is not None:
            return [exact]
        matched = [name for pattern, name, _ in self._templates if pattern.fullmatch(uri)]
        rest = [n for n in self._relay.with_capability("resources") if n not in matched]
        return list(dict.fromkeys(matched)) + rest

    async def read_resource(self, session: str, ctx: Any, params: Any) -> Any:
        from mcp import types
        from mcp.shared.exceptions import MCPError

        uri = str(params.uri)
        first_error: MCPError | None = None
        for name in self._owners(uri):
            try:
                return await self._relay.forward(
                    name,
                    session,
                    ctx,
                    types.ReadResourceRequest(params=params),
                    types.ReadResourceResult,
                )
            except MCPError as exc:
                first_error = first_error or exc
        raise first_error or not_offered("resources")

    async def subscribe(self, session: str, ctx: Any, params: Any) -> Any:
        from mcp import types

        uri = str(params.uri)
        owners = [n for n in self._owners(uri) if self._can_subscribe(n)]
        if not owners:
            raise not_offered("resource subscriptions")
        upstream = owners[0]
        holders = self._subs.setdefault((upstream, uri), set())
        if not holders:
            await self._relay.forward(
                upstream, session, ctx, types.SubscribeRequest(params=params), types.EmptyResult
            )
        holders.add(session)
        return types.EmptyResult()

    async def unsubscribe(self, session: str, ctx: Any, params: Any) -> Any:
        from mcp import types

        uri = str(params.uri)
        for (upstream, subscribed), holders in list(self._subs.items()):
            if subscribed != uri or session not in holders:
                continue
            holders.discard(session)
            if not holders:
                del self._subs[(upstream, uri)]
                await self._relay.forward(
                    upstream,
                    session,
                    ctx,
                    types.UnsubscribeRequest(params=params),
                    types.EmptyResult,
                )
        return types.EmptyResult()

    def _can_subscribe(self, upstream: str) -> bool:
        caps = self._relay.links[upstream].capabilities
        return caps is not None and caps.resources is not None and bool(caps.resources.subscribe)

    # ---- prompts ----------------------------------------------------------------------
    async def list_prompts(self, session: str, ctx: Any) -> Any:
        from mcp import types

        listed: list[tuple[str, Any]] = []
        for name in await self._relay.each("prompts"):
            async for prompt in self._relay.links[name].pages(
                "prompts/list",
                types.ListPromptsRequest,
                types.ListPromptsResult,
                "prompts",
                self._relay.timeout_s,
            ):
                listed.append((name, prompt))
        counts = Counter(p.name for _, p in listed)
        routes: dict[str, _PromptRoute] = {}
        prompts = []
        for upstream, prompt in listed:
            exposed = f"{upstream}_{prompt.name}" if counts[prompt.name] > 1 else prompt.name
            if exposed in routes:
                continue
            routes[exposed] = _PromptRoute(upstream, prompt.name)
            prompts.append(
                prompt if exposed == prompt.name else prompt.model_copy(update={"name": exposed})
            )
        self._prompts = routes
        return types.ListPromptsResult(prompts=prompts)

    async def _prompt_route(self, session: str, ctx: Any, name: str) -> _PromptRoute:
        if name not in self._prompts:
            await self.list_prompts(session, ctx)  # a client may get a prompt it never listed
        route = self._prompts.get(name)
        if route is not None:
            return route
        offered = self._relay.with_capability("prompts")
        if not offered:
            raise not_offered("prompts")
        return _PromptRoute(offered[0], name)  # the upstream's own "not found"

    async def get_prompt(self, session: str, ctx: Any, params: Any) -> Any:
        from mcp import types

        route = await self._prompt_route(session, ctx, params.name)
        upstream_params = params.model_copy(update={"name": route.name})
        return await self._relay.forward(
            route.upstream,
            session,
            ctx,
            types.GetPromptRequest(params=upstream_params),
            types.GetPromptResult,
        )

    # ---- completion -------------------------------------------------------------------
    async def complete(self, session: str, ctx: Any, params: Any) -> Any:
        from mcp import types

        ref = params.ref
        upstream: str | None = None
        if isinstance(ref, types.PromptReference):
            route = await self._prompt_route(session, ctx, ref.name)
            upstream = route.upstream
            params = params.model_copy(update={"ref": ref.model_copy(update={"name": route.name})})
        else:
            if not self._templates:
                await self.list_templates(session, ctx)
            upstream = next((u for _, u, tpl in self._templates if tpl == ref.uri), None)
        offered = self._relay.with_capability("completions")
        if upstream is None or upstream not in offered:
            if not offered:
                raise not_offered("completions")
            upstream = upstream if upstream in offered else offered[0]
        return await self._relay.forward(
            upstream, session, ctx, types.CompleteRequest(params=params), types.CompleteResult
        )


def template_pattern(template: str) -> re.Pattern[str]:
    """A regular expression for the URIs an RFC 6570 template expands to: a simple
    ``{var}`` is one path segment, a reserved ``{+var}`` / fragment ``{#var}`` anything, a
    query ``{?a,b}`` / ``{&a}`` an optional query part."""
    out: list[str] = []
    pos = 0
    for match in re.finditer(r"\{([+#./;?&]?)([^}]*)\}", template):
        out.append(re.escape(template[pos : match.start()]))
        op = match.group(1)
        if op in ("+", "#"):
            out.append(".*")
        elif op in ("?", "&"):
            out.append(r"(?:[?&][^#]*)?")
        elif op in (".", "/", ";"):
            out.append(r"(?:[./;][^/?#]*)*")
        else:
            out.append(r"[^/?#]*")
        pos = match.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


def not_offered(what: str) -> Exception:
    from mcp.shared.exceptions import MCPError
    from mcp_types import METHOD_NOT_FOUND

    return MCPError(code=METHOD_NOT_FOUND, message=f"no upstream of this gateway offers {what}")
