"""The exact tier: the snapshot's ranking against brute force, and the tier inside
ActiveIndex against Chroma's own answers, through writes, invalidation, the size limit
and concurrent threads, on a real embedded Chroma."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexes import (
    EXACT_LIMIT,
    ActiveIndex,
    HashingEmbedder,
    IndexBackendError,
    IndexRecord,
    MiniLMEmbedder,
)
from indexes.exact import ExactTier, Snapshot
from tests.indexes.helpers import CallRecorder
from tests.support.catalog import QUERIES
from tests.support.geometry import ANGLES, GEO_IDS, axis, plane_vectors

REPO = Path(__file__).resolve().parents[2]
DIM = 384


def random_vectors(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def brute_force(matrix: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    scores = unit @ (query / np.linalg.norm(query))
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


# ---- Snapshot -----------------------------------------------------------------------


def test_snapshot_top_is_brute_force() -> None:
    vectors = random_vectors(3000, seed=1)
    ids = [f"t{i}" for i in range(3000)]
    snap = Snapshot.build(ids, vectors)
    overlap = 0
    for q in random_vectors(50, seed=2):
        got = snap.top(q, 10)
        want = [ids[i] for i in brute_force(vectors, q, 10)]
        assert [rid for rid, _ in got] == want
        overlap += len({rid for rid, _ in got} & set(want))
        scores = [s for _, s in got]
        assert scores == sorted(scores, reverse=True)
    assert overlap / (50 * 10) == 1.0  # recall@10


def test_snapshot_ties_keep_row_order_and_scores_are_bounded() -> None:
    vectors = np.vstack([plane_vectors([0, 0, 0, 90, 180])])
    snap = Snapshot.build(["c", "a", "b", "d", "e"], vectors)
    assert [rid for rid, _ in snap.top(axis(), 5)] == ["c", "a", "b", "d", "e"]
    assert [rid for rid, _ in snap.top(axis(), 2)] == ["c", "a"]
    assert all(-1.0 <= s <= 1.0 for _, s in snap.top(axis(), 5))
    assert snap.top(axis(), 0) == []


def test_snapshot_copy_on_write() -> None:
    snap = Snapshot.build(GEO_IDS, plane_vectors(ANGLES))
    moved = snap.upserted(["g9", "new"], plane_vectors([0.5, 1.0]))
    assert [rid for rid, _ in moved.top(axis(), 3)] == ["g0", "g9", "new"]
    assert [rid for rid, _ in snap.top(axis(), 2)] == ["g0", "g1"]  # untouched
    assert len(moved) == 11 and len(snap) == 10
    gone = moved.without(["g0", "g9", "ghost"])
    assert [rid for rid, _ in gone.top(axis(), 2)] == ["new", "g1"]
    assert gone.without(["ghost"]) is gone
    assert not snap.matrix.flags.writeable
    empty = Snapshot.build([], np.zeros((0, DIM), np.float32))
    assert empty.top(axis(), 3) == []
    assert len(empty.upserted(["a"], plane_vectors([0]))) == 1


def test_snapshot_ranked_reports_displaced() -> None:
    snap = Snapshot.build(GEO_IDS, plane_vectors(ANGLES))
    hits, displaced = snap.ranked(axis(), 4, {"g4", "g1", "g8", "ghost"})
    assert [rid for rid, _ in hits] == ["g0", "g2", "g3", "g5"]
    assert [rid for rid, _ in displaced] == ["g1", "g4"]


def test_tier_generation_refuses_a_load_that_raced_a_write() -> None:
    tier = ExactTier(limit=100)
    snap = Snapshot.build(GEO_IDS, plane_vectors(ANGLES))
    generation = tier.generation()
    tier.begin_write()
    assert not tier.install(snap, generation)
    assert tier.current() is None
    assert tier.install(snap, tier.generation())
    assert tier.current() is snap
    assert not ExactTier(limit=5).install(snap, 0)  # over the limit
    with pytest.raises(ValueError):
        ExactTier(limit=0)


# ---- inside ActiveIndex --------------------------------------------------------------


@pytest.fixture
def geo_index(tmp_path: Path, hashing: HashingEmbedder) -> ActiveIndex:
    index = ActiveIndex.persistent(tmp_path / "chroma", hashing)
    records = [
        IndexRecord(i, f"doc {i}", {"angle": a}) for i, a in zip(GEO_IDS, ANGLES, strict=True)
    ]
    index.upsert(records, embeddings=plane_vectors(ANGLES))
    return index


def test_the_embedded_store_ranks_exactly_by_default(geo_index: ActiveIndex) -> None:
    assert geo_index.exact_limit == EXACT_LIMIT
    recorder = CallRecorder(geo_index._collection)
    geo_index._collection = recorder
    for _ in range(3):
        hits, _ = geo_index.search_fields(axis(), 3, (), ["angle"])
        assert [h.id for h in hits] == ["g0", "g1", "g2"]
    # loaded once (one page of embeddings), then the lookups never ask Chroma to rank
    assert recorder.sizes("query") == []
    assert [name for name, _ in recorder.calls] == ["get", "get"]  # vectors, then fields


def test_a_server_index_asks_chroma_unless_told(
    chroma_server: tuple[str, int], hashing: HashingEmbedder
) -> None:
    host, port = chroma_server
    off = ActiveIndex.http(host, port, hashing, collection="exact-off")
    on = ActiveIndex.http(host, port, hashing, "exact-on", exact_limit=10)
    try:
        assert off.exact_limit == 0
        assert on.exact_limit == 10
    finally:
        off.close()
        on.close()


def test_search_ranked_with_documents_matches_chroma(geo_index: ActiveIndex) -> None:
    exclude = {"g1", "g4"}
    exact = geo_index.search_ranked(axis(), 4, exclude)
    geo_index.exact_limit = 0
    chroma = geo_index.search_ranked(axis(), 4, exclude)
    for ours, theirs in zip(exact, chroma, strict=True):
        assert [(h.id, h.document, dict(h.metadata)) for h in ours] == [
            (h.id, h.document, dict(h.metadata)) for h in theirs
        ]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-5)


def test_every_write_of_the_index_is_followed(geo_index: ActiveIndex) -> None:
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g0", "g1"]  # loads the tier
    recorder = CallRecorder(geo_index._collection)
    geo_index._collection = recorder
    geo_index.upsert([IndexRecord("new", "new", {"angle": 5.0})], embeddings=plane_vectors([5]))
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g0", "new"]
    geo_index.upsert([IndexRecord("g9", "moved")], embeddings=plane_vectors([1]))
    assert [h.id for h in geo_index.search(axis(), 3)] == ["g0", "g9", "new"]
    geo_index.delete(["g0"])
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g9", "new"]
    assert recorder.sizes("query") == []
    # never reloaded: no get asked for every record
    assert all(size <= 3 for size in recorder.sizes("get"))


def test_a_deleted_id_is_never_served(geo_index: ActiveIndex) -> None:
    geo_index.search(axis(), 1)
    geo_index.delete(["g0", "g1"])
    for fields in (True, False):
        hits = (
            geo_index.search_fields(axis(), 10, (), ["angle"])[0]
            if fields
            else geo_index.search(axis(), 10)
        )
        assert [h.id for h in hits] == GEO_IDS[2:]


def test_invalidate_follows_another_writer(geo_index: ActiveIndex, tmp_path: Path) -> None:
    geo_index.search(axis(), 1)
    # another writer, behind this index's back
    geo_index._collection.delete(ids=["g0"])
    geo_index._collection.upsert(
        ids=["late"], embeddings=plane_vectors([0.5]), documents=["late"], metadatas=[{"a": 1}]
    )
    # fields of a winner Chroma no longer holds: that lookup falls back to Chroma
    assert [h.id for h in geo_index.search(axis(), 2)] == ["late", "g1"]
    geo_index.invalidate()
    assert [h.id for h in geo_index.search_fields(axis(), 2, (), ["a"])[0]] == ["late", "g1"]
    geo_index._collection.delete(ids=["late"])
    geo_index.forget_fields()  # what the sidecar calls when the revision moves
    assert [h.id for h in geo_index.search_fields(axis(), 2, (), ["a"])[0]] == ["g1", "g2"]


def test_forget_fields_can_keep_the_vectors(geo_index: ActiveIndex) -> None:
    geo_index.search_fields(axis(), 2, (), ["angle"])
    recorder = CallRecorder(geo_index._collection)
    geo_index._collection = recorder
    geo_index.forget_fields(keep_vectors=True)
    geo_index.search_fields(axis(), 2, (), ["angle"])
    assert recorder.sizes("get") == [2]  # the fields only
    geo_index.forget_fields()
    geo_index.search_fields(axis(), 2, (), ["angle"])
    assert len(recorder.sizes("get")) == 3  # the vectors again, then the fields


def test_over_the_limit_chroma_ranks(geo_index: ActiveIndex) -> None:
    geo_index.exact_limit = 5
    recorder = CallRecorder(geo_index._collection)
    geo_index._collection = recorder
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g0", "g1"]
    assert recorder.sizes("query") == [2]
    geo_index.delete(GEO_IDS[5:])
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g0", "g1"]
    assert recorder.sizes("query") == [2]  # back under the limit: exact again
    geo_index.upsert(
        [IndexRecord(f"x{i}", "x") for i in range(3)], embeddings=plane_vectors([50, 60, 70])
    )
    assert geo_index._exact is not None and geo_index._exact.current() is None  # outgrown
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g0", "g1"]
    assert recorder.sizes("query") == [2, 2]


def test_a_failed_upsert_drops_the_tier(geo_index: ActiveIndex) -> None:
    geo_index.search(axis(), 1)
    with pytest.raises(IndexBackendError):
        geo_index.upsert([IndexRecord("bad", "bad")], embeddings=np.ones((1, 10), np.float32))
    assert geo_index._exact is not None and geo_index._exact.current() is None
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g0", "g1"]


class _DeleteDuringLoad(CallRecorder):
    """Runs a delete through the index while the tier's load reads the vectors."""

    def __init__(self, inner: Any, index: ActiveIndex) -> None:
        super().__init__(inner)
        self.index = index
        self.armed = True

    def get(self, **kwargs: Any) -> Any:
        out = super().get(**kwargs)
        if self.armed and "embeddings" in (kwargs.get("include") or []):
            self.armed = False
            self.index.delete(["g0"])
        return out


