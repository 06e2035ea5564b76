"""Retrieval quality with the real all-MiniLM-L6-v2 model over a small, varied catalog."""

from __future__ import annotations

import pytest

from indexes import ID_KEY, ActiveIndex, IndexRecord, MiniLMEmbedder
from tests.support.catalog import CATALOG, QUERIES


@pytest.fixture(scope="module")
def catalog_index(tmp_path_factory: pytest.TempPathFactory, minilm: MiniLMEmbedder) -> ActiveIndex:
    index = ActiveIndex.persistent(tmp_path_factory.mktemp("semantic") / "chroma", minilm)
    records = [IndexRecord(tid, desc, {"kind": tid.split(".")[0]}) for tid, desc in CATALOG.items()]
    assert index.upsert(records) == len(CATALOG)
    return index


def test_catalog_is_large_and_fully_indexed(catalog_index: ActiveIndex) -> None:
    assert len(CATALOG) >= 20
    assert catalog_index.count() == len(CATALOG)
    assert {r.id for r in catalog_index.scan(page_size=7)} == set(CATALOG)
    assert {tid for _, tid in QUERIES} <= set(CATALOG)


@pytest.mark.parametrize(("query", "expected"), QUERIES, ids=[tid for _, tid in QUERIES])
def test_query_finds_the_right_tool_at_rank_one(
    catalog_index: ActiveIndex, query: str, expected: str
) -> None:
    hits = catalog_index.search(query, 3)
    assert hits[0].id == expected, [(h.id, round(h.score, 3)) for h in hits]
    assert hits[0].document == CATALOG[expected]
    assert hits[0].metadata[ID_KEY] == expected
    assert hits[0].score > hits[1].score


def test_exact_description_scores_one(catalog_index: ActiveIndex) -> None:
    for tid in ("maps.geocode", "music.play", "db.sql_query"):
        top = catalog_index.search(CATALOG[tid], 1)[0]
        assert top.id == tid
        assert top.score == pytest.approx(1.0, abs=1e-4)


def test_scores_match_the_models_cosine(catalog_index: ActiveIndex, minilm: MiniLMEmbedder) -> None:
    query = "what's the temperature outside in London right now"
    hits = catalog_index.search(query, 5)
    vectors = minilm.embed([query, *(h.document for h in hits)])
    for hit, vec in zip(hits, vectors[1:], strict=True):
        assert hit.score == pytest.approx(float(vectors[0] @ vec), abs=1e-4)


def test_exclude_hands_the_top_slot_to_the_runner_up(catalog_index: ActiveIndex) -> None:
    query = "will it rain in Tokyo next week"
    full = catalog_index.search(query, 4)
    assert full[0].id == "weather.forecast"
    hits, displaced = catalog_index.search_ranked(query, 3, exclude={"weather.forecast"})
    assert [h.id for h in hits] == [h.id for h in full[1:4]]
    assert [h.id for h in displaced] == ["weather.forecast"]
    assert displaced[0].score == pytest.approx(full[0].score, abs=1e-6)


def test_precomputed_query_vector(catalog_index: ActiveIndex, minilm: MiniLMEmbedder) -> None:
    query = "put on some jazz music"
    vector = catalog_index.embed_query(query)
    assert vector.shape == (384,)
    by_vector = catalog_index.search(vector, 5)
    by_text = catalog_index.search(query, 5)
    assert [h.id for h in by_vector] == [h.id for h in by_text]
    assert by_vector[0].id == "music.play"
