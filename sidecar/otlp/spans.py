"""OTLP/HTTP trace bodies decoded into plain span records, in both encodings.

- ``application/x-protobuf``: an ``ExportTraceServiceRequest``, parsed with
  ``opentelemetry-proto``'s generated classes;
- ``application/json``: the OTLP/JSON mapping of the same message: lowerCamelCase field
  names (the proto names are accepted too), trace and span ids as hex strings (not
  base64), enums as integers (their names are accepted too), 64-bit integers as decimal
  strings or numbers, and ``AnyValue`` as ``{"stringValue": ...}`` and kin.

Either ``gzip`` or ``deflate`` ``Content-Encoding`` is accepted, inflated up to a bound.
A body that cannot be decoded as a whole raises :class:`MalformedPayload` (nothing of it
is kept); a span with an invalid id is counted as rejected and the rest are kept.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.gateway.errors import GatewayError

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


class UnsupportedMediaType(OtlpError):
    code = "unsupported_media_type"


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


def decode(body: bytes, content_type: str, content_encoding: str | None = None) -> Decoded:
    """The spans of one ``POST /v1/traces`` body."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        raise UnsupportedMediaType(
            f"content type {media or '(none)'}: expected {PROTOBUF} or {JSON}"
        )
    body = _inflate(body, (content_encoding or "").strip().lower())
    return _decode_protobuf(body) if media == PROTOBUF else _decode_json(body)


def _inflate(body: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise UnsupportedMediaType(f"content encoding {encoding}: expected gzip or deflate")
    wbits = 31 if encoding == "gzip" else 15
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, MAX_INFLATED_BYTES)
    except zlib.error as exc:
        raise MalformedPayload(f"body is not valid {encoding}") from exc
    if inflater.unconsumed_tail:
        raise MalformedPayload(f"body inflates past {MAX_INFLATED_BYTES} bytes")
    return out


class _Rejects:
    def __init__(self) -> None:
        self.count = 0
        self.reasons: list[str] = []

    def add(self, reason: str) -> None:
        self.count += 1
        if reason not in self.reasons and len(self.reasons) < 5:
            self.reasons.append(reason)


# ---- protobuf ------------------------------------------------------------------------
def _decode_protobuf(body: bytes) -> Decoded:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise MalformedPayload("body is not an ExportTraceServiceRequest") from exc
    rejects = _Rejects()
    spans: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes) or None
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
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


def _pb_attributes(pairs: Sequence[Any]) -> dict[str, Any]:
    return {kv.key: _pb_value(kv.value) for kv in pairs}


def _pb_value(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_pb_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values)
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
def _decode_json(body: bytes) -> Decoded:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedPayload("body is not JSON") from exc
    if not isinstance(document, dict):
        raise MalformedPayload("body is not an ExportTraceServiceRequest object")
    rejects = _Rejects()
    spans: list[SpanRecord] = []
    for resource_spans in _list(document, "resourceSpans", "resource_spans"):
        resource_obj = _obj(resource_spans, "resource")
        resource = _json_attributes(_list(resource_obj, "attributes")) or None
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _list(scope_spans, "spans"):
                if not isinstance(span, dict):
                    raise MalformedPayload("a span is not an object")
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


def _json_attributes(pairs: Sequence[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in pairs:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise MalformedPayload("an attribute is not a {key, value} object")
        out[kv["key"]] = _json_value(kv.get("value"))
    return out


def _json_value(value: Any) -> Any:
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
        inner = _get(value, "arrayValue", "array_value") or {}
        return [_json_value(v) for v in _list(inner, "values")]
    if "kvlistValue" in value or "kvlist_value" in value:
        inner = _get(value, "kvlistValue", "kvlist_value") or {}
        return _json_attributes(_list(inner, "values"))
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
