"""What the python ``mcp`` SDK emits, received as its OTLP/HTTP exporter sends it: the
server's ``tools/call NAME`` span (``gen_ai.operation.name = execute_tool``,
``gen_ai.tool.name``, ``error.type = tool_error`` on an ``isError`` result; no
arguments, no result, no ``mcp.session.id``) under the client's ``MCP send tools/call
NAME`` span, joined across processes by the trace context the client puts in ``_meta``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.agents.otlp import AssemblerLimits
from sidecar.agents.sessions import SessionLimits
from tests.agents.otlp.conftest import Collector, eventually, run_collector

# real servers and subprocesses: the slow suite, not `make test-fast`
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def slow_collector() -> Iterator[Collector]:
    # spans of one trace come from two processes: wait a little after the root
    yield from run_collector(AssemblerLimits(root_grace_s=1.0, sessions=SessionLimits(idle_s=1.0)))


def test_mcp_sdk_spans_from_two_processes_become_sessions(slow_collector: Collector) -> None:
    collector = slow_collector
    subprocess.run(
        [sys.executable, "-m", "tests.agents.otlp.traced_agent", collector.url],
        cwd=ROOT,
        check=True,
        timeout=120,
        capture_output=True,
    )

    def closed() -> bool:
        collector.assembler.deliver(collector.assembler.expire())
        return len(collector.backend.reports) == 2

    eventually(closed)
    by_length = sorted(collector.backend.reports, key=lambda r: len(r.steps))
    alone, conversation = by_length
    # outside any span: the client's span is the root of the call's own trace
    assert [(s.tool, s.error) for s in alone.steps] == [("exchange", "tool_error")]
    assert alone.outcome == "abandoned"
    # inside the conversation: one session, client and server spans merged per call
    assert [(s.tool, s.error) for s in conversation.steps] == [
        ("get_order", None),
        ("exchange", "tool_error"),
    ]
    assert conversation.outcome == "abandoned"
    stats = collector.assembler.stats
    assert stats.merged_calls == 3  # each call was seen by both processes
    assert stats.tool_spans == 6
