"""The HTTP shell: a FastAPI app over one :class:`~sidecar.app.Sidecar`, with the MCP
server mounted at ``/mcp``.

One worker process owns the hot index.  Around the FastAPI app sits one ASGI layer
that (in this order) times requests for ``/metrics``, refuses bodies over the limit
with 413 before reading them whole, requires the bearer token on every route but
``/livez`` (compared in constant time, never logged), and sends ``/mcp`` to the MCP
transport (which checks ``Origin``/``Host`` against loopback).  Every error leaves as
``{"error": {"code": ..., "message": ...}}`` with its status from :data:`ERRORS`.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from cold_store import ColdStoreError
from indexes import ToolIndexError
from sidecar.app import Sidecar
from sidecar.backends import status_of
from sidecar.catalog import load_tools
from sidecar.errors import EmptyArchive, InvalidInput, NotFound, SidecarError, StorageError
from sidecar.lock import LockBusy
from sidecar.metrics import Metrics
from sidecar.redact import redact_text

log = logging.getLogger("sidecar.service")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 1_048_576
TOKEN_FILE = "token"
PUBLIC = frozenset({"/livez"})

# exception class -> (status, code); the first match in order wins
ERRORS: tuple[tuple[type[BaseException], int, str], ...] = (
    (NotFound, 404, "not_found"),
    (EmptyArchive, 404, "empty_archive"),
    (LockBusy, 409, "busy"),
    (InvalidInput, 400, "invalid_input"),
    (ToolIndexError, 503, "index_unavailable"),
    (ColdStoreError, 503, "cold_store_unavailable"),
    (StorageError, 503, "storage_unavailable"),
    (SidecarError, 500, "sidecar_error"),
)


def envelope(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


# ---- tokens -------------------------------------------------------------------------
def token_for(home: Path, create: bool = True) -> str | None:
    """``$SIDECAR_TOKEN``, else the home's 0600 ``token`` file (made on first start)."""
    env = os.environ.get("SIDECAR_TOKEN")
    if env:
        return env
    path = home / TOKEN_FILE
    if path.exists():
        return path.read_text().strip() or None
    if not create:
        return None
    home.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ---- request bodies -----------------------------------------------------------------
Scalar = str | int | float | bool | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolsIn(_Body):
    tools: list[dict[str, Any]] = Field(min_length=1, max_length=10_000)


class SearchIn(_Body):
    query: str = Field(min_length=1, max_length=2_048)
    k: int = Field(5, ge=1, le=100)
    after: list[str] = Field(default_factory=list, max_length=256)
    context: dict[str, Scalar] = Field(default_factory=dict, max_length=64)


class ReportsIn(_Body):
    reports: list[dict[str, Any]] = Field(min_length=1, max_length=1_000)


class CheckIn(_Body):
    plan: list[str] = Field(max_length=256)
    mode: Literal["sequence", "prefix"] = "sequence"
    context: dict[str, Scalar] = Field(default_factory=dict, max_length=64)


class EvictIn(_Body):
    dry_run: bool = False
    min_chains: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        strict=True,
        description="overrides SIDECAR_EVICT_MIN_CHAINS",
    )


class RestoreIn(_Body):
    reason: str = Field(min_length=1, max_length=2_048)
    lift_constraints: bool = False


class LiftIn(_Body):
    reason: str = Field(min_length=1, max_length=2_048)


class HitOut(BaseModel):
    tool_id: str
    score: float
    description: str
    warnings: list[str]


class WithheldOut(BaseModel):
    tool_id: str
    rule: str
    pointer: str
    chain_id: str
    reason: str


class SearchOut(BaseModel):
    hits: list[HitOut]
    withheld: list[WithheldOut]


class CollisionOut(BaseModel):
    chain_id: str
    matched: list[str]
    rule: str
    expected_failure: str
    pointer: str
    reason: str


class CheckOut(BaseModel):
    safe: bool
    collisions: list[CollisionOut]


class IntakeOut(BaseModel):
    status: Literal["archived", "not_archived", "rejected", "recorded"]
    chain_id: str | None = None
    pointer: str | None = None
    reason: str | None = None


