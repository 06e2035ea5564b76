"""The HTTP service: a FastAPI app over one :class:`~sidecar.core.Sidecar`, with the MCP
server mounted at ``/mcp`` (built once the server listens:
:mod:`~sidecar.shells.api.mcp_mount`) and the operator's console at ``/console``
(:mod:`sidecar.shells.console`), behind :class:`~sidecar.shells.api.gate.Gate`.

Every error leaves as ``{"error": {"code", "message"}}``: the library's errors with the
status their class declares (:mod:`sidecar.errors`), request-schema failures as 422,
anything else as a 500 that names no internals.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, NamedTuple

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from sidecar.core import Sidecar
from sidecar.errors import RateLimited, SidecarError
from sidecar.limits import MAX_BODY_BYTES
from sidecar.metrics import Metrics
from sidecar.settings import Settings
from sidecar.shells.api.docs import add_docs
from sidecar.shells.api.gate import MCP_PATH, PUBLIC, ASGIApp, Gate, envelope
from sidecar.shells.api.mcp_mount import McpMount
from sidecar.shells.api.routes import ROUTERS
from sidecar.shells.console import mount_console
from sidecar.trust.principals import Principals
from sidecar.trust.redact import redact_text

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from sidecar.agents.otlp import TraceAssembler
    from sidecar.agents.otlp.lanes import ProcessLane

log = logging.getLogger("sidecar.service")

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


class _TraceIntake(NamedTuple):
    """The OTLP trace intake: its assembler, the largest request it takes, and the worker
    process that parses large ones."""

    traces: TraceAssembler
    max_request_bytes: int
    large: ProcessLane


def create_app(
    sc: Sidecar, token: str | None, max_body_bytes: int = MAX_BODY_BYTES, with_mcp: bool = True
) -> ASGIApp:
    """The app over ``sc``; ``token``: the operator's single token (``None``: the named
    tokens alone)."""
    metrics = Metrics()
    mcp = McpMount(lambda: _mcp_transport(sc)) if with_mcp else None
    intake = _trace_intake(sc, metrics)
    from sidecar import __version__

    api = FastAPI(
        title="tool-chain sidecar",
        version=__version__,
        description="Failure memory for agent tool retrieval. Every route but /livez, "
        "/readyz and the documentation needs `Authorization: Bearer <token>`.",
        lifespan=_lifespan(mcp, intake),
        docs_url=None,
        redoc_url=None,
    )
    add_docs(api, PUBLIC)
    api.state.sidecar = sc
    api.state.metrics = metrics
    api.state.max_body_bytes = max_body_bytes
    api.state.traces = intake.traces
    _routes(api, intake, max_body_bytes)
    _error_handlers(api)
    principals = (
        Principals.load(sc.settings.tokens_path, token)
        if isinstance(sc, Sidecar)
        else Principals.load(None, token)
    )
    mount_console(api, principals)
    limits = {"/v1/traces": intake.max_request_bytes}
    return Gate(api, mcp, principals, max_body_bytes, metrics, limits)


def _mcp_transport(sc: Sidecar) -> tuple[MCPServer, ASGIApp]:
    """The MCP server over streamable HTTP at ``/mcp``, for loopback hosts and origins
    only (DNS-rebinding protection)."""
    from mcp.server.transport_security import TransportSecuritySettings

    from sidecar.shells.mcp_server import build_mcp

    server = build_mcp(sc)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=LOOPBACK_HOSTS,
            allowed_origins=LOOPBACK_ORIGINS,
        ),
    )
    return server, app


def _trace_intake(sc: Sidecar, metrics: Metrics) -> _TraceIntake:
    """The trace intake of ``sc``, its counters added to ``metrics``."""
    from sidecar.agents.otlp import AssemblerLimits, TraceAssembler, prometheus_lines
    from sidecar.agents.otlp.lanes import ProcessLane
    from sidecar.agents.sessions import session_limits
    from sidecar.agents.sink import LibrarySink
    from sidecar.trust.sources import otlp_source

    # a stand-in for a library not opened yet (an OpenAPI document built at import) has
    # no settings: the defaults then
    settings = sc.settings if isinstance(sc, Sidecar) else Settings()
    # an exporter's batch may be larger than an API request, and is not retried on 413
    otlp_body = settings.otlp_max_request_bytes
    limits = AssemblerLimits(
        # every traced session is evidence: successes are what a failure is tested against
        sessions=session_limits(settings, report_clean=True),
        max_request_bytes=otlp_body,
        max_memory_bytes=settings.otlp_max_memory_bytes,
    )
    traces = TraceAssembler(LibrarySink(sc, otlp_source), limits)
    metrics.add_source(lambda: prometheus_lines(traces))
    # a large trace request is parsed in a worker process, started on first use
    return _TraceIntake(traces, otlp_body, ProcessLane())


def _lifespan(
    mcp: McpMount | None, intake: _TraceIntake
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the MCP transport (built once the server listens) and the
    sweep of idle traces run while it serves; at shutdown the traces still open are
    delivered."""
    from sidecar.agents.otlp import sweep

    traces, large = intake.traces, intake.large

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        import anyio

        async with anyio.create_task_group() as tasks:
            if mcp is not None:
                await tasks.start(mcp.serve)
            tasks.start_soon(sweep, traces)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
                # sessions still open are evidence too; shielded, or the cancellation
                # just asked for would cancel this delivery before it started
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(traces.deliver, traces.flush())
                    await anyio.to_thread.run_sync(large.close)

    return lifespan


def _routes(api: FastAPI, intake: _TraceIntake, max_body_bytes: int) -> None:
    """The API's routers, then the OTLP trace intake's."""
    from sidecar.agents.otlp import otlp_router

    for router in ROUTERS:
        api.include_router(router)
    api.include_router(
        otlp_router(intake.traces, max_body_bytes=intake.max_request_bytes, large=intake.large)
    )


def _error_handlers(api: FastAPI) -> None:
    @api.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
        return envelope(422, "invalid_request", redact_text(message)[:500])

    @api.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return envelope(exc.status_code, code, str(exc.detail))

    @api.exception_handler(SidecarError)
    async def _known(_request: Request, exc: SidecarError) -> JSONResponse:
        headers = None
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
        return envelope(exc.status, exc.code, redact_text(str(exc)), headers)

    @api.exception_handler(Exception)
    async def _unknown(_request: Request, exc: Exception) -> JSONResponse:
        log.error(json.dumps({"event": "error", "type": type(exc).__name__}))
        return envelope(500, "internal", "internal error; see the sidecar's log")
