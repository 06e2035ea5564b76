"""``POST /v1/traces`` for FastAPI, to be mounted behind the service's own auth layer.

Answers as an OTLP/HTTP collector does: 200 with an ``ExportTraceServiceResponse`` (with
``partial_success`` when spans were rejected) in the request's encoding; 400 for a body
that cannot be decoded (nothing of it is kept, nothing accepted before is lost); 413
over the size limit; 415 for another content type.  Error bodies are a
``google.rpc.Status`` in the request's encoding.  Finished sessions are reported after
the response is sent, in a worker thread.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, BackgroundTasks, Request, Response
from starlette.concurrency import run_in_threadpool

from sidecar.otlp.assembler import TraceAssembler
from sidecar.otlp.spans import PROTOBUF, MalformedPayload, UnsupportedMediaType

MAX_BODY_BYTES = 16 * 1_048_576
_INVALID_ARGUMENT, _RESOURCE_EXHAUSTED = 3, 8


def otlp_router(
    assembler: TraceAssembler, *, max_body_bytes: int = MAX_BODY_BYTES, path: str = "/v1/traces"
) -> APIRouter:
    router = APIRouter()

    @router.post(
        path,
        tags=["otlp"],
        summary="OTLP/HTTP trace intake (protobuf or JSON): tool spans become sessions",
        response_class=Response,
    )
    async def traces(request: Request, background: BackgroundTasks) -> Response:
        content_type = request.headers.get("content-type", "")
        media = PROTOBUF if content_type.lower().startswith(PROTOBUF) else "application/json"
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            return _status(media, 413, _RESOURCE_EXHAUSTED, "body too large")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body_bytes:
                return _status(media, 413, _RESOURCE_EXHAUSTED, "body too large")
        try:
            receipt = await run_in_threadpool(
                assembler.receive,
                bytes(body),
                content_type,
                request.headers.get("content-encoding"),
            )
        except UnsupportedMediaType as exc:
            return _status(media, 415, _INVALID_ARGUMENT, str(exc))
        except MalformedPayload as exc:
            return _status(media, 400, _INVALID_ARGUMENT, str(exc))
        if receipt.reports:
            background.add_task(assembler.deliver, receipt.reports)
        return Response(receipt.body, media_type=receipt.media, background=background)

    return router


def _status(media: str, http_status: int, code: int, message: str) -> Response:
    if media == PROTOBUF:
        return Response(_status_proto(code, message), http_status, media_type=PROTOBUF)
    body = json.dumps({"code": code, "message": message}).encode()
    return Response(body, http_status, media_type="application/json")


def _status_proto(code: int, message: str) -> bytes:
    """``google.rpc.Status{code, message}`` in protobuf wire format (two fields: not worth
    a dependency)."""
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


async def sweep(assembler: TraceAssembler, interval_s: float = 1.0) -> None:
    """Close idle traces and sessions and report them, forever: run it in the app's
    lifespan so that quiet periods still end sessions."""
    import anyio

    while True:
        await anyio.sleep(interval_s)
        reports = await anyio.to_thread.run_sync(assembler.expire)
        if reports:
            await anyio.to_thread.run_sync(assembler.deliver, reports)
