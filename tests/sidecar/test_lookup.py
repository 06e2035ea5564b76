"""Context-aware lookup on the 62-tool demo catalog with the real model and Chroma."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexes import MiniLMEmbedder
from sidecar import InvalidInput, Sidecar
from sidecar.demo import demo_tools
from tests.sidecar.helpers import abandoned, completed

FATAL = ["web_search", "html_parser", "llm_extractor"]
BIG = {"payload_bytes": 7_200_000}
WHEN = [{"step": "html_parser", "field": "payload_bytes", "op": ">", "value": 5_000_000}]


@pytest.fixture(scope="module")
def catalog_home(tmp_path_factory: pytest.TempPathFactory, minilm: MiniLMEmbedder) -> Path:
    home = tmp_path_factory.mktemp("lookup") / "home"
    with Sidecar.open(embedder=minilm, home=home) as sc:
        sc.add_tools(demo_tools())
    return home


@pytest.fixture
def sc(catalog_home: Path, tmp_path: Path, minilm: MiniLMEmbedder) -> Iterator[Sidecar]:
    """A copy of the module's indexed catalog with an empty archive, per test."""
    home = tmp_path / "home"
    shutil.copytree(catalog_home, home)
    with Sidecar.open(embedder=minilm, home=home) as sidecar:
        yield sidecar


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what's the weather like in Lisbon right now", "weather_current"),
        ("will it rain in Oslo over the next five days", "weather_forecast"),
        ("convert 100 US dollars to euros", "currency_converter"),
        ("latest share price of ACME", "stock_quote"),
        ("send an email to my manager", "email_send"),
        ("schedule a meeting on Tuesday at 3pm", "calendar_create_event"),
        ("turn this street address into coordinates", "geocoder"),
        ("transcribe this voice recording", "speech_to_text"),
        ("read the text in a scanned receipt photo", "ocr_reader"),
        ("convert HTML into markdown", "html_to_markdown"),
        ("run a SQL query on the analytics warehouse", "sql_query"),
        ("find cheap flights from LIS to BER", "flight_search"),
        ("translate this paragraph into German", "translator"),
        ("what time is it in Tokyo", "timezone_lookup"),
    ],
)
def test_semantic_queries_find_the_right_tool(sc: Sidecar, query: str, expected: str) -> None:
    hits = sc.search(query, k=3).hits
    assert expected in [h.tool_id for h in hits[:3]], [h.tool_id for h in hits]
    assert hits[0].score >= hits[-1].score


def test_plain_index_hands_back_the_fatal_continuation(sc: Sidecar) -> None:
    hits = sc.search("extract product names and prices from the page text", k=3, after=FATAL[:2])
    assert hits.hits[0].tool_id == "llm_extractor"
    assert hits.withheld == ()


def test_fatal_continuation_is_withheld_and_named(sc: Sidecar) -> None:
    archived = sc.report(abandoned(FATAL, "timeout on 7.2 MB payload", rule="R-5MB", when=WHEN))
    result = sc.search(
        "extract product names and prices from the page text", k=5, after=FATAL[:2], context=BIG
    )
    ids = [h.tool_id for h in result.hits]
    assert "llm_extractor" not in ids
    assert len(ids) == 5  # no short page
    assert ids[0] == "chunked_llm_extractor"
    assert [(w.tool_id, w.rule, w.pointer) for w in result.withheld] == [
        ("llm_extractor", "R-5MB", archived.pointer)
    ]


def test_small_payload_allows_the_continuation_with_a_warning(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "timeout on 7.2 MB payload", when=WHEN))
    result = sc.search(
        "extract product names and prices from the page text",
        k=3,
        after=FATAL[:2],
        context={"html_parser.payload_bytes": 20_000},
    )
    top = result.hits[0]
    assert top.tool_id == "llm_extractor" and result.withheld == ()
    assert any("does not hold" in w for w in top.warnings)


def test_missing_context_fails_closed(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "timeout on 7.2 MB payload", when=WHEN))
    result = sc.search("extract prices from text", k=3, after=FATAL[:2])
    assert "llm_extractor" not in [h.tool_id for h in result.hits]


def test_prefix_tools_carry_warnings(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413", when=WHEN))
    hit = next(h for h in sc.search("parse the page HTML", k=3, after=["web_search"]).hits)
    assert hit.tool_id == "html_parser"
    assert hit.warnings and hit.warnings[0].startswith("step 2 of 3")


def test_the_prefix_only_matters_as_a_suffix_run(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413"))
    ids = [
        h.tool_id
        for h in sc.search(
            "extract prices", k=3, after=["web_search", "html_parser", "calculator"]
        ).hits
    ]
    assert "llm_extractor" in ids


def test_archive_is_never_searchable(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413", rule="IF zebra unicorn THEN explosion"))
    before = sc.index.count()
    result = sc.search("zebra unicorn explosion", k=10)
    assert sc.index.count() == before == len(demo_tools())
    assert all(h.tool_id in {t.tool_id for t in demo_tools()} for h in result.hits)


def test_lookup_input_is_validated(sc: Sidecar) -> None:
    for kwargs in (
        {"query": ""},
        {"query": "x", "k": 0},
        {"query": "x", "k": 101},
        {"query": "x", "after": "web_search"},
        {"query": "x", "after": ["bad id"]},
        {"query": "x", "context": {"a": [1]}},
    ):
        with pytest.raises(InvalidInput):
            sc.search(**kwargs)  # type: ignore[arg-type]


def test_completed_reuse_does_not_lift_the_constraint(sc: Sidecar) -> None:
    sc.report(completed(["web_search", "text_summarizer"]))
    sc.report(abandoned(FATAL, "HTTP 413"))
    assert not sc.check(FATAL).safe
    assert sc.check(["web_search", "text_summarizer"]).safe
