"""What the embed benchmark's parts share: the k of every lookup, what a hit carries, the
sets the lookup part times, the query texts and the tool texts."""

from __future__ import annotations

import random
from typing import Any

K = 10


FIELDS = ("description", "tool_type")
"""What a sidecar lookup hit carries (``sidecar.core.HIT_FIELDS``)."""


INCLUDE: list[Any] = ["metadatas", "distances"]


WARMUP = 3
"""Untimed rounds of :func:`benchmarks.harness.timing.interleaved` (its default)."""


LOOKUP_SETS = (
    "raw_chroma",
    "text_exact",
    "text_chroma",
    "vector_exact",
    "embed_int8",
    "torch",
    "agreement",
)


SHORT_QUERIES = (
    "what's the weather in Lisbon",
    "convert 100 euros to yen",
    "send an email to my landlord",
    "book a table for two tonight",
    "find cheap flights to Rome",
    "summarize this pdf report",
    "translate hello into German",
    "latest stock price of Tesla",
)


WORDS = tuple(
    "search parse extract weather stock email calendar file image audio translate "  # noqa: SIM905
    "summarize convert route map price currency database query chart code review news "
    "flight hotel recipe product invoice payment ticket user account report".split()
)


HEAVY = ("onnxruntime", "onnx", "tokenizers", "torch", "sentence_transformers", "numpy")


def long_query(rng: random.Random) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(40))
    return f"Find a tool that can {words} and then write the result to a shared report"


def tool_texts(n: int, rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(n)]
