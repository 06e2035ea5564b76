"""The gateway: an MCP server in front of upstream MCP servers that curates ``tools/list``
and guards ``tools/call`` with the failure memory, so that an agent gains from it with no
code of its own.

- ``tools/list``: every upstream tool (renamed ``UPSTREAM_NAME`` only on a clash) minus
  the hidden (evicted) ones, plus ``report_outcome``; with ``expose="search"``, only
  ``search_tools``, ``call_tool``, ``report_outcome`` and the pinned tools.  Upstream
  listings are synced into the backend at start, when an upstream announces
  ``tools/list_changed``, and on a downstream ``tools/list`` once ``refresh_s`` has
  passed since the last sync.
- ``tools/call``: ``check_call(steps so far, tool, arguments)`` first (under every name
  the tool has had, :mod:`sidecar.gateway.catalog`).  ``block``: an ``isError`` result
  naming the rule, its evidence and its pointer, not forwarded (but for a bounded sample,
  :mod:`sidecar.gateway.contest`); ``warn``: forwarded, the reasons in the result's
  ``_meta["sidecar/warnings"]``; ``allow``: forwarded.  A call the upstream does not
  answer within ``call_timeout_s`` is answered with an ``isError`` result saying so (and
  cancelled upstream).  Each forwarded call becomes a bounded, redacted step of the
  caller's session (:mod:`sidecar.gateway.evidence`; a large result is taken on a worker
  thread, so it never holds up another session), and :mod:`sidecar.gateway.sessions`
  says when a session is reported.
- Everything else (resources, prompts, completion, logging, progress, the upstreams'
  sampling and elicitation requests) is relayed: :mod:`sidecar.gateway.relay`.

A session is the MCP connection: the ``Mcp-Session-Id`` session over streamable HTTP,
the process over stdio.  Requests of the stateless 2026-07-28 era have no connection to
group them by; they are grouped by ``_meta["sidecar/session"]`` when the client sends
one, else by their W3C trace id (``_meta.traceparent``), else each call stands alone.

The backend is called from worker threads (reads and writes apart, see
:mod:`sidecar.gateway.backend`); ``inline_checks=True`` runs the two calls on the call
path (``hidden_tools``, ``check_call``) on the event loop, for a backend whose checks
never block.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio

from sidecar.errors import SidecarError
from sidecar.gateway.backend import Decision, GatewayBackend, Reason, Step, Verdict
from sidecar.gateway.bulk import PresentingStream, present_http_responses
from sidecar.gateway.catalog import Catalog
from sidecar.gateway.contest import Contest, ContestPolicy
from sidecar.gateway.errors import GatewayError, UpstreamUnavailable
from sidecar.gateway.evidence import (
    DEFAULT_MAX_CHARS,
    result_size,
    step_from_error,
    step_from_result,
)
from sidecar.gateway.relay import Relay
from sidecar.gateway.security import BearerGate, is_loopback, loopback_only
from sidecar.gateway.sessions import SessionBook, SessionLimits, SessionReport
from sidecar.gateway.upstream import CallTimedOut, Upstream, UpstreamLink, is_link_failure

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from mcp.server.context import ServerRequestContext
    from mcp.types import CallToolResult, Tool

    from sidecar.gateway.security import ASGIApp

log = logging.getLogger("sidecar.gateway")

Expose = Literal["all", "search"]
SEARCH_TOOLS, CALL_TOOL, REPORT_OUTCOME = "search_tools", "call_tool", "report_outcome"
OWN_TOOLS = frozenset({SEARCH_TOOLS, CALL_TOOL, REPORT_OUTCOME})
SESSION_META_KEY = "sidecar/session"
WARNINGS_META_KEY = "sidecar/warnings"
CONTEST_META_KEY = "sidecar/contest"
DEFAULT_CALL_TIMEOUT_S = 30.0
"""Below the 60 s most MCP clients wait for a request: the agent gets the gateway's
answer, naming the upstream, rather than its own client's timeout."""
INLINE_EVIDENCE_CHARS = 2_048
"""Results up to this size become evidence on the event loop (a fraction of a
millisecond); larger ones on a worker thread."""
_SEVERITY: dict[Decision, int] = {"allow": 0, "warn": 1, "block": 2}
_CONNECTION_KEY = "sidecar.gateway.session"
_ALONE = "call:"
_FORWARDED_META = ("traceparent", "tracestate", "baggage")

