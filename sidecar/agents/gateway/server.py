"""The gateway: an MCP server in front of upstream MCP servers that curates ``tools/list``
and guards ``tools/call`` with the failure memory, so that an agent gains from it with no
code of its own.  It is a proxy (:mod:`sidecar.agents.gateway.proxy`: the upstream links,
the relay, the exposed catalog, serving) and a guard (:mod:`sidecar.agents.gateway.guard`:
each call checked, its session, what it teaches); this module wires the two.

- ``tools/list``: every upstream tool (renamed ``UPSTREAM_NAME`` only on a clash) minus
  the hidden (evicted) ones, plus ``report_outcome``; with ``expose="search"``, only
  ``search_tools``, ``call_tool``, ``report_outcome`` and the pinned tools; either way
  ``appeal_block`` too, with a backend that keeps appeals
  (:mod:`sidecar.agents.gateway.guard.own_tools`).  Listings are kept in step with the
  backend by :mod:`sidecar.agents.gateway.guard.syncing`.
- ``tools/call``: assigned to its agent session
  (:mod:`sidecar.agents.gateway.guard.linking`: the MCP session, trace context, a
  declared id, or values linking it to an earlier output), then checked and forwarded in
  that session's state (:mod:`sidecar.agents.gateway.guard.calls`);
  :mod:`sidecar.agents.gateway.guard.sessions` says when a session is reported.
- Everything else (resources, prompts, completion, logging, progress, the upstreams'
  sampling and elicitation requests) is relayed: :mod:`sidecar.agents.gateway.proxy.relay`.

The backend is called from worker threads (:mod:`sidecar.agents.gateway.guard.workers`);
``inline_checks=True``, or a backend that says its checks are memory reads
(:func:`~sidecar.agents.gateway.guard.backend.checks_in_memory`), runs the two calls on the
call path (``hidden_tools``, ``check_views``) on the event loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import anyio

from sidecar.agents.evidence import DEFAULT_MAX_CHARS
from sidecar.agents.gateway.errors import GatewayError
from sidecar.agents.gateway.guard.answers import CONTEST_META_KEY, WARNINGS_META_KEY
from sidecar.agents.gateway.guard.approval import ApprovalPolicy
from sidecar.agents.gateway.guard.backend import (
    AppealDesk,
    GatewayBackend,
    Outcome,
    Step,
    checks_in_memory,
)
from sidecar.agents.gateway.guard.calls import CallPath, CallSettings
from sidecar.agents.gateway.guard.contest import Contest, ContestPolicy
from sidecar.agents.gateway.guard.learning import Learning
from sidecar.agents.gateway.guard.linking import ConnectionState, Linker, token_name
from sidecar.agents.gateway.guard.own_tools import (
    APPEAL_BLOCK,
    CALL_TOOL,
    OWN_TOOLS,
    REPORT_OUTCOME,
    SEARCH_TOOLS,
    Declared,
    OwnTools,
    call_tool_target,
    own_tools,
)
from sidecar.agents.gateway.guard.sessions import LINK_WINDOW_S, LinkedSessionBook
from sidecar.agents.gateway.guard.syncing import CatalogSync
from sidecar.agents.gateway.guard.workers import GatewayStats, Reporter, Workers
from sidecar.agents.gateway.metrics import route as metrics_route
from sidecar.agents.gateway.proxy import json_answers
from sidecar.agents.gateway.proxy.bulk import PresentingStream, present_http_responses
from sidecar.agents.gateway.proxy.catalog import Catalog
from sidecar.agents.gateway.proxy.protocol import Connections, build_server
from sidecar.agents.gateway.proxy.relay import Relay
from sidecar.agents.gateway.proxy.security import BearerGate, loopback_only
from sidecar.agents.gateway.proxy.upstream import Upstream, UpstreamLink
from sidecar.agents.sessions import SessionLimits
from sidecar.errors import SidecarError
from sidecar.trust.principals import Principals

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.types import CallToolResult, Tool

    from sidecar.agents.gateway.proxy.security import ASGIApp

__all__ = [
    "CALL_TOOL",
    "CONTEST_META_KEY",
    "DEFAULT_CALL_TIMEOUT_S",
    "REPORT_OUTCOME",
    "SEARCH_TOOLS",
    "WARNINGS_META_KEY",
    "Gateway",
    "GatewayOptions",
    "build_gateway",
]

Expose = Literal["all", "search"]
DEFAULT_CALL_TIMEOUT_S = 30.0
"""Below the 60 s most MCP clients wait for a request: the agent gets the gateway's
answer, naming the upstream, rather than its own client's timeout."""
_FORWARDED_META = ("traceparent", "tracestate", "baggage")


