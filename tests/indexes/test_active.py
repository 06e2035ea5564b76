"""ActiveIndex on a real embedded Chroma (no mocks): writes, reads, batching, search,
reopening and error mapping.  Uses the deterministic hashing embedder or explicit vectors.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexes import (
    ID_KEY,
    ActiveIndex,
    DeleteNotVerifiedError,
    Embedder,
    EmbedderError,
    EmbedderMismatchError,
    HashingEmbedder,
    IndexBackendError,
    IndexHit,
    IndexRecord,
    MiniLMEmbedder,
    ToolIndexError,
)
from tests.indexes.helpers import CallRecorder
from tests.support.geometry import ANGLES, GEO_IDS, axis, plane_vectors

REPO = Path(__file__).resolve().parents[2]

TOOLS = [
    IndexRecord("weather", "weather forecast temperature city", {"domain": "weather"}),
    IndexRecord("stocks", "stock price quote ticker", {"domain": "finance"}),
    IndexRecord("translate", "translate text language french", {"domain": "language"}),
    IndexRecord("email", "send email message inbox", {"domain": "mail"}),
    IndexRecord("maps", "route driving directions map", {"domain": "travel"}),
]


def ten_records(prefix: str = "r") -> list[IndexRecord]:
    return [IndexRecord(f"{prefix}{i}", f"record {i} about topic{i}", {"n": i}) for i in range(10)]


# Explicit geometry: record gI lies at I*10 degrees from the query axis e0 in the (e0, e1)
# plane, so its cosine similarity to e0 is exactly cos(I*10 deg) and the ranking is g0..g9.
@pytest.fixture
def geo(index: ActiveIndex) -> ActiveIndex:
    records = [
        IndexRecord(i, f"geometric record {i}", {"angle": a})
        for i, a in zip(GEO_IDS, ANGLES, strict=True)
    ]
    assert index.upsert(records, embeddings=plane_vectors(ANGLES)) == 10
    return index


# ---- writes and reads ---------------------------------------------------------------


def test_new_index_is_empty(index: ActiveIndex, hashing: HashingEmbedder) -> None:
    assert index.count() == 0
    assert index.embedder is hashing
    assert index.max_batch_size > 0
    assert list(index.scan()) == []


def test_upsert_then_get_round_trips_documents_and_metadata(index: ActiveIndex) -> None:
    meta = {"domain": "weather", "cost": 3, "ratio": 0.25, "pinned": True}
    n = index.upsert([IndexRecord("w", "weather forecast for a city", meta), *TOOLS[1:3]])
    assert n == 3
    assert index.count() == 3

    got = index.get(["w", "stocks", "translate"])
    assert set(got) == {"w", "stocks", "translate"}
    w = got["w"]
    assert isinstance(w, IndexRecord)
    assert w.id == "w"
    assert w.document == "weather forecast for a city"
    assert dict(w.metadata) == {**meta, ID_KEY: "w"}
    assert type(w.metadata["cost"]) is int
    assert type(w.metadata["ratio"]) is float
    assert w.metadata["pinned"] is True
    assert got["stocks"].document == "stock price quote ticker"
    assert dict(got["stocks"].metadata) == {"domain": "finance", ID_KEY: "stocks"}


def test_id_key_is_added_without_metadata_and_always_equals_the_id(index: ActiveIndex) -> None:
    index.upsert(
        [IndexRecord("plain", "no metadata at all"), IndexRecord("x", "doc", {ID_KEY: "spoof"})]
    )
    got = index.get(["plain", "x"])
    assert dict(got["plain"].metadata) == {ID_KEY: "plain"}
    assert got["x"].metadata[ID_KEY] == "x"


def test_get_skips_unknown_ids(index: ActiveIndex) -> None:
    index.upsert(TOOLS)
    got = index.get(["maps", "nope", "maps", "weather"])
    assert set(got) == {"maps", "weather"}
    assert index.get([]) == {}
    assert index.get(["nope"]) == {}


def test_empty_upsert_is_a_noop(index: ActiveIndex) -> None:
    calls: list[int] = []
    assert index.upsert([], progress=calls.append) == 0
    assert index.count() == 0
    assert calls == []


def test_upsert_existing_id_replaces_the_record(index: ActiveIndex) -> None:
    index.upsert(TOOLS)
    assert index.count() == 5
    index.upsert([IndexRecord("weather", "bake bread recipe oven", {"domain": "cooking"})])
    assert index.count() == 5
    rec = index.get(["weather"])["weather"]
    assert rec.document == "bake bread recipe oven"
    assert rec.metadata["domain"] == "cooking"
    # the embedding was replaced too: the new text is now an exact match
    top = index.search("bake bread recipe oven", 1)[0]
    assert top.id == "weather"
    assert top.score == pytest.approx(1.0, abs=1e-5)
    assert index.search("weather forecast temperature city", 1)[0].score < 0.5


def test_upsert_replacement_drops_metadata_keys_of_the_old_record(index: ActiveIndex) -> None:
    """``upsert`` promises "insert or replace": a key absent from the new record's
    metadata must not survive from the old one."""
    index.upsert([IndexRecord("t", "old text", {"domain": "weather", "deprecated": True})])
    index.upsert([IndexRecord("t", "new text", {"domain": "finance"})])
    rec = index.get(["t"])["t"]
    assert rec.document == "new text"
    assert dict(rec.metadata) == {"domain": "finance", ID_KEY: "t"}
    assert dict(index.search("new text", 1)[0].metadata) == {"domain": "finance", ID_KEY: "t"}
    assert [dict(r.metadata) for r in index.scan()] == [{"domain": "finance", ID_KEY: "t"}]


def test_duplicate_ids_in_one_upsert_raise_and_write_nothing(index: ActiveIndex) -> None:
    records = [IndexRecord("a", "first"), IndexRecord("b", "other"), IndexRecord("a", "second")]
    with pytest.raises(ToolIndexError, match="duplicate"):
        index.upsert(records)
    assert index.count() == 0


def test_duplicate_ids_in_different_batches_raise_and_write_nothing(
    small_batch_index: tuple[ActiveIndex, CallRecorder],
) -> None:
    # with a max batch of 3, Chroma never sees both copies in one call: only the
    # index's own check can catch them (otherwise the last one would silently win)
    index, recorder = small_batch_index
    records = [*ten_records()[:5], IndexRecord("r0", "a second r0")]
    with pytest.raises(ToolIndexError, match="duplicate") as info:
        index.upsert(records)
    assert not isinstance(info.value, IndexBackendError)
    assert recorder.sizes("upsert") == []
    assert index.count() == 0


def test_embeddings_of_wrong_length_raise_and_write_nothing(index: ActiveIndex) -> None:
    with pytest.raises(ToolIndexError) as info:
        index.upsert(TOOLS, embeddings=plane_vectors([0.0, 10.0]))
    assert not isinstance(info.value, IndexBackendError)
    assert index.count() == 0


def test_delete_returns_present_ids_and_they_are_gone(index: ActiveIndex) -> None:
    index.upsert(TOOLS)
    deleted = index.delete(["maps", "weather", "nope", "maps"])
    assert deleted == ["maps", "weather"]
    assert index.count() == 3
    assert index.get(["maps", "weather"]) == {}
    assert index.existing(["maps", "weather", "stocks"]) == {"stocks"}
    assert {r.id for r in index.scan()} == {"stocks", "translate", "email"}
    assert all(h.id not in {"maps", "weather"} for h in index.search("route driving map", 5))


def test_delete_accepts_any_collection(index: ActiveIndex) -> None:
    index.upsert(TOOLS)
    assert index.delete({"email"}) == ["email"]
    assert index.delete(("stocks",)) == ["stocks"]
    assert index.existing([r.id for r in TOOLS]) == {"weather", "translate", "maps"}


def test_delete_of_nothing_is_a_noop(index: ActiveIndex) -> None:
    # Chroma itself rejects delete(ids=[]); the index must not.
    assert index.delete([]) == []
    index.upsert(TOOLS)
    assert index.delete([]) == []
    assert index.count() == 5


def test_delete_of_unknown_ids_returns_empty(index: ActiveIndex) -> None:
    assert index.delete(["ghost"]) == []
    index.upsert(TOOLS)
    assert index.delete(["ghost", "phantom"]) == []
    assert index.count() == 5


def test_delete_twice_second_time_returns_empty(index: ActiveIndex) -> None:
    index.upsert(TOOLS)
    assert index.delete(["email"]) == ["email"]
    assert index.delete(["email"]) == []
    assert index.count() == 4


def test_discard_deletes_in_two_requests_and_proves_it(index: ActiveIndex) -> None:
    """A move's hot delete: no read of which ids are present first (one request to the
    Chroma server fewer than ``delete``), absent ids are no-ops, and the end is verified."""
    index.upsert(TOOLS)
    recorder = CallRecorder(index._collection)
    index._collection = recorder
    index.discard(["maps", "ghost", "maps"])
    assert [op for op, _n in recorder.calls] == ["delete", "get"]
    assert index.existing([r.id for r in TOOLS]) == {"weather", "stocks", "translate", "email"}
    assert all(h.id != "maps" for h in index.search("route driving map", 5))
    recorder.calls.clear()
    index.discard([])
    assert recorder.calls == []
    assert index.delete(["email"]) == ["email"]
    assert [op for op, _n in recorder.calls] == ["get", "delete", "get"]


def test_discard_raises_when_chroma_kept_a_record(index: ActiveIndex) -> None:
    class KeepsEverything(CallRecorder):
        def delete(self, **kwargs: Any) -> Any:
            self._record("delete", kwargs)  # and deletes nothing

    index.upsert(TOOLS)
    index._collection = KeepsEverything(index._collection)
    with pytest.raises(DeleteNotVerifiedError) as info:
        index.discard(["maps", "ghost"])
    assert info.value.remaining == ["maps"]


def test_existing(index: ActiveIndex) -> None:
    assert index.existing(["weather"]) == set()
    index.upsert(TOOLS)
    assert index.existing(["weather", "ghost", "weather", "maps"]) == {"weather", "maps"}
    assert index.existing([]) == set()
    assert index.existing(iter(["email"])) == {"email"}


def test_count_tracks_writes(index: ActiveIndex) -> None:
    assert index.count() == 0
    index.upsert(TOOLS[:2])
    assert index.count() == 2
    index.upsert(TOOLS)
    assert index.count() == 5
    index.delete(["weather", "stocks"])
    assert index.count() == 3


def test_scan_pages_through_everything(index: ActiveIndex) -> None:
    records = ten_records()
    index.upsert(records)
    recorder = CallRecorder(index._collection)
    index._collection = recorder
    scanned = list(index.scan(page_size=3))
    assert sorted(r.id for r in scanned) == sorted(r.id for r in records)
    assert len(scanned) == 10  # no record twice
    by_id = {r.id: r for r in scanned}
    for r in records:
        assert by_id[r.id].document == r.document
        assert dict(by_id[r.id].metadata) == {**r.metadata, ID_KEY: r.id}
    # really paged: every page at most 3, and more than one page fetched
    sizes = recorder.sizes("get")
    assert len(sizes) >= 4
    assert all(0 < s <= 3 for s in sizes)


def test_scan_page_size_not_dividing_total(index: ActiveIndex) -> None:
    index.upsert(ten_records())
    for page in (1, 4, 10, 11, 1000):
        assert sorted(r.id for r in index.scan(page_size=page)) == sorted(
            f"r{i}" for i in range(10)
        )


def test_scan_with_a_zero_page_size_does_not_silently_yield_nothing(index: ActiveIndex) -> None:
    """``scan`` promises every record.  A page size it cannot use must be rejected
    (ToolIndexError), not turned into an empty iteration that looks like an empty index."""
    index.upsert(ten_records())
    try:
        scanned = list(index.scan(page_size=0))
    except ToolIndexError:
        return
    assert sorted(r.id for r in scanned) == sorted(f"r{i}" for i in range(10))


# ---- batching -----------------------------------------------------------------------


def test_calls_respect_the_max_batch_size(
    small_batch_index: tuple[ActiveIndex, CallRecorder],
) -> None:
    index, recorder = small_batch_index
    assert index.max_batch_size == 3
    records = ten_records()
    ids = [r.id for r in records]
    progress: list[int] = []

    assert index.upsert(records, progress=progress.append) == 10
    assert recorder.sizes("upsert") == [3, 3, 3, 1]
    assert progress == [3, 6, 9, 10]
    assert index.count() == 10

    recorder.calls.clear()
    assert index.existing(ids) == set(ids)
    assert recorder.sizes("get") == [3, 3, 3, 1]

    recorder.calls.clear()
    got = index.get(ids)
    assert recorder.sizes("get") == [3, 3, 3, 1]
    assert set(got) == set(ids)
    assert all(got[r.id].document == r.document for r in records)

    recorder.calls.clear()
    assert sorted(r.id for r in index.scan(page_size=1000)) == sorted(ids)
    assert all(0 < s <= 3 for s in recorder.sizes("get"))

    recorder.calls.clear()
    assert index.delete(ids) == ids
    assert recorder.sizes("delete") == [3, 3, 3, 1]
    assert all(s <= 3 for s in recorder.sizes("get"))
    assert index.count() == 0
    assert index.existing(ids) == set()
    assert index.get(ids) == {}


def test_batched_upsert_keeps_precomputed_embeddings_aligned(
    small_batch_index: tuple[ActiveIndex, CallRecorder],
) -> None:
    index, recorder = small_batch_index
    angles = [i * 9.0 for i in range(10)]
    vectors = plane_vectors(angles)
    records = [IndexRecord(f"v{i}", f"vector {i}") for i in range(10)]
    assert index.upsert(records, embeddings=vectors) == 10
    assert recorder.sizes("upsert") == [3, 3, 3, 1]
    for i, v in enumerate(vectors):
        top = index.search(v, 1)[0]
        assert top.id == f"v{i}"
        assert top.score == pytest.approx(1.0, abs=1e-5)


def test_batched_delete_of_a_partly_present_set(
    small_batch_index: tuple[ActiveIndex, CallRecorder],
) -> None:
    index, _ = small_batch_index
    index.upsert(ten_records())
    wanted = [f"r{i}" for i in range(0, 10, 2)] + ["ghost1", "ghost2"]
    assert index.delete(wanted) == [f"r{i}" for i in range(0, 10, 2)]
    assert index.existing(f"r{i}" for i in range(10)) == {f"r{i}" for i in range(1, 10, 2)}


# ---- search -------------------------------------------------------------------------


def test_search_returns_typed_hits_best_first(geo: ActiveIndex) -> None:
    hits = geo.search(axis(), 4)
    assert [h.id for h in hits] == GEO_IDS[:4]
    for h in hits:
        assert isinstance(h, IndexHit)
        assert isinstance(h.score, float)
        assert h.document == f"geometric record {h.id}"
        assert h.metadata[ID_KEY] == h.id
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert hits[0].metadata["angle"] == 0.0


def test_search_scores_are_cosine_similarity(geo: ActiveIndex) -> None:
    hits = geo.search(axis(), 10)
    assert [h.id for h in hits] == GEO_IDS
    for h, angle in zip(hits, ANGLES, strict=True):
        assert h.score == pytest.approx(math.cos(math.radians(angle)), abs=1e-5)


def test_search_negative_similarity(index: ActiveIndex) -> None:
    index.upsert(
        [IndexRecord("same", "s"), IndexRecord("ortho", "o"), IndexRecord("opposite", "p")],
        embeddings=plane_vectors([0.0, 90.0, 180.0]),
    )
    hits = index.search(axis(), 3)
    assert [h.id for h in hits] == ["same", "ortho", "opposite"]
    assert [h.score for h in hits] == pytest.approx([1.0, 0.0, -1.0], abs=1e-5)


def test_search_exact_text_match_scores_one(index: ActiveIndex, hashing: HashingEmbedder) -> None:
    index.upsert(TOOLS)
    for rec in TOOLS:
        hits = index.search(rec.document, 2)
        assert hits[0].id == rec.id
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert hits[1].score < 0.5
        # and it is the cosine of the embedder's vectors
        q, d = hashing.embed([rec.document, hits[1].document])
        assert hits[1].score == pytest.approx(float(q @ d), abs=1e-5)


def test_search_scores_stay_within_documented_bounds(index: ActiveIndex) -> None:
    """IndexHit.score is documented as a cosine similarity "in [-1, 1]"."""
    docs = [
        "stock price",
        "doc number 3 alpha beta",
        "weather forecast for city",
        *(r.document for r in TOOLS),
    ]
    index.upsert([IndexRecord(f"d{i}", doc) for i, doc in enumerate(docs)])
    for doc in docs:
        for hit in index.search(doc, len(docs)):
            assert -1.0 <= hit.score <= 1.0, (doc, hit.id, hit.score)


def test_search_k_larger_than_collection_returns_everything(geo: ActiveIndex) -> None:
    hits = geo.search(axis(), 50)
    assert [h.id for h in hits] == GEO_IDS


def test_search_on_empty_index(index: ActiveIndex) -> None:
    assert index.search("anything at all", 5) == []
    assert index.search_ranked("anything", 5, exclude={"x"}) == ([], [])


def test_search_after_deleting_everything(index: ActiveIndex) -> None:
    index.upsert(TOOLS)
    index.delete([r.id for r in TOOLS])
    assert index.search("weather", 3) == []


@pytest.mark.parametrize("k", [0, -1, -10])
def test_search_k_below_one_raises(index: ActiveIndex, k: int) -> None:
    with pytest.raises(ToolIndexError, match="k"):
        index.search("weather", k)  # on the empty index too
    index.upsert(TOOLS)
    with pytest.raises(ToolIndexError):
        index.search("weather", k)
    with pytest.raises(ToolIndexError):
        index.search_ranked("weather", k)


def test_search_exclude_never_returned_and_page_is_full(geo: ActiveIndex) -> None:
    exclude = {"g0", "g1", "g3"}
    hits = geo.search(axis(), 3, exclude=exclude)
    assert [h.id for h in hits] == ["g2", "g4", "g5"]
    assert not exclude & {h.id for h in hits}


@pytest.mark.parametrize("k", [1, 2, 5, 7])
def test_search_exclude_returns_k_whenever_enough_records_remain(geo: ActiveIndex, k: int) -> None:
    exclude = ["g0", "g2", "g4"]
    expected = [i for i in GEO_IDS if i not in exclude][:k]
    hits = geo.search(axis(), k, exclude=exclude)
    assert [h.id for h in hits] == expected
    assert len(hits) == k


def test_search_exclude_sizes_one_query_from_the_excluded_share(index: ActiveIndex) -> None:
    """The first query asks for k plus a margin, scaled by the share of the collection
    left after the exclusions, so that exclusions spread through the ranking cost one
    query; exclusions clustered at the top widen it, doubling, up to k plus every
    exclusion; no query asks for more than the collection holds."""
    ids = [f"p{i}" for i in range(100)]
    angles = [i * 1.8 for i in range(100)]
    index.upsert([IndexRecord(i, i) for i in ids], embeddings=plane_vectors(angles))
    index.exact_limit = 0  # Chroma ranks (the exact tier needs no sizing)
    recorder = CallRecorder(index._collection)
    index._collection = recorder

    # 10 of 100 excluded, far from the query: (10 + 5) / 0.9 -> 17, one query
    assert [h.id for h in index.search(axis(), 10, exclude=ids[90:])] == ids[:10]
    assert recorder.sizes("query") == [17]
    # one exclusion: capped at k + 1
    assert [h.id for h in index.search(axis(), 3, exclude=["p99"])] == ids[:3]
    assert recorder.sizes("query")[1:] == [4]
    # the best half excluded: (10 + 5) / 0.5 -> 30 finds nothing, then 60 (k + 50)
    assert [h.id for h in index.search(axis(), 10, exclude=ids[:50])] == ids[50:60]
    assert recorder.sizes("query")[2:] == [30, 60]
    # unknown ids over-estimate the share: the query is capped at the collection size
    exclude = [f"ghost{i}" for i in range(200)]
    assert [h.id for h in index.search(axis(), 10, exclude=exclude)] == ids[:10]
    assert recorder.sizes("query")[4:] == [100]  # not (10 + 5) / 0.1 = 150


def test_search_without_exclusions_asks_for_k(geo: ActiveIndex) -> None:
    geo.exact_limit = 0
    recorder = CallRecorder(geo._collection)
    geo._collection = recorder
    geo.search(axis(), 3)
    assert recorder.sizes("query") == [3]


def test_the_size_hint_follows_our_own_writes(index: ActiveIndex) -> None:
    index.upsert([IndexRecord("a", "a"), IndexRecord("b", "b")], embeddings=plane_vectors([0, 9]))
    assert index._size_hint() == 2
    index.upsert([IndexRecord("c", "c")], embeddings=plane_vectors([18]))
    assert index._size_hint() == 3
    index.delete(["a", "b"])
    assert index._size_hint() == 1


def test_search_exclude_with_unknown_ids(geo: ActiveIndex) -> None:
    exclude = ["g0", *(f"ghost{i}" for i in range(20))]
    hits = geo.search(axis(), 3, exclude=exclude)
    assert [h.id for h in hits] == ["g1", "g2", "g3"]


def test_search_exclude_leaves_fewer_than_k(geo: ActiveIndex) -> None:
    exclude = GEO_IDS[:8]
    assert [h.id for h in geo.search(axis(), 5, exclude=exclude)] == ["g8", "g9"]
    assert geo.search(axis(), 5, exclude=GEO_IDS) == []


def test_search_ranked_reports_displaced_hits(geo: ActiveIndex) -> None:
    # only g1 ranks above the last returned hit (g3); g4 and g8 rank below it
    hits, displaced = geo.search_ranked(axis(), 3, exclude={"g1", "g4", "g8"})
    assert [h.id for h in hits] == ["g0", "g2", "g3"]
    assert [h.id for h in displaced] == ["g1"]

    hits, displaced = geo.search_ranked(axis(), 3, exclude={"g0", "g4", "g8"})
    assert [h.id for h in hits] == ["g1", "g2", "g3"]
    assert [h.id for h in displaced] == ["g0"]

    hits, displaced = geo.search_ranked(axis(), 4, exclude={"g4", "g1", "g8", "ghost"})
    assert [h.id for h in hits] == ["g0", "g2", "g3", "g5"]
    assert [h.id for h in displaced] == ["g1", "g4"]  # rank order, g8 not displaced
    for h in displaced:
        assert isinstance(h, IndexHit)
        assert h.score == pytest.approx(math.cos(math.radians(ANGLES[int(h.id[1:])])), abs=1e-5)
    assert hits == geo.search(axis(), 4, exclude={"g4", "g1", "g8", "ghost"})


def test_search_ranked_without_exclusions(geo: ActiveIndex) -> None:
    hits, displaced = geo.search_ranked(axis(), 3)
    assert [h.id for h in hits] == ["g0", "g1", "g2"]
    assert displaced == []
    hits, displaced = geo.search_ranked(axis(), 3, exclude={"g9"})
    assert [h.id for h in hits] == ["g0", "g1", "g2"]
    assert displaced == []


def test_search_with_precomputed_vector(index: ActiveIndex, hashing: HashingEmbedder) -> None:
    index.upsert(TOOLS)
    query = "driving directions to the city"
    vector = hashing.embed([query])[0]
    by_text = index.search(query, 5)
    by_vector = index.search(vector, 5)
    assert [h.id for h in by_vector] == [h.id for h in by_text]
    assert [h.score for h in by_vector] == pytest.approx([h.score for h in by_text], abs=1e-6)
    # float64 and an unnormalised vector give the same cosine ranking and scores
    by_f64 = index.search(vector.astype(np.float64) * 7.5, 5)
    assert [h.id for h in by_f64] == [h.id for h in by_text]
    assert [h.score for h in by_f64] == pytest.approx([h.score for h in by_text], abs=1e-5)
    np.testing.assert_array_equal(index.embed_query(query), vector)


# ---- reopening ----------------------------------------------------------------------


def test_reopen_same_path_sees_the_records(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    first = ActiveIndex.persistent(path, HashingEmbedder())
    first.upsert(TOOLS)
    second = ActiveIndex.persistent(path, HashingEmbedder())
    assert second.count() == 5
    assert second.get(["maps"])["maps"].document == "route driving directions map"
    assert second.search("weather forecast temperature city", 1)[0].id == "weather"
    # and writes through one are visible through the other
    second.delete(["maps"])
    assert first.existing(["maps", "email"]) == {"email"}


@pytest.mark.slow
def test_reopen_in_a_fresh_process_sees_the_records(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    ActiveIndex.persistent(path, HashingEmbedder()).upsert(TOOLS)
    code = (
        "import json, sys\n"
        "from indexes import ActiveIndex, HashingEmbedder\n"
        "idx = ActiveIndex.persistent(sys.argv[1], HashingEmbedder())\n"
        "print(json.dumps({'count': idx.count(),\n"
        "    'doc': idx.get(['stocks'])['stocks'].document,\n"
        "    'top': idx.search('stock price quote ticker', 1)[0].id}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"count": 5, "doc": "stock price quote ticker", "top": "stocks"}


@pytest.mark.parametrize(
    "other",
    [HashingEmbedder(64), MiniLMEmbedder()],  # another dim, and the same dim (384)
    ids=["hashing-64", "minilm"],
)
def test_reopen_with_another_embedder_raises(tmp_path: Path, other: Embedder) -> None:
    path = tmp_path / "chroma"
    ActiveIndex.persistent(path, HashingEmbedder()).upsert(TOOLS)
    with pytest.raises(EmbedderMismatchError) as info:
        ActiveIndex.persistent(path, other)
    err = info.value
    assert isinstance(err, ToolIndexError)
    assert err.collection == "tools"
    assert err.stored == "hashing-384"
    assert err.given == other.name
    # the failed open did not rebrand the collection: the right embedder still works
    again = ActiveIndex.persistent(path, HashingEmbedder())
    assert again.count() == 5
    with pytest.raises(EmbedderMismatchError):
        ActiveIndex.persistent(path, other)


def test_mismatch_is_detected_on_an_empty_collection(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    ActiveIndex.persistent(path, HashingEmbedder())
    with pytest.raises(EmbedderMismatchError):
        ActiveIndex.persistent(path, HashingEmbedder(128))


def test_collections_on_one_path_are_independent(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    tools = ActiveIndex.persistent(path, HashingEmbedder())
    other = ActiveIndex.persistent(path, HashingEmbedder(64), collection="other")
    tools.upsert(TOOLS)
    assert other.count() == 0
    other.upsert(TOOLS[:1])
    assert tools.count() == 5
    assert other.get(["weather"])["weather"].document == TOOLS[0].document


# ---- error mapping ------------------------------------------------------------------


def test_error_hierarchy() -> None:
    for cls in (IndexBackendError, EmbedderError, EmbedderMismatchError, DeleteNotVerifiedError):
        assert issubclass(cls, ToolIndexError)
    err = IndexBackendError("query", "boom")
    assert (err.operation, err.detail) == ("query", "boom")
    assert "query" in str(err) and "boom" in str(err)
    assert DeleteNotVerifiedError(["a", "b"]).remaining == ["a", "b"]


def test_wrong_dimension_embeddings_raise_backend_error(index: ActiveIndex) -> None:
    index.upsert(TOOLS)  # fixes the collection's dimension at 384
    with pytest.raises(IndexBackendError) as info:
        index.upsert([IndexRecord("bad", "bad vector")], embeddings=np.ones((1, 10), np.float32))
    err = info.value
    assert isinstance(err, ToolIndexError)
    assert err.operation == "upsert"
    assert "10" in err.detail
    assert err.__cause__ is not None
    assert type(err.__cause__).__module__.split(".")[0] == "chromadb"
    assert index.count() == 5
    assert index.existing(["bad"]) == set()


def test_wrong_dimension_query_vector_raises_backend_error(index: ActiveIndex) -> None:
    index.upsert(TOOLS)
    with pytest.raises(IndexBackendError) as info:
        index.search(np.ones(10, dtype=np.float32), 3)
    assert info.value.operation == "query"


def test_unreachable_server_raises_backend_error(hashing: HashingEmbedder) -> None:
    with pytest.raises(IndexBackendError) as info:
        ActiveIndex.http("127.0.0.1", 1, hashing)
    assert info.value.operation == "connect"


# ---- search_fields: hits with a few metadata fields, kept in-process when embedded ----
def _local(index: ActiveIndex) -> bool:
    return index._local_fields


def test_search_fields_matches_search_ranked(geo: ActiveIndex) -> None:
    exclude = {"g1", "g4"}
    full, full_displaced = geo.search_ranked(axis(), 4, exclude)
    hits, displaced = geo.search_fields(axis(), 4, exclude, ["angle"])
    assert [(h.id, h.score) for h in hits] == [(h.id, h.score) for h in full]
    assert [h.id for h in displaced] == [h.id for h in full_displaced]
    assert all(h.document == "" and dict(h.metadata) == {"angle": h_full.metadata["angle"]}
               for h, h_full in zip(hits, full, strict=True))  # fmt: skip


def test_search_fields_reads_fields_once_when_embedded(geo: ActiveIndex) -> None:
    geo.exact_limit = 0  # Chroma ranks: tests/indexes/test_exact.py has the exact tier
    recorder = CallRecorder(geo._collection)
    geo._collection = recorder
    geo.search_fields(axis(), 3, (), ["angle"])
    geo.search_fields(axis(), 3, (), ["angle"])
    if _local(geo):
        # one get for the first page; the second lookup is ids and distances only
        assert recorder.sizes("get") == [3]
    else:
        # another process may write to a server: fields come with every query
        assert recorder.sizes("get") == []
    assert recorder.sizes("query") == [3, 3]


def test_search_fields_follows_our_own_writes(geo: ActiveIndex) -> None:
    assert geo.search_fields(axis(), 1, (), ["angle"])[0][0].metadata == {"angle": 0.0}
    geo.upsert([IndexRecord("g0", "moved", {"angle": 5.0})], embeddings=plane_vectors([0.0]))
    assert geo.search_fields(axis(), 1, (), ["angle"])[0][0].metadata == {"angle": 5.0}
    geo.delete(["g0"])
    assert [h.id for h in geo.search_fields(axis(), 1, (), ["angle"])[0]] == ["g1"]


def test_forget_fields_reads_them_again(geo: ActiveIndex) -> None:
    geo.exact_limit = 0
    geo.search_fields(axis(), 2, (), ["angle"])
    recorder = CallRecorder(geo._collection)
    geo._collection = recorder
    geo.forget_fields()
    geo.search_fields(axis(), 2, (), ["angle"])
    assert recorder.sizes("get") == ([2] if _local(geo) else [])


class _WriteDuringGet(CallRecorder):
    """Runs a write while a lookup's ``get`` is in flight (after it read the old
    value), as another request thread of the server could."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.during_get: Callable[[], None] | None = None

    def get(self, **kwargs: Any) -> Any:
        out = super().get(**kwargs)
        hook, self.during_get = self.during_get, None
        if hook is not None:
            hook()
        return out