class ReportsOut(BaseModel):
    results: list[IntakeOut]


# ---- the app ------------------------------------------------------------------------
def create_app(
    sc: Sidecar, token: str, max_body_bytes: int = MAX_BODY_BYTES, with_mcp: bool = True
) -> ASGIApp:
    metrics = Metrics()
    mcp_app: ASGIApp | None = None
    mcp_server = None
    if with_mcp:
        from mcp.server.transport_security import TransportSecuritySettings

        from sidecar.mcp_server import build_mcp

        mcp_server = build_mcp(sc)
        mcp_app = mcp_server.streamable_http_app(
            streamable_http_path="/mcp",
            transport_security=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1", "localhost", "127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            ),
        )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if mcp_server is None:
            yield
            return
        async with mcp_server.session_manager.run():
            yield

    api = FastAPI(
        title="tool-chain sidecar",
        version=_version(),
        description="Failure memory for agent tool retrieval. Every route but /livez "
        "needs `Authorization: Bearer <token>`.",
        lifespan=lifespan,
    )

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

    async def _known(_request: Request, exc: Exception) -> JSONResponse:
        for cls, status, code in ERRORS:
            if isinstance(exc, cls):
                return envelope(status, getattr(exc, "code", code), redact_text(str(exc)))
        return await _unknown(_request, exc)

    async def _unknown(_request: Request, exc: Exception) -> JSONResponse:
        log.error(json.dumps({"event": "error", "type": type(exc).__name__}))
        return envelope(500, "internal", "internal error; see the sidecar's log")

    for root in (SidecarError, ToolIndexError, ColdStoreError):
        api.add_exception_handler(root, _known)  # type: ignore[arg-type]
    api.add_exception_handler(Exception, _unknown)

    # -- operations
    @api.get("/livez", tags=["operations"])
    def livez() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/readyz", tags=["operations"])
    def readyz() -> JSONResponse:
        checks: dict[str, str] = {}
        try:
            sc.index.count()
            checks["chroma"] = "ok"
        except ToolIndexError as exc:
            checks["chroma"] = f"unavailable: {redact_text(str(exc))}"
        try:
            with tempfile.NamedTemporaryFile(dir=sc.cold.root, prefix=".ready-"):
                pass
            checks["cold_store"] = "ok"
        except OSError as exc:
            checks["cold_store"] = f"not writable: {exc.strerror}"
        stuck = [m.move_id for m in sc.journal.unfinished() if not _eviction_running(sc)]
        checks["journal"] = "ok" if not stuck else f"{len(stuck)} unfinished move(s)"
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    @api.get("/version", tags=["operations"])
    def version() -> dict[str, str]:
        from importlib.metadata import version as installed

        return {
            "sidecar": _version(),
            "python": sys.version.split()[0],
            "chromadb": installed("chromadb"),
            "embedder": sc.settings.embedder,
        }

    @api.get("/metrics", tags=["operations"], response_class=PlainTextResponse)
    def prometheus() -> str:
        def gauges() -> dict[str, dict[str, float]]:
            counts = sc.ledger.counts()
            return {
                "revocation_mandates": {f'{{status="{s}"}}': n for s, n in counts.items()},
                "quarantined_files": {"": len(sc.quarantined())},
                "active_constraints": {"": len(sc.matcher())},
                "archived_chains": {"": sc.cold.chains.count()},
                "evicted_tools": {"": len(sc.journal.evicted())},
            }

        return metrics.render(gauges)

    # -- tools and lookup
    @api.post("/v1/tools", tags=["tools"])
    def add_tools(body: ToolsIn) -> dict[str, Any]:
        return sc.add_tools(load_tools([body.tools], "request")).to_dict()

    @api.get("/v1/tools", tags=["tools"])
    def list_tools() -> dict[str, Any]:
        return {"tools": [t.to_dict() for t in sc.list_tools()]}

    @api.post("/v1/search", tags=["lookup"], response_model=SearchOut)
    def search(body: SearchIn) -> dict[str, Any]:
        result = sc.search(body.query, k=body.k, after=body.after, context=body.context)
        metrics.inc("lookups")
        metrics.inc("withheld_continuations", len(result.withheld))
        return result.to_dict()

    @api.post("/v1/check", tags=["lookup"], response_model=CheckOut)
    def check(body: CheckIn) -> dict[str, Any]:
        return sc.check(body.plan, mode=body.mode, context=body.context).to_dict()

    # -- intake and audit
    @api.post("/v1/reports", tags=["archive"], response_model=ReportsOut)
    def reports(body: ReportsIn) -> dict[str, Any]:
        return {"results": [r.to_dict() for r in sc.report_many(body.reports)]}

    @api.get("/v1/audit", tags=["archive"])
    def audit(pointer: str = Query(min_length=1, max_length=512)) -> dict[str, Any]:
        return sc.audit(pointer)

    @api.get("/v1/archive/digest", tags=["archive"])
    def digest() -> dict[str, Any]:
        return {"digest": sc.digest(), "chains": sc.cold.chains.count()}

    @api.get("/v1/constraints", tags=["archive"])
    def constraints(include_lifted: bool = False) -> dict[str, Any]:
        return {"constraints": sc.state.constraint_rows(include_lifted=include_lifted)}

    @api.get("/v1/archive/status", tags=["archive"])
    def archive_status() -> dict[str, Any]:
        return status_of(sc)

    @api.post("/v1/constraints/{chain_id}/lift", tags=["archive"])
    def lift(chain_id: str, body: LiftIn) -> dict[str, str]:
        sc.lift(chain_id, body.reason)
        return {"chain_id": chain_id, "status": "lifted"}

    @api.post("/v1/constraints/{chain_id}/reinstate", tags=["archive"])
    def reinstate(chain_id: str, body: LiftIn) -> dict[str, str]:
        sc.reinstate(chain_id, body.reason)
        return {"chain_id": chain_id, "status": "active"}

    # -- eviction
    @api.post("/v1/evictions", tags=["eviction"])
    def evict(body: EvictIn) -> dict[str, Any]:
        report = sc.evict(dry_run=body.dry_run, min_chains=body.min_chains)
        if not body.dry_run:
            metrics.inc("evicted_tools", len(report.evicted))
        return report.to_dict()

    @api.post("/v1/evictions/recover", tags=["eviction"])
    def recover() -> dict[str, int]:
        return {"recovered_moves": sc.recover()}

    @api.get("/v1/evictions/decision", tags=["eviction"])
    def decision(
        min_chains: int | None = Query(
            default=None, ge=1, le=1_000_000, description="overrides SIDECAR_EVICT_MIN_CHAINS"
        ),
    ) -> dict[str, Any]:
        return {"decisions": [d.to_dict() for d in sc.decide(min_chains)]}

    @api.post("/v1/tools/{tool_id}/restore", tags=["eviction"])
    def restore(tool_id: str, body: RestoreIn) -> dict[str, Any]:
        return sc.restore(tool_id, body.reason, lift_constraints=body.lift_constraints).to_dict()

    @api.get("/v1/revocations", tags=["eviction"])
    def revocations(
        status: Literal["pending", "submitted", "revoked", "failed", "unsupported", "cancelled"]
        | None = None,
    ) -> dict[str, Any]:
        return {"mandates": [m.to_dict() for m in sc.ledger.list(status)]}

    @api.post("/v1/revocations/run", tags=["eviction"])
    def run_revocations() -> dict[str, Any]:
        return {"revoker": sc.settings.revoker, "results": sc.run_revocations()}

    return _Gate(api, mcp_app, token, max_body_bytes, metrics)