@dataclass(frozen=True)
class GatewayOptions:
    expose: Expose = "all"
    pins: frozenset[str] = frozenset()
    limits: SessionLimits = field(default_factory=SessionLimits)
    link_window_s: float = LINK_WINDOW_S
    token: str | None = None
    principals: Principals | None = None
    """Named tokens the gateway also accepts; each session is reported as its token's
    (``gateway:<name>``)."""
    max_chars: int = DEFAULT_MAX_CHARS
    refresh_s: float = 30.0
    path: str = "/mcp"
    name: str = "sidecar-gateway"
    connect_timeout_s: float = 30.0
    inline_checks: bool = False
    json_response: bool = False
    call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S
    contest: ContestPolicy | None = None
    warning_text: bool = True
    warn_risk: float | None = None
    """Warn an allowed call when its session's risk of ending abandoned is at least this
    (``None``: never)."""
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    """The calls held until an operator approves them (none by default)."""
    raw_calls: bool = True
    """``tools/call`` forwarded upstream as JSON-RPC bodies below the SDK's client
    session, where the link's protocol allows (:mod:`sidecar.agents.gateway.proxy.forwarding`)."""

    def __post_init__(self) -> None:
        if self.expose not in ("all", "search"):
            raise GatewayError(f"expose must be 'all' or 'search', not {self.expose!r}")
        timeout = self.call_timeout_s
        if timeout is not None and not timeout > 0:
            raise GatewayError(f"call_timeout_s must be positive (or None), not {timeout!r}")