@pytest.fixture
def embedded_geo(tmp_path: Path, hashing: HashingEmbedder) -> ActiveIndex:
    """The geometric records on the embedded store, the one that reads fields with a
    ``get`` apart from the query (a server index reads them with the query)."""
    index = ActiveIndex.persistent(tmp_path / "chroma", hashing)
    index.upsert(
        [IndexRecord(i, i, {"angle": a}) for i, a in zip(GEO_IDS, ANGLES, strict=True)],
        embeddings=plane_vectors(ANGLES),
    )
    return index


def test_a_write_during_a_lookup_never_leaves_a_stale_field(embedded_geo: ActiveIndex) -> None:
    geo = embedded_geo
    recorder = _WriteDuringGet(geo._collection)
    geo._collection = recorder
    recorder.during_get = lambda: geo.upsert(
        [IndexRecord("g0", "moved", {"angle": 7.0})], embeddings=plane_vectors([0.0])
    )
    first = geo.search_fields(axis(), 1, (), ["angle"])[0][0]
    assert first.metadata in ({"angle": 0.0}, {"angle": 7.0})  # either side of the write
    assert geo.search_fields(axis(), 1, (), ["angle"])[0][0].metadata == {"angle": 7.0}


def test_a_record_deleted_between_query_and_get_is_ranked_again(
    embedded_geo: ActiveIndex,
) -> None:
    geo = embedded_geo
    recorder = CallRecorder(geo._collection)
    geo._collection = recorder
    real_get = recorder.get

    def get(**kwargs: Any) -> Any:
        recorder.get = real_get  # type: ignore[method-assign]
        recorder._inner.delete(ids=["g0"])  # another writer, behind the index's back
        return real_get(**kwargs)

    recorder.get = get  # type: ignore[method-assign]
    hits, _ = geo.search_fields(axis(), 2, (), ["angle"])
    assert [h.id for h in hits] == ["g1", "g2"]
    assert [h.metadata for h in hits] == [{"angle": 10.0}, {"angle": 20.0}]