class _Gate:
    """The outer ASGI layer: metrics, body limit, bearer token, and the /mcp route."""

    def __init__(
        self, api: ASGIApp, mcp: ASGIApp | None, token: str, limit: int, metrics: Metrics
    ) -> None:
        self.api = api
        self.mcp = mcp
        self.token = token.encode()
        self.limit = limit
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.api(scope, receive, send)  # lifespan: runs the MCP session manager
            return
        started = time.perf_counter()
        status_box = [500]

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_box[0] = message["status"]
            await send(message)

        path = scope.get("path", "")
        route = _route_label(path)
        try:
            await self._handle(scope, receive, send_status, path)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.observe(scope.get("method", ""), route, status_box[0], seconds)
            log.info(
                json.dumps(
                    {
                        "event": "request",
                        "method": scope.get("method"),
                        "path": redact_text(path),
                        "status": status_box[0],
                        "ms": round(seconds * 1000, 2),
                    }
                )
            )

    async def _handle(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        if path not in PUBLIC and not self._authorized(headers.get("authorization", b"")):
            await envelope(
                401,
                "unauthorized",
                "a bearer token is required (Authorization: Bearer <token>)",
                {"WWW-Authenticate": "Bearer"},
            )(scope, receive, send)
            return
        length = headers.get("content-length")
        if length is not None:
            try:
                too_big = int(length) > self.limit
            except ValueError:
                too_big = True
            if too_big:
                await self._too_large(scope, receive, send)
                return
        target = (
            self.mcp
            if self.mcp is not None and (path == "/mcp" or path.startswith("/mcp/"))
            else self.api
        )
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            # read at most `limit` bytes (chunked bodies have no Content-Length), then
            # replay them to the app
            body, complete = await _read_capped(receive, self.limit)
            if not complete:
                await self._too_large(scope, receive, send)
                return
            receive = _replay(body, receive)
        await target(scope, receive, send)

    def _authorized(self, header: bytes) -> bool:
        scheme, _, value = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self.token)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await envelope(413, "body_too_large", f"request body over {self.limit} bytes")(
            scope, receive, send
        )