class Gateway:
    """Build with :func:`build_gateway`; serve with :attr:`asgi_app` (streamable HTTP,
    lifespan included) or :meth:`run_stdio`."""

    def __init__(
        self,
        backend: GatewayBackend,
        upstreams: Sequence[Upstream],
        options: GatewayOptions | None = None,
    ) -> None:
        options = options or GatewayOptions()
        names = [u.name for u in upstreams]
        if not names or len(set(names)) != len(names):
            raise GatewayError("give at least one upstream, each under its own name")
        self.backend = backend
        self.options = options
        self.expose: Expose = options.expose
        self.token, self.path = options.token, options.path
        self.stats = GatewayStats()
        self.book = LinkedSessionBook(options.limits, options.link_window_s)
        self.linker = Linker(self.book)
        self.catalog = Catalog(reserved=OWN_TOOLS)
        self.contest = Contest(options.contest)
        self.links = _links(upstreams, self, options)
        live: dict[str, Any] = {}  # connection id -> its connection, for notifications
        self.relay = Relay(self.links, live, options.call_timeout_s)
        self.connections = Connections(self.linker, live, self._connection_closed)
        self._live = live
        self.workers = Workers(options.inline_checks or checks_in_memory(backend))
        self.learning = Learning(self.stats)
        self.reporter = Reporter(
            backend, self.workers, self.book, self.stats, self.learning.settle_all
        )
        self.syncer = CatalogSync(
            self.catalog,
            self.links,
            backend,
            (self.workers, self.stats),
            options.refresh_s,
            self._announce_list_changed,
        )
        self.calls = CallPath(
            backend,
            self.catalog,
            self.book,
            self.links,
            self.relay,
            self.contest,
            (self.workers, self.reporter, self.stats, self.learning),
            _call_settings(options, backend),
            self.viewer,
        )
        self.own = OwnTools(
            self.catalog, self._steps, self._search, self._declare, self._appeal_desk(backend)
        )
        self._tg: Any = None
        self._server = build_server(self, options.name)
        self._asgi: ASGIApp | None = None

    # ---- serving -------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Gateway]:
        """Upstream links up and synced, the idle sweeper running; on exit every open
        session is concluded and reported."""
        with _first_sidecar_error():
            async with self._running() as gateway:
                yield gateway

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[Gateway]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                for link in self.links.values():
                    await tg.start(link.run)
                await self.sync(force=True)
                self.learning.start(tg)
                self.reporter.start(tg)
                yield self
            finally:
                await self.reporter.stop()  # settles what is still queued first
                self.learning.stop()
                for link in self.links.values():
                    link.stop()
                tg.cancel_scope.cancel()
                self._tg = None

    @property
    def asgi_app(self) -> ASGIApp:
        """Streamable HTTP at :attr:`path`, loopback ``Host``/``Origin`` only, behind the
        bearer token when one was given.  A request is answered on an event stream, which
        carries what the upstream sends during it (progress, log messages, sampling and
        elicitation requests), but for a ``tools/call`` nothing else can reach
        (:mod:`sidecar.agents.gateway.proxy.json_answers`: a plain JSON body);
        ``json_response=True`` answers every request with a plain JSON body, which is
        faster but relays none of that.  Served on its own, its
        lifespan runs :meth:`lifespan`; mounted inside another app, run :meth:`lifespan`
        from that app's lifespan."""
        if self._asgi is None:
            starlette_app = self._server.streamable_http_app(
                streamable_http_path=self.path,
                transport_security=loopback_only(),
                json_response=self.options.json_response,
            )
            app: ASGIApp = starlette_app
            manager = self._server.session_manager
            present_http_responses(manager)
            if not self.options.json_response:
                json_answers.hook(manager)
                app = json_answers.JsonAnswers(app, self.path, self.connections.quiet)
            starlette_app.router.routes.append(metrics_route(self.snapshot))
            starlette_app.router.lifespan_context = self._app_lifespan
            principals = self.options.principals
            guarded = self.token or (principals is not None and len(principals) > 0)
            self._asgi = BearerGate(app, self.token, principals) if guarded else app
        return self._asgi

    @contextlib.asynccontextmanager
    async def _app_lifespan(self, _app: Any) -> AsyncIterator[None]:
        async with self.lifespan():
            yield  # no state for the app: a value here would become its request state

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[Gateway]:
        """What serving :attr:`asgi_app` needs running: :meth:`running` and the MCP
        transport's session manager."""
        self.asgi_app  # noqa: B018 (the session manager is made with the app)
        async with self.running(), self._server.session_manager.run():
            yield self

    async def run_stdio_async(self) -> None:
        from mcp.server.stdio import stdio_server

        async with self.running(), stdio_server() as (read, write):
            options = self._server.create_initialization_options()
            await self._server.run(read, PresentingStream(write), options)

    def run_stdio(self) -> None:
        anyio.run(self.run_stdio_async)

    def serve_http(self, host: str = "127.0.0.1", port: int = 8766) -> None:
        """Serve until interrupted (SIGINT or SIGTERM); see
        :func:`sidecar.agents.gateway.proxy.serving.serve_http`."""
        from sidecar.agents.gateway.proxy.serving import serve_http

        serve_http(self, host, port)

    # ---- tools/list ----------------------------------------------------------------
    async def list_tools(self) -> list[Tool]:
        """What a client is shown now."""
        await self.sync()
        hidden = await self.workers.checked(self.backend.hidden_tools)
        own = own_tools()
        if self.expose == "search":
            listed = [own[SEARCH_TOOLS], own[CALL_TOOL], own[REPORT_OUTCOME]]
            listed += [t for t in self.catalog.tools() if t.name in self.options.pins]
        else:
            listed = [*self.catalog.tools(), own[REPORT_OUTCOME]]
        if self.own.file is not None:
            listed.append(own[APPEAL_BLOCK])
        return [t for t in listed if not self.calls.names(t.name) & hidden]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        own = own_tools().get(name)
        return own.input_schema if own is not None else self.catalog.input_schema(name)

    async def sync(self, force: bool = False) -> list[str]:
        """See :meth:`sidecar.agents.gateway.guard.syncing.CatalogSync.sync`."""
        return await self.syncer.sync(force)

    # ---- what the upstream links report (LinkEvents) -------------------------------
    def tools_changed(self, upstream: str) -> None:
        self.syncer.changed(upstream)
        if self._tg is not None:
            self._tg.start_soon(self.sync)

    async def notification(self, upstream: str, message: Any) -> None:
        await self.relay.notification(upstream, message)

    async def server_request(self, upstream: str, method: str, params: Any) -> Any:
        return await self.relay.server_request(upstream, method, params)

    async def _announce_list_changed(self) -> None:
        for connection in list(self._live.values()):
            with contextlib.suppress(Exception):
                await connection.outbound.notify("notifications/tools/list_changed", None)

    # ---- tools/call ----------------------------------------------------------------
    async def on_call(
        self, ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any]
    ) -> CallToolResult:
        origin = self.connections.origin(ctx)
        client = self.connections.relay_key(ctx, count=False)
        # what this principal's earlier calls taught is in its sessions before anything
        # reads them (linking, the check, search, a declared outcome)
        self.learning.settle(origin.principal)
        searching = self.expose == "search"
        if name == REPORT_OUTCOME or (name == SEARCH_TOOLS and searching):
            own = self.linker.for_own_tool(origin)
            key = None if own is None else own.key
            if name == REPORT_OUTCOME:
                return await self.own.report_outcome(key, arguments)
            found = await self.own.search(key, arguments, self.viewer(origin.principal))
            if not found.is_error and found.structured_content:
                offered = [t["name"] for t in found.structured_content.get("tools", [])]
                lookup = {"kind": "lookup", "query": arguments["query"], "offered": offered}
                self.reporter.note(key, origin.principal, lookup)
            return found
        if name == APPEAL_BLOCK and self.own.file is not None:
            self.linker.called(origin.connection)
            return await self.own.appeal(origin.principal, arguments)
        if name == CALL_TOOL and searching:
            target = call_tool_target(arguments)
            if not isinstance(target, tuple):
                self.linker.called(origin.connection)
                return target
            name, arguments = target
        link = self.linker.for_call(origin, name, arguments)
        return await self.calls.call(link, name, arguments, _forwarded_meta(ctx), ctx, client)

    def _appeal_desk(self, backend: GatewayBackend) -> Any:
        """What files an agent's appeal (on the writes' worker thread), for a backend
        that keeps appeals (``None`` else: no ``appeal_block``)."""
        if not isinstance(backend, AppealDesk):
            return None

        async def file(*appeal: Any) -> Any:
            return await self.workers.write(backend.appeal, *appeal)

        return file

    def _steps(self, session: str | None) -> list[Step]:
        return [] if session is None else self.book.steps(session)

    async def _search(self, query: str, k: int, steps: list[Step], viewer: str | None) -> Any:
        await self.sync()
        return await self.workers.read(self.backend.search, query, k, steps, viewer)

    def viewer(self, principal: str) -> str | None:
        """Whom a principal's answers are worded for: its named agent token; ``None`` for
        an operator's token, the home's token, or none (:mod:`sidecar.rules.wording`)."""
        name = token_name(principal)
        principals = self.options.principals
        if not name or principals is None or principals.role_of(name) != "agent":
            return None
        return name

    async def _declare(self, session: str | None, outcome: Outcome, task: str | None) -> Declared:
        if session is None:
            return Declared(False, 0, "no session to report: no call of this client was seen")
        steps = len(self.book.steps(session))
        known = self.book.known(session)
        report = self.book.declare(session, outcome, task)
        if report is not None:
            await self.reporter.report(report)
            return Declared(True, len(report.steps))
        if steps and not known:
            return Declared(False, steps, _UNLINKED)
        return Declared(False, steps)

    async def _connection_closed(self, state: ConnectionState) -> None:
        with contextlib.suppress(Exception):
            await self.relay.session_closed(state.id)
        self.learning.settle(state.principal)
        if state.key is not None and state.kept:
            # a client that kept its session ended it
            self.reporter.schedule(self.book.close(state.key, "closed"))

    def snapshot(self) -> dict[str, Any]:
        """Counters for logs and tests."""
        return {
            **asdict(self.stats),
            "open_sessions": len(self.book),
            "crossed_sessions": self.connections.crossed,
            "sessions": asdict(self.book.stats),
            "linked": dict(self.linker.stats),
            "upstream_connects": {n: link.connects for n, link in self.links.items()},
            "raw_calls": {n: link.raw.sent if link.raw else 0 for n, link in self.links.items()},
            "contest": self.contest.snapshot(),
            "relay": self.relay.snapshot(),
        }