INSTRUCTIONS = (
    "Tools behind this gateway are checked against a memory of calls that failed in "
    "earlier sessions: a call known to fail is refused with the rule and evidence, a "
    "risky one carries warnings. Call report_outcome when you finish or give up."
)


@dataclass
class GatewayStats:
    calls: int = 0
    forwarded: int = 0
    blocked: int = 0
    warned: int = 0
    refused_hidden: int = 0
    upstream_errors: int = 0
    timeouts: int = 0
    contest_samples: int = 0
    syncs: int = 0
    sync_failures: int = 0
    reports: int = 0
    report_failures: int = 0


class Gateway:
    """Build with :func:`build_gateway`; serve with :attr:`asgi_app` (streamable HTTP,
    lifespan included) or :meth:`run_stdio`."""

    def __init__(
        self,
        backend: GatewayBackend,
        upstreams: Sequence[Upstream],
        *,
        expose: Expose = "all",
        pins: Sequence[str] = (),
        limits: SessionLimits | None = None,
        token: str | None = None,
        max_chars: int = DEFAULT_MAX_CHARS,
        refresh_s: float = 30.0,
        path: str = "/mcp",
        name: str = "sidecar-gateway",
        connect_timeout_s: float = 30.0,
        inline_checks: bool = False,
        json_response: bool = False,
        call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S,
        contest: ContestPolicy | None = None,
    ) -> None:
        if expose not in ("all", "search"):
            raise GatewayError(f"expose must be 'all' or 'search', not {expose!r}")
        names = [u.name for u in upstreams]
        if not names or len(set(names)) != len(names):
            raise GatewayError("give at least one upstream, each under its own name")
        if call_timeout_s is not None and not call_timeout_s > 0:
            raise GatewayError(f"call_timeout_s must be positive (or None), not {call_timeout_s!r}")
        self.backend = backend
        self.expose: Expose = expose
        self.pins = frozenset(pins)
        self.book = SessionBook(limits)
        self.max_chars = max_chars
        self.refresh_s = refresh_s
        self.path = path
        self.token = token
        self.stats = GatewayStats()
        self.catalog = Catalog(reserved=OWN_TOOLS)
        self.call_timeout_s = call_timeout_s
        self.contest = Contest(contest)
        self.links = {
            u.name: UpstreamLink(u, self, connect_timeout_s, relay_requests=not json_response)
            for u in upstreams
        }
        self._live: dict[str, Any] = {}  # session key -> its connection, for notifications
        self.relay = Relay(self.links, self._live, call_timeout_s)
        # reads (checks, searches) and writes (reports, syncs) on threads of their own, so
        # that a slow write never holds up a session's check; results too large to take
        # on the event loop on a third
        self._reads = anyio.CapacityLimiter(1)
        self._writes = anyio.CapacityLimiter(1)
        self._heavy = anyio.CapacityLimiter(1)
        self._inline_checks = inline_checks
        self._json_response = json_response
        self._dirty: set[str] = set()
        self._last_sync = float("-inf")
        self._sync_lock = anyio.Lock()
        self._tg: TaskGroup | None = None
        self._inflight = 0  # scheduled reports not yet handed to the backend
        self._server = self._build_server(name)
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
                tg.start_soon(self._sweep)
                yield self
            finally:
                with anyio.CancelScope(shield=True):
                    for report in self.book.close_all():
                        await self._report(report)
                    with anyio.move_on_after(30):
                        while self._inflight:
                            await anyio.sleep(0.01)
                for link in self.links.values():
                    link.stop()
                tg.cancel_scope.cancel()
                self._tg = None

    @property
    def asgi_app(self) -> ASGIApp:
        """Streamable HTTP at :attr:`path`, loopback ``Host``/``Origin`` only, behind the
        bearer token when one was given.  A request is answered on an event stream, which
        carries what the upstream sends during it (progress, log messages, sampling and
        elicitation requests); ``json_response=True`` answers with a plain JSON body
        instead, which is faster but relays none of that.  Served on its own, its
        lifespan runs :meth:`lifespan`; mounted inside another app, run :meth:`lifespan`
        from that app's lifespan."""
        if self._asgi is None:
            app = self._server.streamable_http_app(
                streamable_http_path=self.path,
                transport_security=loopback_only(),
                json_response=self._json_response,
            )
            present_http_responses(self._server.session_manager)
            app.router.lifespan_context = self._app_lifespan
            self._asgi = BearerGate(app, self.token) if self.token else app
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
        """Serve until interrupted (SIGINT or SIGTERM).  A non-loopback ``host`` needs a
        token.  Raises what stops it from serving (an upstream unreachable at start:
        :class:`~sidecar.errors.UpstreamUnavailable`) before it serves."""
        from sidecar.api.serve import bind
        from sidecar.gateway.serving import serve_on

        if not is_loopback(host) and not self.token:
            raise GatewayError(f"refusing to bind {host} (not loopback) without a token")
        sock = bind(host, port)
        try:
            anyio.run(serve_on, self, sock, None)
        finally:
            sock.close()

    # ---- the MCP server ------------------------------------------------------------
    def _build_server(self, name: str) -> Any:
        from mcp import types
        from mcp.server.lowlevel import NotificationOptions, Server

        gateway = self
        relay = self.relay

        class _Server(Server[Any]):
            def create_initialization_options(self, *args: Any, **kwargs: Any) -> Any:
                if not args and "notification_options" not in kwargs:
                    kwargs["notification_options"] = NotificationOptions(
                        tools_changed=True, resources_changed=True, prompts_changed=True
                    )
                return super().create_initialization_options(*args, **kwargs)

            def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
                # what the gateway can relay, cut to what its upstreams offer
                return relay.shape(super().get_capabilities(*args, **kwargs))

        async def on_list_tools(
            ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            gateway._session_key(ctx)
            return types.ListToolsResult(tools=await gateway.list_tools())

        async def on_call_tool(
            ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            return await gateway._on_call(ctx, params.name, params.arguments or {})

        def keyed(method: Any, with_params: bool = True) -> Any:
            async def handler(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
                key = gateway._session_key(ctx)
                if with_params:
                    return await method(key, ctx, params)
                return await method(key, ctx)

            return handler

        async def on_set_level(
            ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
        ) -> types.EmptyResult:
            result: types.EmptyResult = await relay.set_level(
                gateway._session_key(ctx), ctx, params.level
            )
            return result

        server = _Server(
            name,
            instructions=INSTRUCTIONS,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
            on_list_resources=keyed(relay.list_resources, with_params=False),
            on_list_resource_templates=keyed(relay.list_templates, with_params=False),
            on_read_resource=keyed(relay.read_resource),
            on_subscribe_resource=keyed(relay.subscribe),
            on_unsubscribe_resource=keyed(relay.unsubscribe),
            on_list_prompts=keyed(relay.list_prompts, with_params=False),
            on_get_prompt=keyed(relay.get_prompt),
            on_completion=keyed(relay.complete),
            get_tool_input_schema=self._input_schema,
        )
        # registered here, not as on_set_logging_level, which warns that 2026-07-28 drops
        # logging: the handshake-era clients the gateway serves still use it
        server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)
        return server

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        own = _own_tools().get(name)
        return own.input_schema if own is not None else self.catalog.input_schema(name)

    # ---- tools/list ----------------------------------------------------------------
    async def list_tools(self) -> list[Tool]:
        """What a client is shown now."""
        await self.sync()
        hidden = await self._checked(self.backend.hidden_tools)
        own = _own_tools()
        if self.expose == "search":
            listed = [own[SEARCH_TOOLS], own[CALL_TOOL], own[REPORT_OUTCOME]]
            listed += [t for t in self.catalog.tools() if t.name in self.pins]
        else:
            listed = [*self.catalog.tools(), own[REPORT_OUTCOME]]
        return [t for t in listed if not self._names(t.name) & hidden]

    def _names(self, exposed: str) -> set[str]:
        """Every name the memory may know the tool ``exposed`` by (:mod:`.catalog`)."""
        route = self.catalog.route(exposed)
        return {exposed} if route is None else {exposed, route.plain, route.prefixed}

    async def sync(self, force: bool = False) -> list[str]:
        """Re-list the upstreams that changed (all of them when ``force`` or when
        ``refresh_s`` has passed) and sync the catalogs that moved; returns their names."""
        async with self._sync_lock:
            stale = anyio.current_time() - self._last_sync >= self.refresh_s
            todo = set(self.links) if force or stale else set(self._dirty)
            if not todo:
                return []
            self._dirty -= todo
            for name in sorted(todo):
                try:
                    self.catalog.update(name, await self.links[name].list_tools())
                except Exception as exc:
                    if force:
                        raise UpstreamUnavailable(name, str(exc)[:300]) from exc
                    log.warning('{"event": "list_failed", "upstream": "%s"}', name)
            if todo == set(self.links):
                self._last_sync = anyio.current_time()
            changed = self.catalog.changed_sources()
            for source in changed:
                definitions = self.catalog.definitions(source)
                try:
                    await self._write(self.backend.sync_tools, source, definitions)
                except Exception as exc:
                    if force:
                        raise  # at start: the gateway cannot serve without its memory
                    # the tools are listed and guarded all the same; retried next time
                    self.stats.sync_failures += 1
                    log.warning(
                        '{"event": "sync_failed", "upstream": "%s", "type": "%s"}',
                        source,
                        type(exc).__name__,
                    )
                    continue
                self.catalog.mark_synced(source, definitions)
                self.stats.syncs += 1
        if changed and not force:
            await self._announce_list_changed()
        return changed

    # ---- what the upstream links report (LinkEvents) -------------------------------
    def tools_changed(self, upstream: str) -> None:
        self._dirty.add(upstream)
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
    async def _on_call(
        self, ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any]
    ) -> CallToolResult:
        key = self._session_key(ctx)
        if name == SEARCH_TOOLS and self.expose == "search":
            return await self._search(key, arguments)
        if name == CALL_TOOL and self.expose == "search":
            inner = arguments.get("name")
            inner_args = arguments.get("arguments") or {}
            if not isinstance(inner, str) or not isinstance(inner_args, dict):
                return _error("call_tool needs `name` (a string) and `arguments` (an object)")
            if inner in OWN_TOOLS:
                return _error(f"call {inner} directly")
            return await self.call(key, inner, inner_args, _forwarded_meta(ctx), ctx)
        if name == REPORT_OUTCOME:
            return await self._declare(key, arguments)
        return await self.call(key, name, arguments, _forwarded_meta(ctx), ctx)

    async def call(
        self,
        session: str,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None = None,
        ctx: ServerRequestContext[Any, Any] | None = None,
    ) -> CallToolResult:
        """The guarded call of tool ``name`` in session ``session`` (``ctx``: the client's
        request, to relay progress and the upstream's requests to)."""
        self.stats.calls += 1
        route = self.catalog.route(name)
        if route is None:
            return _error(f"tool not available: {name}")
        steps = self.book.steps(session)
        hidden, verdict = await self._checked(self._guard, steps, name, arguments)
        if hidden:
            self.stats.refused_hidden += 1
            return _error(f"tool not available: {name}")
        sampled = False
        if verdict.decision == "block":
            sampled = self.contest.sample(self.catalog.tool(name), verdict.reasons)
            if not sampled:
                self.stats.blocked += 1
                return _error(_blocked_text(name, verdict.reasons))
            self.stats.contest_samples += 1
        from mcp.shared.exceptions import MCPError

        link = self.links[route.upstream]
        try:
            with contextlib.ExitStack() as stack:
                on_progress = None
                if ctx is not None:
                    stack.enter_context(self.relay.origin(route.upstream, session, ctx))
                    on_progress = self.relay.progress_to(ctx)
                result = await link.call_tool(
                    route.name,
                    arguments,
                    meta,
                    timeout=self.call_timeout_s,
                    on_progress=on_progress,
                )
        except CallTimedOut as exc:
            self.stats.timeouts += 1
            error = f"timed out after {exc.timeout:g} s"
            self._record(session, step_from_error(name, arguments, error, self.max_chars), sampled)
            return _error(
                f"upstream {route.upstream}: {name} did not answer within {exc.timeout:g} s "
                "(the gateway's call timeout, SIDECAR_GATEWAY_CALL_TIMEOUT); the call was "
                "cancelled upstream"
            )
        except Exception as exc:
            self.stats.upstream_errors += 1
            if isinstance(exc, MCPError) and not is_link_failure(exc):
                # the upstream answered with a protocol error: the caller gets it as is
                step = step_from_error(name, arguments, exc.error.message, self.max_chars)
                self._record(session, step, sampled)
                raise
            message = f"upstream {route.upstream} failed: {_exception_text(exc)}"
            self._record(
                session, step_from_error(name, arguments, message, self.max_chars), sampled
            )
            return _error(message[:500])
        self.stats.forwarded += 1
        step = await self._evidence(
            result_size(result.structured_content, result.content),
            functools.partial(
                step_from_result,
                name,
                arguments,
                structured=result.structured_content,
                content=result.content,
                is_error=result.is_error,
                max_chars=self.max_chars,
            ),
        )
        self._record(session, step, sampled)
        if verdict.decision != "allow":
            self.stats.warned += 1
            update: dict[str, Any] = {WARNINGS_META_KEY: [_reason_dict(r) for r in verdict.reasons]}
            if sampled:
                update[CONTEST_META_KEY] = {
                    "sampled": True,
                    "note": "the memory would have refused this call; it was forwarded as a "
                    "sample, so that its outcome can confirm or contest the rule",
                }
            result = result.model_copy(update={"meta": {**(result.meta or {}), **update}})
        return result

    def _guard(
        self, steps: list[Step], name: str, arguments: dict[str, Any]
    ) -> tuple[bool, Verdict]:
        # one worker-thread hop for every question
        if self._names(name) & self.backend.hidden_tools():
            return True, Verdict.allow()
        verdicts = [
            self.backend.check_call(view_steps, tool, arguments)
            for view_steps, tool in self.catalog.views(steps, name)
        ]
        return False, _strictest(verdicts)

    def _record(self, session: str, step: Step, flag: bool = False) -> None:
        for report in self.book.record(session, step):
            self._schedule(report)
        if flag:
            self.book.flag(session)  # a sample's outcome is evidence, even a success
        if session.startswith(_ALONE):
            # a stateless call that names no session is a session of its own: done now
            alone = self.book.close(session, "closed")
            if alone is not None:
                self._schedule(alone)

    async def _evidence(self, size: int, build: Any) -> Step:
        if size <= INLINE_EVIDENCE_CHARS:
            step: Step = build()
            return step
        return await anyio.to_thread.run_sync(build, limiter=self._heavy)

    # ---- the gateway's own tools ---------------------------------------------------
    async def _search(self, session: str, arguments: dict[str, Any]) -> CallToolResult:
        from mcp import types

        query = arguments.get("query")
        k = arguments.get("k", 5)
        if not isinstance(query, str) or not query.strip():
            return _error("search_tools needs a non-empty `query`")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 50:
            return _error("`k` must be an integer from 1 to 50")
        await self.sync()
        steps = self.book.steps(session)
        hits = await self._read(self.backend.search, query, k, steps)
        found = []
        for hit in hits:
            tool = self.catalog.tool(hit.tool_id)
            if tool is None:
                continue  # the index knows a tool no upstream lists any more
            found.append(
                {
                    "name": hit.tool_id,
                    "description": tool.description or hit.description,
                    "inputSchema": tool.input_schema,
                    "score": hit.score,
                    "warnings": list(hit.warnings),
                }
            )
        payload = {"tools": found}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_json(payload))],
            structured_content=payload,
        )

    async def _declare(self, session: str, arguments: dict[str, Any]) -> CallToolResult:
        from mcp import types

        outcome = arguments.get("outcome")
        task = arguments.get("task")
        if outcome not in ("completed", "abandoned"):
            return _error("`outcome` must be 'completed' or 'abandoned'")
        if task is not None and not isinstance(task, str):
            return _error("`task` must be a string")
        report = self.book.declare(session, outcome, task[:2_000] if task else None)
        if report is not None:
            await self._report(report)
        steps = 0 if report is None else len(report.steps)
        payload = {"reported": report is not None, "outcome": outcome, "steps": steps}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_json(payload))],
            structured_content=payload,
        )

    # ---- sessions ------------------------------------------------------------------
    def _session_key(self, ctx: ServerRequestContext[Any, Any]) -> str:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        meta = ctx.meta or {}
        named = meta.get(SESSION_META_KEY)
        if isinstance(named, str) and named:
            return f"named:{named[:200]}"
        # the SDK keeps no public handle on the connection; only this line reads it
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None and connection.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            key = connection.state.get(_CONNECTION_KEY)
            if key is None:
                key = f"conn:{uuid.uuid4().hex}"
                connection.state[_CONNECTION_KEY] = key
                connection.exit_stack.push_async_callback(self._connection_closed, key)
                self._live[key] = connection
            return str(key)
        trace = _trace_id(meta.get("traceparent"))
        return f"trace:{trace}" if trace else f"{_ALONE}{uuid.uuid4().hex}"

    async def _connection_closed(self, key: str) -> None:
        self._live.pop(key, None)
        with contextlib.suppress(Exception):
            await self.relay.session_closed(key)
        report = self.book.close(key, "closed")
        if report is not None:
            self._schedule(report)

    async def _sweep(self) -> None:
        interval = min(max(self.book.limits.idle_timeout_s / 4, 0.05), 5.0)
        while True:
            await anyio.sleep(interval)
            for report in self.book.expire():
                await self._report(report)

    def _schedule(self, report: SessionReport) -> None:
        if self._tg is not None:
            self._inflight += 1
            self._tg.start_soon(self._report, report, True)

    async def _report(self, report: SessionReport, scheduled: bool = False) -> None:
        try:
            await self._write(
                self.backend.report_session,
                report.session_id,
                list(report.steps),
                report.outcome,
                report.task_input,
            )
            self.stats.reports += 1
        except Exception as exc:  # a failing backend must not take the gateway down
            self.stats.report_failures += 1
            log.error('{"event": "report_failed", "type": "%s"}', type(exc).__name__)
        finally:
            if scheduled:
                self._inflight -= 1

    async def _read(self, fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._reads)

    async def _write(self, fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._writes)

    async def _checked(self, fn: Any, *args: Any) -> Any:
        if self._inline_checks:
            return fn(*args)  # checks that never block: no thread hop on the call path
        return await self._read(fn, *args)

    def snapshot(self) -> dict[str, Any]:
        """Counters for logs and tests."""
        from dataclasses import asdict

        return {
            **asdict(self.stats),
            "open_sessions": len(self.book),
            "sessions": asdict(self.book.stats),
            "upstream_connects": {n: link.connects for n, link in self.links.items()},
            "contest": self.contest.snapshot(),
            "relay": self.relay.snapshot(),
        }


