"""OTLP/HTTP trace bodies decoded into plain span records, in both encodings.

- ``application/x-protobuf``: an ``ExportTraceServiceRequest``, parsed with
  ``opentelemetry-proto``'s generated classes;
- ``application/json``: the OTLP/JSON mapping of the same message: lowerCamelCase field
  names (the proto names are accepted too), trace and span ids as hex strings (not
  base64), enums as integers (their names are accepted too), 64-bit integers as decimal
  strings or numbers, and ``AnyValue`` as ``{"stringValue": ...}`` and kin.

Either ``gzip`` or ``deflate`` ``Content-Encoding`` is accepted, inflated up to a bound
(past it: :class:`BodyTooLarge`).  A body that cannot be decoded as a whole raises
:class:`MalformedPayload` (nothing of it is kept): among others, attribute values nested
deeper than :data:`~sidecar.model.MAX_DEPTH` levels, and JSON too deep to parse.  A span
with an invalid id is counted as rejected and the rest are kept; so are the spans past
``max_spans`` in one body (the work of one request is bounded).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.errors import BodyTooLarge, GatewayError
from sidecar.model import MAX_DEPTH

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_INFLATED_BYTES = 64 * 1_048_576

STATUS_ERROR = 2
_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


class OtlpError(GatewayError):
    code = "otlp"


class MalformedPayload(OtlpError):
    code = "malformed_payload"
    status = 400


class UnsupportedMediaType(OtlpError):
    code = "unsupported_media_type"
    status = 415


# google.rpc.Code values for error bodies
INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE = 3, 8, 14


@dataclass(frozen=True)
class SpanRecord:
    trace_id: str
    """32 lowercase hex digits."""
    span_id: str
    """16 lowercase hex digits."""
    parent_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    status_code: int = 0
    status_message: str = ""
    exception_messages: tuple[str, ...] = ()
    resource: Mapping[str, Any] | None = None

    @property
    def failed(self) -> bool:
        return self.status_code == STATUS_ERROR


@dataclass(frozen=True)
class Decoded:
    spans: list[SpanRecord]
    rejected: int
    reasons: tuple[str, ...] = ()


MAX_SPANS = 10_000
"""Spans taken from one body, by default; the rest are rejected."""


def decode(
    body: bytes,
    content_type: str,
    content_encoding: str | None = None,
    *,
    max_spans: int = MAX_SPANS,
) -> Decoded:
    """The spans of one ``POST /v1/traces`` body (already inflated: :func:`inflate`)."""
    media = media_of(content_type)
    body = inflate(body, content_encoding)
    if media == PROTOBUF:
        return _decode_protobuf(body, max_spans)
    return _decode_json(body, max_spans)


def media_of(content_type: str) -> str:
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        raise UnsupportedMediaType(
            f"content type {media or '(none)'}: expected {PROTOBUF} or {JSON}"
        )
    return media


def inflate(body: bytes, encoding: str | None, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """``body`` inflated (``gzip`` or ``deflate``), refused past ``limit`` bytes."""
    encoding = (encoding or "").strip().lower()
    if encoding in ("", "identity"):
        if len(body) > limit:
            raise BodyTooLarge(f"body is over {limit} bytes")
        return body
    if encoding not in ("gzip", "deflate"):
        raise UnsupportedMediaType(f"content encoding {encoding}: expected gzip or deflate")
    wbits = 31 if encoding == "gzip" else 15
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit)
    except zlib.error as exc:
        raise MalformedPayload(f"body is not valid {encoding}") from exc
    if inflater.unconsumed_tail:
        raise BodyTooLarge(f"body inflates past {limit} bytes")
    return out


def inflates_past(body: bytes, encoding: str | None, limit: int) -> bool:
    """Whether ``body`` is more than ``limit`` bytes once inflated (inflating at most
    ``limit + 1`` of them to tell); ``False`` for an encoding or a body
    :func:`inflate` will refuse anyway."""
    encoding = (encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return len(body) > limit
    if encoding not in ("gzip", "deflate"):
        return False
    try:
        head = zlib.decompressobj(31 if encoding == "gzip" else 15).decompress(body, limit + 1)
    except zlib.error:
        return False
    return len(head) > limit


class _Rejects:
    def __init__(self, max_spans: int) -> None:
        self.count = 0
        self.reasons: list[str] = []
        self.room = self.max_spans = max_spans

    def add(self, reason: str, n: int = 1) -> None:
        self.count += n
        if reason not in self.reasons and len(self.reasons) < 5:
            self.reasons.append(reason)

    def take(self) -> bool:
        """Whether one more span fits in this request."""
        if self.room > 0:
            self.room -= 1
            return True
        self.add(f"more than {self.max_spans} spans in one request")
        return False


# ---- protobuf ------------------------------------------------------------------------
def _decode_protobuf(body: bytes, max_spans: int) -> Decoded:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise MalformedPayload("body is not an ExportTraceServiceRequest") from exc
    rejects = _Rejects(max_spans)
    spans: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes) or None
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if not rejects.take():
                    continue
                trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
                why = _invalid_ids(trace_id, span_id)
                if why:
                    rejects.add(why)
                    continue
                spans.append(
                    SpanRecord(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        kind=int(span.kind),
                        start_ns=int(span.start_time_unix_nano),
                        end_ns=int(span.end_time_unix_nano),
                        attributes=_pb_attributes(span.attributes),
                        status_code=int(span.status.code),
                        status_message=span.status.message,
                        exception_messages=tuple(_pb_exceptions(span.events)),
                        resource=resource,
                    )
                )
    return Decoded(spans, rejects.count, tuple(rejects.reasons))


def _pb_attributes(pairs: Sequence[Any], depth: int = 0) -> dict[str, Any]:
    return {kv.key: _pb_value(kv.value, depth) for kv in pairs}


def _pb_value(value: Any, depth: int = 0) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which in ("array_value", "kvlist_value"):
        _deeper(depth)
    if which == "array_value":
        return [_pb_value(v, depth + 1) for v in value.array_value.values]
    if which == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values, depth + 1)
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, which)


def _pb_exceptions(events: Sequence[Any]) -> Iterator[str]:
    for event in events:
        if event.name == "exception":
            attrs = _pb_attributes(event.attributes)
            message = attrs.get("exception.message") or attrs.get("exception.type")
            if message:
                yield str(message)


# ---- JSON ----------------------------------------------------------------------------
def _deeper(depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise MalformedPayload(f"an attribute value is nested deeper than {MAX_DEPTH} levels")


def _decode_json(body: bytes, max_spans: int) -> Decoded:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedPayload("body is not JSON") from exc
    except RecursionError:
        raise MalformedPayload("body is JSON nested too deeply") from None
    if not isinstance(document, dict):
        raise MalformedPayload("body is not an ExportTraceServiceRequest object")
    rejects = _Rejects(max_spans)
    spans: list[SpanRecord] = []
    for resource_spans in _list(document, "resourceSpans", "resource_spans"):
        resource_obj = _obj(resource_spans, "resource")
        resource = _json_attributes(_list(resource_obj, "attributes")) or None
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _list(scope_spans, "spans"):
                if not isinstance(span, dict):
                    raise MalformedPayload("a span is not an object")
                if not rejects.take():
                    continue
                record = _json_span(span, resource, rejects)
                if record is not None:
                    spans.append(record)
    return Decoded(spans, rejects.count, tuple(rejects.reasons))


def _json_span(
    span: dict[str, Any], resource: Mapping[str, Any] | None, rejects: _Rejects
) -> SpanRecord | None:
    trace_id = _hex(_get(span, "traceId", "trace_id"))
    span_id = _hex(_get(span, "spanId", "span_id"))
    why = _invalid_ids(trace_id, span_id)
    if why:
        rejects.add(why)
        return None
    parent = _hex(_get(span, "parentSpanId", "parent_span_id"))
    status = _obj(span, "status")
    try:
        return SpanRecord(
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent if len(parent) == 16 and parent != "0" * 16 else None,
            name=str(span.get("name", "")),
            kind=_enum(span.get("kind", 0), _KIND_NAMES),
            start_ns=_int(_get(span, "startTimeUnixNano", "start_time_unix_nano")),
            end_ns=_int(_get(span, "endTimeUnixNano", "end_time_unix_nano")),
            attributes=_json_attributes(_list(span, "attributes")),
            status_code=_enum(status.get("code", 0), _STATUS_NAMES),
            status_message=str(status.get("message", "")),
            exception_messages=tuple(_json_exceptions(_list(span, "events"))),
            resource=resource,
        )
    except (TypeError, ValueError) as exc:
        raise MalformedPayload(f"span {span_id}: {exc}") from exc


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    return obj.get(camel, obj.get(snake))


def _obj(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPayload(f"{key} is not an object")
    return value


def _list(obj: Any, camel: str, snake: str | None = None) -> list[Any]:
    value = obj.get(camel, obj.get(snake) if snake else None) if isinstance(obj, dict) else None
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedPayload(f"{camel} is not a list")
    return value


def _hex(value: Any) -> str:
    return value.lower() if isinstance(value, str) else ""


def _invalid_ids(trace_id: str, span_id: str) -> str | None:
    if len(trace_id) != 32 or not _is_hex(trace_id) or trace_id == "0" * 32:
        return "invalid trace id"
    if len(span_id) != 16 or not _is_hex(span_id) or span_id == "0" * 16:
        return "invalid span id"
    return None


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _int(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | str | float):
        raise ValueError(f"not an integer: {value!r}")
    return int(value)


def _enum(value: Any, names: Mapping[str, int]) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return _int(value)


def _json_attributes(pairs: Sequence[Any], depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in pairs:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise MalformedPayload("an attribute is not a {key, value} object")
        out[kv["key"]] = _json_value(kv.get("value"), depth)
    return out


def _json_value(value: Any, depth: int = 0) -> Any:
    if not isinstance(value, dict) or not value:
        return None
    if "stringValue" in value or "string_value" in value:
        return str(_get(value, "stringValue", "string_value"))
    if "boolValue" in value or "bool_value" in value:
        return bool(_get(value, "boolValue", "bool_value"))
    if "intValue" in value or "int_value" in value:
        return _int(_get(value, "intValue", "int_value"))
    if "doubleValue" in value or "double_value" in value:
        return float(_get(value, "doubleValue", "double_value"))
    if "arrayValue" in value or "array_value" in value:
        _deeper(depth)
        inner = _get(value, "arrayValue", "array_value") or {}
        return [_json_value(v, depth + 1) for v in _list(inner, "values")]
    if "kvlistValue" in value or "kvlist_value" in value:
        _deeper(depth)
        inner = _get(value, "kvlistValue", "kvlist_value") or {}
        return _json_attributes(_list(inner, "values"), depth + 1)
    if "bytesValue" in value or "bytes_value" in value:
        return str(_get(value, "bytesValue", "bytes_value"))
    return None


def _json_exceptions(events: Sequence[Any]) -> Iterator[str]:
    for event in events:
        if isinstance(event, dict) and event.get("name") == "exception":
            attrs = _json_attributes(_list(event, "attributes"))
            message = attrs.get("exception.message") or attrs.get("exception.type")
            if message:
                yield str(message)


# ---- responses -----------------------------------------------------------------------
def status_body(media: str, code: int, message: str) -> bytes:
    """A ``google.rpc.Status{code, message}`` in the request's encoding (the error body
    of OTLP/HTTP)."""
    if media == PROTOBUF:
        text = message.encode()
        return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
    return json.dumps({"code": code, "message": message}).encode()


def _varint(value: int) -> bytes:
    # two fields of protobuf wire format: not worth a dependency
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def response_body(media: str, rejected: int, message: str) -> bytes:
    """An ``ExportTraceServiceResponse``, with ``partial_success`` when spans were
    rejected, in the request's encoding."""
    if media == PROTOBUF:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTracePartialSuccess,
            ExportTraceServiceResponse,
        )

        response = ExportTraceServiceResponse()
        if rejected:
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=rejected, error_message=message)
            )
        return bytes(response.SerializeToString())
    body: dict[str, Any] = {}
    if rejected:
        body["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": message}
    return json.dumps(body).encode()
