"""The lexical tier: what BM25 counts, and a copy that follows every write of its index
(real Chroma)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from indexes import ActiveIndex, HashingEmbedder, IndexRecord
from indexes.lexical import LexicalSnapshot, LexicalTier, terms, words
from tests.support.text import fullwidth


def test_identifiers_are_split_into_words() -> None:
    assert words("getVehicleBatteryLevel") == ["get", "vehicle", "battery", "level"]
    assert words("search_flights-v2.list/all:now") == [
        "search",
        "flights",
        "v2",
        "list",
        "all",
        "now",
    ]
    assert words("parseHTTPResponse") == ["parse", "http", "response"]
    # stop words go, the rest is stemmed
    assert terms("Searching the flights") == ["search", "flight"]


def test_non_ascii_text_has_terms() -> None:
    assert words("Météo à Zürich") == ["météo", "à", "zürich"]
    assert words(f"{fullwidth('FULL')} width") == ["full", "width"]  # NFKC folds width
    assert words("查询天气") == ["查", "询", "天", "气"]  # one term per ideograph
    assert words("天气API查询") == ["天", "气", "api", "查", "询"]


def test_a_snapshot_ranks_by_bm25_with_ties_in_row_order() -> None:
    snap = LexicalSnapshot.build(
        ["a", "b", "c"], [terms("weather forecast"), terms("send email"), terms("weather now")]
    )
    ranked = [rid for rid, _ in snap.top(terms("weather"), 5)]
    assert ranked == ["a", "c"]  # equal scores: row order; no match: not ranked
    assert snap.top(terms("unknown words"), 5) == []
    assert [rid for rid, _ in snap.top(terms("weather"), 5, skip={"a"})] == ["c"]
    assert LexicalSnapshot.build([], []).top(["x"], 3) == []


def test_a_build_logs_nothing_below_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """bm25s logs each build at DEBUG on a logger of its own set to DEBUG: behind a
    root handler (the mcp SDK's server installs one) a server would print a line per
    rebuild."""
    caplog.set_level(logging.DEBUG)
    LexicalSnapshot.build(["a", "b"], [["weather"], ["stock", "price"]])
    assert [r.getMessage() for r in caplog.records if r.name.startswith("bm25s")] == []


def test_the_tier_follows_writes_and_never_ranks_a_deleted_id() -> None:
    tier = LexicalTier()
    assert tier.ranked("weather", 3) is None  # nothing loaded
    assert tier.install({"a": "weather forecast", "b": "send email"}, tier.generation())
    assert [r for r, _ in tier.ranked("weather", 3) or []] == ["a"]
    tier.upserted({"c": "weather radar", "b": "weather alerts by email"})
    assert {r for r, _ in tier.ranked("weather", 3) or []} == {"a", "b", "c"}
    tier.deleted(["a"])
    assert "a" not in [r for r, _ in tier.ranked("weather", 3) or []]
    tier.drop()
    assert tier.ranked("weather", 3) is None


def test_a_deleted_id_is_not_ranked_even_before_the_rebuild() -> None:
    tier = LexicalTier()
    tier.install({"a": "weather", "b": "weather radar"}, tier.generation())
    assert tier.ranked("weather", 3)  # builds the snapshot
    tier.deleted(["b"])
    assert [r for r, _ in tier.ranked("weather", 3) or []] == ["a"]


def test_a_load_that_overlapped_a_write_is_not_installed() -> None:
    tier = LexicalTier()
    generation = tier.generation()
    tier.begin_write()
    assert not tier.install({"a": "stale"}, generation)
    assert not tier.loaded()


def _ranked(index: ActiveIndex, text: str) -> list[str]:
    return [rid for rid, _ in index.lexical_ranked(text, 10)]


def test_the_index_keeps_its_lexical_copy_in_step(tmp_path: Path) -> None:
    index = ActiveIndex.persistent(tmp_path, HashingEmbedder(), lexical=True)
    index.upsert([IndexRecord("weather_now", "current weather in a city")])
    assert _ranked(index, "weather") == ["weather_now"]  # loaded from Chroma
    index.upsert([IndexRecord("radar", "weather radar images")])
    assert set(_ranked(index, "weather")) == {"weather_now", "radar"}
    index.upsert([IndexRecord("radar", "rain maps")])  # a changed document
    assert _ranked(index, "weather") == ["weather_now"]
    assert _ranked(index, "rain") == ["radar"]
    index.delete(["weather_now"])
    assert _ranked(index, "weather") == []
    index.close()


def test_another_writer_is_followed_after_invalidate(tmp_path: Path) -> None:
    reader = ActiveIndex.persistent(tmp_path, HashingEmbedder(), lexical=True)
    writer = ActiveIndex.persistent(tmp_path, HashingEmbedder())
    writer.upsert([IndexRecord("a", "weather forecast")])
    assert _ranked(reader, "weather") == ["a"]
    writer.upsert([IndexRecord("b", "weather radar")])
    writer.delete(["a"])
    assert _ranked(reader, "weather") == ["a"]  # a stale copy until told
    reader.invalidate()
    assert _ranked(reader, "weather") == ["b"]
    reader.close()
    writer.close()


def test_an_index_without_the_tier_ranks_nothing_lexically(tmp_path: Path) -> None:
    index = ActiveIndex.persistent(tmp_path, HashingEmbedder())
    index.upsert([IndexRecord("a", "weather forecast")])
    assert index.lexical_ranked("weather", 5) == []
    index.close()


def test_a_record_may_carry_a_text_of_its_own_for_bm25(tmp_path: Path) -> None:
    from indexes import LEXICAL_KEY

    index = ActiveIndex.persistent(tmp_path, HashingEmbedder(), lexical=True)
    index.upsert(
        [
            IndexRecord("station", "reading fetch", {LEXICAL_KEY: "reading fetch anemometer"}),
            IndexRecord("other", "weather radar"),
        ]
    )
    assert _ranked(index, "anemometer") == ["station"]  # as written
    index.invalidate()
    assert _ranked(index, "anemometer") == ["station"]  # as read back from Chroma
    assert _ranked(index, "radar") == ["other"]  # no text of its own: its document
    index.close()


def test_scores_of_named_ids_and_the_spread_over_every_document(tmp_path: Path) -> None:
    import numpy as np

    index = ActiveIndex.persistent(tmp_path, HashingEmbedder(), lexical=True)
    texts = {"a": "weather forecast", "b": "weather radar weather", "c": "currency rates"}
    index.upsert([IndexRecord(k, v) for k, v in texts.items()])
    found = index.lexical_scored("weather", 1, include=["b", "c", "gone"])
    assert found is not None and found.ranked == [("b", found.ranked[0][1])]
    assert found.scores["c"] == 0.0 and "gone" not in found.scores
    everything = dict(index.lexical_ranked("weather", 5)) | {"c": 0.0}
    assert found.scores["b"] == everything["b"]
    assert found.spread == pytest.approx(float(np.std(list(everything.values()))), rel=1e-6)
    index.close()
    assert ActiveIndex.persistent(tmp_path / "x", HashingEmbedder()).lexical_scored("a", 1) is None