def build_gateway(
    backend: GatewayBackend,
    upstreams: Sequence[Upstream | str],
    *,
    expose: Expose = "all",
    pins: Sequence[str] = (),
    idle_timeout_s: float = 300.0,
    max_sessions: int = 1_000,
    max_steps: int = 256,
    report_clean: bool = False,
    token: str | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    refresh_s: float = 30.0,
    path: str = "/mcp",
    connect_timeout_s: float = 30.0,
    inline_checks: bool = False,
    json_response: bool = False,
    call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S,
    contest: ContestPolicy | None = None,
) -> Gateway:
    """A gateway over ``upstreams`` (:class:`Upstream` or ``NAME=URL`` /
    ``NAME=COMMAND ARGS...`` strings) asking ``backend``.

    The backend is called from worker threads; with ``inline_checks``, ``hidden_tools``
    and ``check_call`` run on the event loop instead (for a backend whose checks never
    block: it saves a thread hop per call).  ``call_timeout_s``: how long an upstream
    may take to answer a request (``None``: no limit); ``contest``: the sampling of
    blocked calls (:class:`~sidecar.gateway.contest.ContestPolicy`, on by default for
    tools without side effects)."""
    parsed = [u if isinstance(u, Upstream) else Upstream.parse(u) for u in upstreams]
    limits = SessionLimits(max_sessions, max_steps, idle_timeout_s, report_clean)
    return Gateway(
        backend,
        parsed,
        expose=expose,
        pins=pins,
        limits=limits,
        token=token,
        max_chars=max_chars,
        refresh_s=refresh_s,
        path=path,
        connect_timeout_s=connect_timeout_s,
        inline_checks=inline_checks,
        json_response=json_response,
        call_timeout_s=call_timeout_s,
        contest=contest,
    )


