"""``POST /v1/traces`` for FastAPI, to be mounted behind the service's own auth layer.

Answers as an OTLP/HTTP collector does: 200 with an ``ExportTraceServiceResponse`` (with
``partial_success`` when spans were rejected) in the request's encoding; 400 for a body
that cannot be decoded (nothing of it is kept, nothing accepted before is lost); 413
over the size limit, on the wire or once inflated; 415 for another content type; 503
with ``Retry-After`` when the intake's memory limit refuses the request (exporters
retry it).  Error bodies are a ``google.rpc.Status`` in the request's encoding.
Finished sessions are reported after the response is sent, in a worker thread.

A body of up to :data:`SMALL_BODY_BYTES` once inflated is taken in a worker thread; a
larger one is prepared in its own lane (:mod:`sidecar.agents.otlp.lanes`: the service runs it
in a worker process, so that parsing it never holds the interpreter another exporter's
request needs), then taken.  When the large lane is full the request is answered 503.
"""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, Request, Response

from sidecar.agents.otlp.assembler import Receipt, TraceAssembler
from sidecar.agents.otlp.lanes import Lane, LaneFull, ThreadLane
from sidecar.agents.otlp.spans import (
    INVALID_ARGUMENT,
    JSON,
    PROTOBUF,
    RESOURCE_EXHAUSTED,
    MalformedPayload,
    UnsupportedMediaType,
    inflates_past,
    status_body,
)
from sidecar.errors import BodyTooLarge, SidecarError
from sidecar.trust.principals import principal_of

MAX_BODY_BYTES = 16 * 1_048_576
SMALL_BODY_BYTES = 1_048_576
RETRY_AFTER_S = 1


def otlp_router(
    assembler: TraceAssembler,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    path: str = "/v1/traces",
    large: Lane | None = None,
) -> APIRouter:
    """``large``: where bodies over :data:`SMALL_BODY_BYTES` are prepared (worker threads
    of this process by default)."""
    router = APIRouter()
    lane: Lane = large if large is not None else ThreadLane()

    @router.post(
        path,
        tags=["otlp"],
        summary="OTLP/HTTP trace intake (protobuf or JSON): tool spans become sessions",
        response_class=Response,
    )
    async def traces(request: Request, background: BackgroundTasks) -> Response:
        content_type = request.headers.get("content-type", "")
        media = PROTOBUF if content_type.lower().startswith(PROTOBUF) else JSON
        body = await _body(request, max_body_bytes)
        if body is None:
            return _status(media, 413, RESOURCE_EXHAUSTED, "body too large")
        try:
            who = principal_of(request.scope)
            source = who.name if who is not None else ""
            encoding = request.headers.get("content-encoding")
            receipt = await _take(assembler, lane, body, content_type, encoding, source)
        except UnsupportedMediaType as exc:
            return _status(media, 415, INVALID_ARGUMENT, str(exc))
        except BodyTooLarge as exc:
            return _status(media, 413, RESOURCE_EXHAUSTED, str(exc))
        except MalformedPayload as exc:
            return _status(media, 400, INVALID_ARGUMENT, str(exc))
        return _answer(assembler, receipt, background)

    return router


async def _body(request: Request, max_body_bytes: int) -> bytes | None:
    """The request's body, or ``None`` when it is over ``max_body_bytes`` (as declared,
    or as it arrives: reading stops there)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body_bytes:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body_bytes:
            return None
    return bytes(body)


async def _take(
    assembler: TraceAssembler,
    lane: Lane,
    body: bytes,
    content_type: str,
    encoding: str | None,
    source: str,
) -> Receipt:
    """Take a body small once inflated in a worker thread; prepare a larger one in the
    large lane (a 503 receipt when it is full), then take it."""
    import anyio

    if not await anyio.to_thread.run_sync(inflates_past, body, encoding, SMALL_BODY_BYTES):
        return await anyio.to_thread.run_sync(
            assembler.receive, body, content_type, encoding, source
        )
    assembler.started(large=True)
    try:
        prepared = await lane.prepare(body, content_type, encoding, assembler.limits)
    except LaneFull:
        why = "too many large trace requests at once; retry later"
        media = PROTOBUF if content_type.lower().startswith(PROTOBUF) else JSON
        return assembler.refused(media, why=why)
    except SidecarError as exc:
        assembler.failed(exc)
        raise
    return await anyio.to_thread.run_sync(assembler.take, prepared, source)


def _answer(assembler: TraceAssembler, receipt: Receipt, background: BackgroundTasks) -> Response:
    """The receipt as the response; the sessions it finished are reported after it is
    sent."""
    if receipt.reports:
        background.add_task(assembler.deliver, receipt.reports)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if receipt.status == 503 else None
    return Response(
        receipt.body,
        receipt.status,
        headers=headers,
        media_type=receipt.media,
        background=background,
    )


def _status(media: str, http_status: int, code: int, message: str) -> Response:
    return Response(status_body(media, code, message), http_status, media_type=media)


async def sweep(assembler: TraceAssembler, interval_s: float = 1.0) -> None:
    """Close idle traces and sessions and report them, forever: run it in the app's
    lifespan so that quiet periods still end sessions."""
    import anyio

    while True:
        await anyio.sleep(interval_s)
        reports = await anyio.to_thread.run_sync(assembler.expire)
        if reports:
            await anyio.to_thread.run_sync(assembler.deliver, reports)
