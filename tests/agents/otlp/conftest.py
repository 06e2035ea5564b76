"""A running OTLP/HTTP collector for the tests: FastAPI with the intake router, under
uvicorn on a loopback socket the OS chose, in a thread (the SDK's exporter is
synchronous); and helpers that turn SDK spans into OTLP/JSON bodies."""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.standalone_backend import StandaloneBackend
from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.agents.otlp import AssemblerLimits, TraceAssembler, otlp_router
from tests.serving import serving


@dataclass
class Collector:
    url: str
    assembler: TraceAssembler
    backend: Any


def run_collector(limits: AssemblerLimits, backend: Any = None) -> Iterator[Collector]:
    import uvicorn
    from fastapi import FastAPI

    backend = StandaloneBackend() if backend is None else backend
    assembler = TraceAssembler(backend, limits)
    app = FastAPI()
    app.include_router(otlp_router(assembler))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the collector did not start"
        time.sleep(0.02)
    try:
        yield Collector(f"http://127.0.0.1:{port}/v1/traces", assembler, backend)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    yield from run_collector(AssemblerLimits(root_grace_s=0, trace_idle_s=60))


TOKEN = "otlp-token-0123456789"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Sidecar]]:
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc,
        serving(sc, TOKEN) as url,
    ):
        yield url, sc


def eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def local_tracer() -> tuple[Any, Any]:
    """A tracer on its own provider (not the process-wide one), and the in-memory
    exporter that holds its finished spans."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent-under-test"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider.get_tracer("tests.agents.otlp"), memory


def otlp_json(spans: Sequence[Any]) -> dict[str, Any]:
    """SDK spans as an OTLP/JSON request: the protobuf message's JSON mapping with the
    OTLP deviations (hex ids, integer enums)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return document