# ---- helpers
def _strictest(verdicts: Sequence[Verdict]) -> Verdict:
    """The strictest of ``verdicts``, with every reason once (the strictest first)."""
    ordered = sorted(verdicts, key=lambda v: -_SEVERITY[v.decision])
    if not ordered:
        return Verdict.allow()
    if len(ordered) == 1:
        return ordered[0]
    reasons: list[Reason] = []
    seen: set[tuple[str, str, str | None]] = set()
    for verdict in ordered:
        for reason in verdict.reasons:
            key = (reason.rule, reason.evidence, reason.pointer)
            if key not in seen:
                seen.add(key)
                reasons.append(reason)
    return Verdict(ordered[0].decision, tuple(reasons))


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


@functools.cache
def _own_tools() -> dict[str, Tool]:
    from mcp.types import Tool, ToolAnnotations

    return {
        SEARCH_TOOLS: Tool(
            name=SEARCH_TOOLS,
            description="Find tools for a task. Tools known to fail after what this session "
            "has already run are left out; risky ones carry warnings. Returns each tool's "
            "name, description and inputSchema: run one with call_tool.",
            input_schema={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "what the tool should do"},
                    "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                },
                "required": ["query"],
            },
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        ),
        CALL_TOOL: Tool(
            name=CALL_TOOL,
            description="Run a tool found with search_tools.",
            input_schema={
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "arguments": {"type": "object"},
                },
                "required": ["name"],
            },
        ),
        REPORT_OUTCOME: Tool(
            name=REPORT_OUTCOME,
            description="Say how this session's task ended: 'completed' or 'abandoned' "
            "(gave up). Failed paths are remembered so later sessions avoid them.",
            input_schema={
                "type": "object",
                "properties": {
                    "outcome": {"type": "string", "enum": ["completed", "abandoned"]},
                    "task": {"type": "string", "description": "the task, in a sentence"},
                },
                "required": ["outcome"],
            },
            annotations=ToolAnnotations(
                read_only_hint=False, idempotent_hint=False, open_world_hint=False
            ),
        ),
    }


def _error(text: str) -> CallToolResult:
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _blocked_text(tool: str, reasons: Sequence[Reason]) -> str:
    lines = [f"Refused: {tool} was not run, because calls like this one failed before."]
    for r in reasons:
        line = f"- rule: {r.rule}. {r.explanation} Evidence: {r.evidence}"
        lines.append(line + (f" (record: {r.pointer})" if r.pointer else ""))
    return "\n".join(lines)


def _reason_dict(reason: Reason) -> dict[str, Any]:
    return {
        "rule": reason.rule,
        "explanation": reason.explanation,
        "evidence": reason.evidence,
        "pointer": reason.pointer,
    }


def _forwarded_meta(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
    meta: dict[str, Any] = dict(ctx.meta or {})
    kept = {k: meta[k] for k in _FORWARDED_META if isinstance(meta.get(k), str)}
    return kept or None


def _trace_id(traceparent: Any) -> str | None:
    if not isinstance(traceparent, str):
        return None
    parts = traceparent.split("-")
    if len(parts) >= 4 and len(parts[1]) == 32 and parts[1] != "0" * 32:
        return parts[1].lower()
    return None


def _exception_text(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _exception_text(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=str)