_UNLINKED = (
    "not reported: this session's one call could not be tied to the calls before it "
    "(keep one MCP session per task, or send a Sidecar-Session header or trace context)"
)


def _call_settings(options: GatewayOptions, backend: GatewayBackend) -> CallSettings:
    appeal = APPEAL_BLOCK if isinstance(backend, AppealDesk) else None
    return CallSettings(
        options.max_chars,
        options.call_timeout_s,
        options.warning_text,
        options.approval,
        appeal,
        options.warn_risk,
    )


def build_gateway(
    backend: GatewayBackend,
    upstreams: Sequence[Upstream | str],
    *,
    sessions: SessionLimits | None = None,
    idle_s: float | None = None,
    report_clean: bool | None = None,
    pins: Sequence[str] = (),
    **options: Any,
) -> Gateway:
    """A gateway over ``upstreams`` (:class:`Upstream` or ``NAME=URL`` /
    ``NAME=COMMAND ARGS...`` strings) asking ``backend``; ``options`` are the fields of
    :class:`GatewayOptions`.  ``sessions``: the bounds of its session book (default
    :class:`~sidecar.agents.sessions.SessionLimits`), with ``idle_s`` and
    ``report_clean`` replacing theirs when given.

    The backend is called from worker threads; with ``inline_checks``, ``hidden_tools``
    and ``check_views`` run on the event loop instead (for a backend whose checks never
    block: it saves a thread hop per call).  ``call_timeout_s``: how long an upstream
    may take to answer a request (``None``: no limit); ``contest``: the sampling of
    blocked calls (:class:`~sidecar.agents.gateway.guard.contest.ContestPolicy`, on by default for
    tools without side effects); ``warning_text``: a warned call's result carries the
    warning as text for the model (on by default); ``warn_risk``: warn an allowed call
    when its session's risk of ending abandoned reaches it; ``link_window_s``: how long an
    inferred session may be joined (:mod:`sidecar.agents.gateway.guard.linking`)."""
    parsed = [u if isinstance(u, Upstream) else Upstream.parse(u) for u in upstreams]
    limits = sessions or SessionLimits()
    if idle_s is not None:
        limits = replace(limits, idle_s=idle_s)
    if report_clean is not None:
        limits = replace(limits, report_clean=report_clean)
    return Gateway(backend, parsed, GatewayOptions(limits=limits, pins=frozenset(pins), **options))


# ---- helpers
def _links(
    upstreams: Sequence[Upstream], events: Gateway, options: GatewayOptions
) -> dict[str, UpstreamLink]:
    return {
        u.name: UpstreamLink(
            u,
            events,
            options.connect_timeout_s,
            relay_requests=not options.json_response,
            raw_calls=options.raw_calls,
        )
        for u in upstreams
    }


@contextlib.contextmanager
def _first_sidecar_error() -> Iterator[None]:
    """A task group wraps what its tasks raise in a group: the one error of the tree
    that says what went wrong (an upstream that cannot be reached...) comes out alone,
    so that the shells show its message and exit code, not a traceback."""
    try:
        yield
    except BaseExceptionGroup as group:
        found = _find_sidecar_error(group)
        if found is None:
            raise
        raise found from None


def _find_sidecar_error(exc: BaseException) -> SidecarError | None:
    if isinstance(exc, SidecarError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find_sidecar_error(inner)
            if found is not None:
                return found
    return None


def _forwarded_meta(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
    meta: dict[str, Any] = dict(ctx.meta or {})
    kept = {k: meta[k] for k in _FORWARDED_META if isinstance(meta.get(k), str)}
    return kept or None