async def _read_capped(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request body, or ``complete=False`` as soon as it passes ``limit``."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(parts), True  # client went away; the app will see it
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", False
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts), True


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # e.g. http.disconnect

    return replay


def _route_label(path: str) -> str:
    """A bounded label for metrics: ids in paths are collapsed."""
    parts = path.strip("/").split("/")
    if len(parts) >= 3 and parts[:2] in (["v1", "tools"], ["v1", "constraints"]):
        parts[2] = "{id}"
    label = "/" + "/".join(parts[:4])
    return label if len(label) <= 64 else label[:64]


def _eviction_running(sc: Sidecar) -> bool:
    probe = sc.evictor().lock
    try:
        probe.acquire()
    except LockBusy:
        return True
    probe.release()
    return False


def _version() -> str:
    from sidecar import __version__

    return __version__


# ---- running it ---------------------------------------------------------------------
SERVER_LOCK = "server.lock"


def serve(
    sc: Sidecar,
    host: str = "127.0.0.1",
    port: int = 8765,
    max_body_bytes: int = MAX_BODY_BYTES,
    announce: Callable[[str, str], None] | None = None,
) -> None:
    """Serve until interrupted.  Holds the home's server lock so that local CLI writes
    refuse while this process owns the embedded store."""
    import uvicorn

    from sidecar.lock import WriterLock

    home = sc.settings.home
    if is_loopback(host):
        token = token_for(home)
    else:
        token = token_for(home, create=False)
        if not token:
            raise InvalidInput(
                f"refusing to bind {host} (not loopback) without a token: set SIDECAR_TOKEN "
                f"or create {home / TOKEN_FILE}"
            )
    assert token is not None
    _configure_logging()
    lock = WriterLock(home / SERVER_LOCK, purpose="sidecar server")
    lock.acquire()
    try:
        sc.index.count()  # open Chroma (and fail fast) before accepting requests
        sc.embedder.embed(["warm up"])  # load the model once, not on the first lookup
        app = create_app(sc, token, max_body_bytes)
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False, lifespan="on"
        )
        server = uvicorn.Server(config)
        if announce is not None:
            announce(f"http://{host}:{port}", str(home / TOKEN_FILE))
        server.run()
    finally:
        lock.release()


def _configure_logging() -> None:
    """JSON lines on stderr; the request log never holds a token (paths are redacted,
    headers are not logged)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    for noisy in ("mcp", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
