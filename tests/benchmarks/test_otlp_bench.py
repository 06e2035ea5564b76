"""The OTLP isolation benchmark's parts: registered, and its bodies are what it says."""

from __future__ import annotations

import gzip

import pytest

from sidecar.agents.otlp import AssemblerLimits, TraceAssembler


def test_otlp_is_a_registered_benchmark() -> None:
    from benchmarks.run import ALL_ORDER, MODULES, build_parser

    assert MODULES["otlp"] == "benchmarks.bench_otlp" and "otlp" in ALL_ORDER
    assert build_parser().parse_args(["otlp", "--full"]).quick is False


@pytest.mark.slow
def test_the_bodies_hold_what_the_question_says() -> None:
    from benchmarks.bench_otlp import big_results, many_spans, small

    big = big_results(1)
    assert len(big) < 100_000 and len(gzip.decompress(big)) > 20_000_000
    assembler = TraceAssembler(None, AssemblerLimits(max_request_bytes=64 * 1_048_576))
    taken = assembler.receive(big, "application/json", "gzip")
    assert (taken.accepted, taken.rejected) == (22, 0)
    many = assembler.receive(many_spans(2), "application/json", "gzip")
    assert (many.accepted, many.rejected) == (10_000, 90_000)
    one = assembler.receive(small(3), "application/json")
    assert one.accepted == 3 and assembler.stats.tool_spans == 20 + 1 + 100 + 2
