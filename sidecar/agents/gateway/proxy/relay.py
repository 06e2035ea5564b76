"""Everything of MCP besides tools, relayed between the gateway's clients and its
upstreams, so that an agent pointed at the gateway loses nothing but failing calls.

- **Resources and templates**: ``resources/list`` and ``resources/templates/list`` are the
  upstreams' lists merged (every page read; a URI two upstreams list belongs to the
  first).  ``resources/read`` goes to the upstream that listed the URI, else to one whose
  template matches it, else to each upstream in turn until one has it.
- **Subscriptions**: ``resources/subscribe`` subscribes upstream once per URI, whoever
  asks; ``notifications/resources/updated`` goes to every session subscribed to the URI.
  A session's subscriptions end with it.
- **Prompts**: merged like tools (a name two upstreams use is ``UPSTREAM_NAME`` for both);
  ``prompts/get`` goes to the prompt's upstream under its own name.
- **Completion**: to the upstream of the prompt or resource template it completes.
- **Logging**: ``logging/setLevel`` is kept per session; each upstream is set to the most
  verbose level any session asked for, and a log message is relayed to the session whose
  request it came during (when one session has requests in flight on that upstream),
  else to every session that set a level at or below the message's.
- **Progress**: a request that carries a ``progressToken`` is relayed with one of the
  upstream's own, and the upstream's progress notifications go back under the client's.
- **Sampling and elicitation** requests of an upstream go to the client whose request is
  in flight on that upstream, on that request's stream.  An upstream session is shared by
  every client, so when requests of several sessions are in flight on it the gateway
  cannot tell whose the request is, and answers the upstream with an error rather than
  ask the wrong person; so it does with no request in flight, for a client that did not
  declare the capability, and for a stateless (2026-07-28) client.  The call timeout does
  not run while a client is being asked.

Upstream notifications that a list changed (resources, prompts) go to every session.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp_types import LoggingLevel, ServerCapabilities

    from sidecar.agents.gateway.proxy.upstream import UpstreamLink

from sidecar.agents.gateway.proxy.listings import Listings, not_offered

log = logging.getLogger("sidecar.agents.gateway")


def _levels() -> tuple[str, ...]:
    from mcp_types import LoggingLevel

    return tuple(get_args(LoggingLevel))


@dataclass
class _Origin:
    """A client request relayed to an upstream and not yet answered."""

    session: str
    ctx: ServerRequestContext[Any, Any]


@dataclass
class RelayStats:
    relayed: dict[str, int] = field(default_factory=dict)
    notifications: int = 0
    client_requests: int = 0
    client_requests_refused: int = 0


class Relay:
    def __init__(
        self,
        links: Mapping[str, UpstreamLink],
        live: Mapping[str, Any],
        timeout_s: float | None,
    ) -> None:
        self.links = links
        self._live = live  # session key -> its connection (handshake-era sessions)
        self.timeout_s = timeout_s
        self.stats = RelayStats()
        self._ids = itertools.count()
        self._inflight: dict[str, dict[int, _Origin]] = {}  # upstream -> requests
        self.listings = Listings(self)
        self._levels: dict[str, str] = {}  # session -> its level
        self._upstream_level: dict[str, str] = {}

    # ---- capabilities ---------------------------------------------------------------
    def with_capability(self, kind: str) -> list[str]:
        """Upstreams that declared ``kind`` (``resources``, ``prompts``, ``logging``,
        ``completions``), in order."""
        return [
            name
            for name, link in self.links.items()
            if link.capabilities is not None and getattr(link.capabilities, kind) is not None
        ]

    def shape(self, own: ServerCapabilities) -> ServerCapabilities:
        """The gateway's own capabilities, cut to what some upstream offers."""
        from mcp_types import PromptsCapability, ResourcesCapability

        caps = [link.capabilities for link in self.links.values() if link.capabilities]
        resources = [c.resources for c in caps if c.resources is not None]
        prompts = [c.prompts for c in caps if c.prompts is not None]
        update: dict[str, Any] = {
            "logging": own.logging if any(c.logging for c in caps) else None,
            "completions": own.completions if any(c.completions for c in caps) else None,
            "resources": None,
            "prompts": None,
        }
        if resources and own.resources is not None:
            update["resources"] = ResourcesCapability(
                subscribe=bool(own.resources.subscribe) and any(r.subscribe for r in resources),
                list_changed=bool(own.resources.list_changed)
                or any(r.list_changed for r in resources),
            )
        if prompts and own.prompts is not None:
            update["prompts"] = PromptsCapability(
                list_changed=bool(own.prompts.list_changed) or any(p.list_changed for p in prompts)
            )
        return own.model_copy(update=update)

    # ---- requests in flight -----------------------------------------------------------
    @contextlib.contextmanager
    def origin(self, upstream: str, session: str, ctx: Any) -> Iterator[None]:
        """Mark a client request relayed to ``upstream`` as in flight."""
        key = next(self._ids)
        self._inflight.setdefault(upstream, {})[key] = _Origin(session, ctx)
        try:
            yield
        finally:
            self._inflight.get(upstream, {}).pop(key, None)

    def _sole_origin(self, upstream: str) -> _Origin | None:
        origins = list(self._inflight.get(upstream, {}).values())
        if not origins or len({o.session for o in origins}) != 1:
            return None
        return origins[-1]

    def progress_to(self, ctx: Any) -> Any | None:
        """A progress callback relaying to ``ctx``'s client, when it asked for progress."""
        meta = ctx.meta or {}
        # the SDK hands `_meta` on with its known keys in their Python spelling
        token = meta.get("progress_token", meta.get("progressToken"))
        if token is None:
            return None

        async def forward(progress: float, total: float | None, message: str | None) -> None:
            with contextlib.suppress(Exception):  # progress is advisory
                await ctx.session.send_progress_notification(
                    token, progress, total, message, related_request_id=str(ctx.request_id)
                )

        return forward

    async def forward(
        self, upstream: str, session: str, ctx: Any, request: Any, result_type: type[Any]
    ) -> Any:
        """``request`` relayed to ``upstream`` for ``ctx``'s client: its result, or the
        upstream's own error (``MCPError``) as it came."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT

        from sidecar.agents.gateway.proxy.upstream import CallTimedOut

        method = str(request.method)
        self.stats.relayed[method] = self.stats.relayed.get(method, 0) + 1
        with self.origin(upstream, session, ctx):
            try:
                return await self.links[upstream].request(
                    unenveloped(request),
                    result_type,
                    timeout=self.timeout_s,
                    on_progress=self.progress_to(ctx),
                )
            except CallTimedOut as exc:
                raise MCPError(code=REQUEST_TIMEOUT, message=str(exc)) from None

    # ---- logging ----------------------------------------------------------------------
    async def set_level(self, session: str, ctx: Any, level: LoggingLevel) -> Any:
        from mcp import types

        self._levels[session] = level
        order = _levels()
        wanted = min(self._levels.values(), key=order.index)
        for name in self.with_capability("logging"):
            if self._upstream_level.get(name) == wanted:
                continue
            request = types.SetLevelRequest(params=types.SetLevelRequestParams(level=wanted))  # type: ignore[arg-type]
            await self.forward(name, session, ctx, request, types.EmptyResult)
            self._upstream_level[name] = wanted
        return types.EmptyResult()

    def _wants(self, session: str, level: str, default: bool) -> bool:
        order = _levels()
        floor = self._levels.get(session)
        if floor is None:
            return default
        return level in order and order.index(level) >= order.index(floor)

    async def _log(self, upstream: str, notification: Any) -> None:
        level = str(notification.params.level)
        origin = self._sole_origin(upstream)
        if origin is not None:
            if self._wants(origin.session, level, default=True):
                await self._send_to_request(origin, notification)
            return
        for session in list(self._levels):
            if self._wants(session, level, default=False):
                await self._send_to_session(session, notification)

    # ---- from the upstreams -----------------------------------------------------------
    async def notification(self, upstream: str, message: Any) -> None:
        from mcp import types

        if isinstance(message, types.LoggingMessageNotification):
            await self._log(upstream, message)
        elif isinstance(message, types.ResourceUpdatedNotification):
            for session in self.listings.subscribers(upstream, str(message.params.uri)):
                await self._send_to_session(session, message)
        elif isinstance(
            message, types.ResourceListChangedNotification | types.PromptListChangedNotification
        ):
            for session in list(self._live):
                await self._send_to_session(session, message)

    async def server_request(self, upstream: str, method: str, params: Any) -> Any:
        """An upstream's sampling or elicitation request, asked of the client whose
        request is in flight on that upstream."""
        from mcp import types
        from mcp.shared.exceptions import MCPError
        from mcp.shared.message import ServerMessageMetadata
        from mcp_types import INTERNAL_ERROR, INVALID_REQUEST

        origin = self._sole_origin(upstream)
        what = "sampling" if method == "sampling/createMessage" else "elicitation"
        if origin is None:
            return self._refuse(
                INVALID_REQUEST,
                f"the gateway cannot tell which client this {what} request is for (it is "
                "asked only during a request of one session)",
            )
        session = origin.ctx.session
        wanted = (
            types.ClientCapabilities(sampling=types.SamplingCapability())
            if what == "sampling"
            else types.ClientCapabilities(elicitation=types.ElicitationCapability())
        )
        if not session.can_send_request or not session.check_client_capability(wanted):
            return self._refuse(INVALID_REQUEST, f"the client does not take {what} requests")
        if what == "sampling":
            request: Any = types.CreateMessageRequest(params=params)
            result_type: Any = (
                types.CreateMessageResultWithTools if params.tools else types.CreateMessageResult
            )
        else:
            request = types.ElicitRequest(params=params)
            result_type = types.ElicitResult
        self.stats.client_requests += 1
        try:
            return await session.send_request(
                request,
                result_type,
                metadata=ServerMessageMetadata(related_request_id=origin.ctx.request_id),
            )
        except MCPError as exc:
            return exc.error
        except Exception as exc:
            return self._refuse(
                INTERNAL_ERROR, f"the client could not be asked: {type(exc).__name__}"
            )

    def _refuse(self, code: int, message: str) -> Any:
        from mcp import types

        self.stats.client_requests_refused += 1
        return types.ErrorData(code=code, message=message)

    async def _send_to_request(self, origin: _Origin, notification: Any) -> None:
        if origin.session in self._live and not origin.ctx.session.can_send_request:
            # answered with a JSON body (:mod:`.json_answers`): the session's own stream
            await self._send_to_session(origin.session, notification)
            return
        with contextlib.suppress(Exception):  # notifications are advisory
            await origin.ctx.session.send_notification(
                notification, related_request_id=origin.ctx.request_id
            )
            self.stats.notifications += 1

    async def _send_to_session(self, session: str, notification: Any) -> None:
        connection = self._live.get(session)
        if connection is None:
            return
        data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
        with contextlib.suppress(Exception):
            await connection.outbound.notify(data["method"], data.get("params"))
            self.stats.notifications += 1

    # ---- sessions ---------------------------------------------------------------------
    async def session_closed(self, session: str) -> None:
        """Drop what ``session`` held: its subscriptions (unsubscribed upstream when no
        other session holds them) and its log level."""
        self._levels.pop(session, None)
        await self.listings.session_closed(session)

    async def each(self, kind: str) -> list[str]:
        """The upstreams that offer ``kind``; an MCP error when none does."""
        names = self.with_capability(kind)
        if not names:
            raise not_offered(kind)
        return names

    def snapshot(self) -> dict[str, Any]:
        return {
            "relayed": dict(self.stats.relayed),
            "notifications": self.stats.notifications,
            "client_requests": self.stats.client_requests,
            "client_requests_refused": self.stats.client_requests_refused,
            "subscriptions": self.listings.subscriptions,
        }


ENVELOPE_PREFIX = "io.modelcontextprotocol/"
"""The ``_meta`` keys the 2026-07-28 protocol reserves for its request envelope."""


def unenveloped(request: Any) -> Any:
    """``request`` as the gateway sends it on: without the client's protocol envelope in
    ``_meta`` (the upstream's link speaks its own protocol version, and an upstream of
    the handshake era refuses a request that carries the other's envelope)."""
    params = getattr(request, "params", None)
    meta = getattr(params, "meta", None)
    if params is None or not meta:
        return request
    items = meta.items() if isinstance(meta, dict) else meta.model_dump(by_alias=True).items()
    kept = {k: v for k, v in items if not str(k).startswith(ENVELOPE_PREFIX)}
    if len(kept) == len(list(items)):
        return request
    return request.model_copy(update={"params": params.model_copy(update={"meta": kept or None})})