def test_a_load_that_raced_a_delete_is_not_installed(geo_index: ActiveIndex) -> None:
    geo_index._collection = _DeleteDuringLoad(geo_index._collection, geo_index)
    # the load read g0 before the delete: it must not serve it, then or later
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g1", "g2"]
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g1", "g2"]
    tier = geo_index._exact
    assert tier is not None
    snapshot = tier.current()
    assert snapshot is not None and "g0" not in snapshot.position


@pytest.mark.slow
def test_lookups_racing_writes_never_return_a_deleted_id(
    tmp_path: Path, hashing: HashingEmbedder
) -> None:
    index = ActiveIndex.persistent(tmp_path / "chroma", hashing)
    n = 300
    ids = [f"t{i}" for i in range(n)]
    vectors = random_vectors(n, seed=3)
    index.upsert([IndexRecord(i, i, {"n": k}) for k, i in enumerate(ids)], embeddings=vectors)
    gone: list[str] = []  # appended once a delete has returned
    errors: list[BaseException] = []
    stop = threading.Event()
    queries = random_vectors(20, seed=4)

    def writer() -> None:
        rng = random.Random(5)
        try:
            for i in rng.sample(ids, 120):
                index.delete([i])
                gone.append(i)
                if rng.random() < 0.3:
                    extra = f"{i}-new"
                    vector = random_vectors(1, seed=int(i[1:]))
                    index.upsert([IndexRecord(extra, extra)], embeddings=vector)
                if rng.random() < 0.1:
                    index.forget_fields()  # lookups reload while deletes go on
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            stop.set()

    def reader(offset: int) -> None:
        try:
            k = 0
            while not stop.is_set():
                before = set(gone)
                q = queries[(k + offset) % len(queries)]
                k += 1
                hits, displaced = index.search_fields(q, 20, set(ids[:5]), ["n"])
                served = {h.id for h in hits} | {h.id for h in displaced}
                assert not (served & before), served & before
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer)]
    threads += [threading.Thread(target=reader, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    final = {h.id for h in index.search(queries[0], n)}
    assert not (final & set(gone))


@pytest.mark.model
def test_the_exact_tier_ranks_like_chroma_on_real_tools(
    tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    """The 62 tools of the demo catalog and the semantic queries, with the real model:
    same ids in the same order as Chroma, scores equal to float error."""
    rows = [
        json.loads(line) for line in (REPO / "sidecar/demo/catalog.jsonl").read_text().splitlines()
    ]
    records = [
        IndexRecord(r["tool_id"], f"{r['tool_id']}: {r['description']}", {"type": r["tool_type"]})
        for r in rows
    ]
    index = ActiveIndex.persistent(tmp_path / "chroma", minilm)
    index.upsert(records)
    vectors = [index.embed_query(q) for q, _ in QUERIES]
    exclude = {"web_search", "html_parser"}
    exact = [index.search_ranked(v, 10, exclude) for v in vectors]
    assert index._exact is not None and index._exact.current() is not None
    index.exact_limit = 0
    chroma = [index.search_ranked(v, 10, exclude) for v in vectors]
    for (ours, ours_displaced), (theirs, theirs_displaced) in zip(exact, chroma, strict=True):
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-5)
        mine, yours = [h.id for h in ours], [h.id for h in theirs]
        if mine != yours:  # only a tie may swap neighbours
            for a, b, ha, hb in zip(mine, yours, ours, theirs, strict=True):
                assert a == b or abs(ha.score - hb.score) < 1e-5
        assert {h.id for h in ours_displaced} == {h.id for h in theirs_displaced}
        assert [h.metadata for h in ours] == [h.metadata for h in theirs]


@pytest.mark.slow
def test_a_tier_loaded_in_pages_ranks_like_brute_force(
    tmp_path: Path, hashing: HashingEmbedder
) -> None:
    """5,000 records load in pages smaller than the collection and rank like brute force."""
    index = ActiveIndex.persistent(tmp_path / "chroma", hashing)
    index._store.max_batch = 1000  # several pages
    n = 5000
    vectors = random_vectors(n, seed=6)
    ids = [f"t{i}" for i in range(n)]
    index.upsert([IndexRecord(i, i) for i in ids], embeddings=vectors)
    recorder = CallRecorder(index._collection)
    index._collection = recorder
    for q in random_vectors(10, seed=7):
        got = [h.id for h in index.search(q, 10, documents=False)]
        assert got == [ids[i] for i in brute_force(vectors, q, 10)]
    assert recorder.sizes("get")[:5] == [1000] * 5  # the pages of the load
    assert recorder.sizes("query") == []


def test_a_snapshot_remembers_rankings_and_a_write_forgets_them() -> None:
    snap = Snapshot.build(GEO_IDS, plane_vectors(ANGLES))
    first = snap.ranked(axis(), 3, {"g1"})
    first[0].clear()  # a caller's copy: the remembered ranking is not touched
    hits, displaced = snap.ranked(axis(), 3, {"g1"})
    assert [rid for rid, _ in hits] == ["g0", "g2", "g3"]
    assert [rid for rid, _ in displaced] == ["g1"]
    assert [score for _, score in hits] == pytest.approx([1.0, 0.9397, 0.8660], abs=1e-4)
    moved = snap.upserted(["g9"], plane_vectors([1.0]))
    assert [rid for rid, _ in moved.ranked(axis(), 2, {"g1"})[0]] == ["g0", "g9"]
    assert [rid for rid, _ in snap.ranked(axis(), 2, {"g1"})[0]] == ["g0", "g2"]
    # other k or exclusions are other rankings
    assert [rid for rid, _ in snap.ranked(axis(), 2, ())[0]] == ["g0", "g1"]


class _SlowLoad(CallRecorder):
    """Holds the tier's load (the ``get`` of every embedding) until released."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.loading = threading.Event()
        self.release = threading.Event()

    def get(self, **kwargs: Any) -> Any:
        if "embeddings" in (kwargs.get("include") or []):
            self.loading.set()
            assert self.release.wait(timeout=30)
        return super().get(**kwargs)


def test_no_lookup_waits_for_another_ones_load(geo_index: ActiveIndex) -> None:
    slow = _SlowLoad(geo_index._collection)
    geo_index._collection = slow
    first: list[list[str]] = []
    loader = threading.Thread(
        target=lambda: first.append([h.id for h in geo_index.search(axis(), 2)])
    )
    loader.start()
    assert slow.loading.wait(timeout=30)
    # the load is in flight: this lookup is ranked by Chroma meanwhile
    assert [h.id for h in geo_index.search(axis(), 2)] == ["g0", "g1"]
    assert slow.sizes("query") == [2]
    slow.release.set()
    loader.join(timeout=30)
    assert first == [["g0", "g1"]]
    assert geo_index._exact is not None and geo_index._exact.current() is not None


# ---- a store that lost a vector -----------------------------------------------------


class LostVector(CallRecorder):
    """Chroma as a write cut short by a full disk leaves it: ``lost`` is listed, with its
    document, but any ``get`` that asks for its vector fails (as the real one does)."""

    def __init__(self, inner: Any, lost: str) -> None:
        super().__init__(inner)
        self.lost = lost

    def get(self, **kwargs: Any) -> Any:
        from chromadb.errors import InternalError

        self._record("get", kwargs)
        got = self._inner.get(**kwargs)
        if "embeddings" in (kwargs.get("include") or ()) and self.lost in got["ids"]:
            raise InternalError("Error executing plan: Internal error: Error finding id")
        return got


def test_unreadable_finds_the_records_whose_vectors_are_lost(tmp_path: Path) -> None:
    index = ActiveIndex.persistent(tmp_path / "chroma", HashingEmbedder())
    index.upsert([IndexRecord(f"t{i:02d}", f"tool {i}", {}) for i in range(40)])
    index._collection = LostVector(index._collection, "t17")
    assert index.unreadable(f"t{i:02d}" for i in range(40)) == {"t17"}
    assert index.unreadable(["t01", "t02"]) == set()


def test_a_failed_tier_load_falls_back_to_chroma_until_a_write(tmp_path: Path) -> None:
    index = ActiveIndex.persistent(tmp_path / "chroma", HashingEmbedder())
    index.upsert([IndexRecord(f"t{i:02d}", f"tool number {i}", {}) for i in range(40)])
    recorder = LostVector(index._collection, "t17")
    index._collection = recorder
    first = index.search("tool number 3", k=5)
    assert len(first) == 5 and recorder.sizes("query")  # Chroma ranked it
    loads = len([n for op, n in recorder.calls if op == "get"])
    index.search("tool number 4", k=5)
    assert len([n for op, n in recorder.calls if op == "get"]) == loads  # no retry
    recorder.lost = "nothing"
    index.upsert([IndexRecord("t40", "tool number 40", {})])
    index.search("tool number 40", k=5)  # a write: the tier loads again
    queries = len(recorder.sizes("query"))
    assert index.search("tool number 40", k=1)[0].id == "t40"
    assert len(recorder.sizes("query")) == queries  # ranked in the process


def test_a_scored_search_reports_the_spread_of_every_similarity(geo_index: ActiveIndex) -> None:
    query = plane_vectors([35.0])[0]
    hits, displaced, spread = geo_index.search_scored(query, 3, exclude={GEO_IDS[0]})
    plain = geo_index.search_ranked(query, 3, exclude={GEO_IDS[0]}, ids_only=True)
    assert (hits, displaced) == plain
    every = geo_index.similarities(query, GEO_IDS)
    assert spread == pytest.approx(float(np.std(list(every.values()))), abs=1e-6)
    geo_index.exact_limit = 0  # Chroma ranks: it sees only the nearest records
    assert geo_index.search_scored(query, 3)[2] is None