@pytest.mark.slow
def test_a_folder_rebuilt_by_another_process_is_read_anew_after_close(tmp_path: Path) -> None:
    """Chroma keeps one system per folder while any client of it is open: an index left
    open here would go on reading (and failing to write) the deleted files after another
    process replaced the folder."""
    import shutil

    path = tmp_path / "chroma"
    first = ActiveIndex.persistent(path, HashingEmbedder())
    first.upsert(TOOLS)
    first.close()
    first.close()  # idempotent
    shutil.rmtree(path)
    code = (
        "import sys\n"
        "from indexes import ActiveIndex, HashingEmbedder\n"
        "from tests.indexes.test_active import TOOLS\n"
        "idx = ActiveIndex.persistent(sys.argv[1], HashingEmbedder())\n"
        "idx.upsert(TOOLS[:2])\n"
        "idx.close()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    again = ActiveIndex.persistent(path, HashingEmbedder())
    assert again.count() == 2
    again.upsert(TOOLS[2:3])  # a write reaches the new files
    assert again.count() == 3
    again.close()


def connections_to(port: int) -> int:
    """Established TCP connections this process holds to ``port`` on the loopback (read
    from /proc: the sockets among our file descriptors, matched in the kernel's table)."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                ours.add(target[8:-1])
    count = 0
    for line in Path("/proc/self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port = int(fields[2].split(":")[1], 16)
        count += remote_port == port and fields[3] == "01" and fields[9] in ours
    return count


def test_closing_a_server_index_closes_its_connections(
    chroma_server: tuple[str, int], hashing: HashingEmbedder
) -> None:
    """close() closes a Chroma server client's connections (its own pool and its admin
    client's), rather than leaving them for the garbage collector: each socket left is
    a ResourceWarning printed after the suite's summary when the interpreter exits."""
    import uuid

    host, port = chroma_server
    index = ActiveIndex.http(host, port, hashing, collection=f"close-{uuid.uuid4().hex}")
    index.upsert(TOOLS)
    assert index.count() == len(TOOLS)
    assert connections_to(port) >= 1
    index.close()
    index.close()  # idempotent
    assert connections_to(port) == 0
