"""The usage index: what it raises and lowers, its caps and bounds, forgetting a source,
order, and rows that rebuild it (pure numpy; the real model where meaning matters)."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexes import Evidence, MiniLMEmbedder, UsageIndex, request_vector
from indexes.usage import MARGIN, SOURCE_CAP, TOTAL_CAP, TRUSTED_CAP, unit

DIM = 8
SPREAD = 0.08


def vec(*values: float) -> np.ndarray:
    row = np.zeros(DIM, dtype=np.float32)
    row[: len(values)] = values
    return unit(row)


def scores(usage: UsageIndex, query: np.ndarray, dense: float = 0.0) -> dict[str, float]:
    tools = usage.tools()
    return {t: b.score for t, b in usage.boosts(query, dict.fromkeys(tools, dense), SPREAD).items()}


# ---- what it raises and lowers ---------------------------------------------------------
def test_a_tool_is_raised_near_the_requests_it_served_and_not_elsewhere() -> None:
    usage = UsageIndex(DIM)
    usage.add(Evidence("weather", "agent", "s1", vec(1, 0.1), True))
    usage.add(Evidence("weather", "agent", "s2", vec(1, -0.1), True))
    near = usage.boosts(vec(1), {"weather": 0.2}, SPREAD)
    assert near["weather"].score > 0 and near["weather"].sessions == 2
    # a request far from both: its own text matches it better than they do
    assert usage.boosts(vec(0, 1), {"weather": 0.2}, SPREAD) == {}
    # a request its own text already matches as well: nothing to add
    assert usage.boosts(vec(1), {"weather": 1.0 - MARGIN}, SPREAD) == {}
    # a lookup that names its candidates hears of those alone
    assert usage.boosts(vec(1), {"weather": 0.2}, SPREAD, candidates=["radar"]) == {}
    assert usage.boosts(vec(1), {"weather": 0.2}, SPREAD, candidates=["weather"]) == near


def test_abandoned_sessions_lower_a_tool_for_their_requests() -> None:
    usage = UsageIndex(DIM)
    usage.add(Evidence("parser", "agent", "s1", vec(1, 0.2), True))
    usage.add(Evidence("parser", "agent", "s2", vec(1), False))
    # on the request it was abandoned on, the abandoned one is the nearer: no raise
    assert usage.boosts(vec(1), {"parser": 0.2}, SPREAD)["parser"].score < 0
    # nearer the completed one than the abandoned one, it is raised
    assert usage.boosts(vec(1, 0.4), {"parser": 0.2}, SPREAD)["parser"].score > 0


vectors = st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=DIM, max_size=DIM).filter(
    lambda v: float(np.linalg.norm(v)) > 0.1
)
evidence_lists = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),  # tool
        st.sampled_from(["s1", "s2", "s3", "gateway"]),  # source
        vectors,
        st.booleans(),  # completed
    ),
    max_size=40,
)


def build(items: Sequence[tuple[str, str, list[float], bool]], **options: object) -> UsageIndex:
    usage = UsageIndex(DIM, trusted={"gateway"}, **options)  # type: ignore[arg-type]
    for n, (tool, source, values, completed) in enumerate(items):
        usage.add(Evidence(tool, source, f"k{n}", np.array(values, dtype=np.float32), completed))
    return usage


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(evidence_lists, vectors)
def test_a_tool_only_abandoned_sessions_taught_is_never_raised(
    items: list[tuple[str, str, list[float], bool]], query: list[float]
) -> None:
    abandoned_only = [(t, s, v, False) for t, s, v, _ in items]
    usage = build(abandoned_only, preselect=3)
    found = scores(usage, np.array(query, dtype=np.float32), dense=-1.0)
    assert all(score <= 0 for score in found.values())


# Vectors whose entries are -1, 0 or 1: once made unit, every entry that is not zero has
# the peak magnitude, so the int8 codes the index keeps hold them exactly.  A property
# about which kept request is the nearest holds exactly only then: two requests closer
# than the codes' resolution may trade places (test_codes_keep_similarities_near).
exact_vectors = st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=DIM, max_size=DIM).filter(any)
exact_lists = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["s1", "s2", "s3", "gateway"]),
        exact_vectors,
        st.booleans(),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(exact_lists, st.sampled_from(["a", "b", "c"]), st.sampled_from(["s1", "gateway"]))
def test_a_request_a_source_abandoned_a_tool_on_never_raises_it_by_that_source(
    items: list[tuple[str, str, list[float], bool]], tool: str, source: str
) -> None:
    """The request itself, asked again: the source's abandoned session is as near as any
    of its completed ones can be, so its part is at most zero."""
    mine = [(t, s, v, c) for t, s, v, c in items if s == source]
    mine = mine or [(tool, source, [1.0] * DIM, True)]
    query = np.array(mine[0][2], dtype=np.float32)
    usage = build([*mine, (tool, source, mine[0][2], False)], preselect=3)
    assert scores(usage, query, dense=-1.0).get(tool, 0.0) <= 0


@settings(max_examples=300, deadline=None)
@given(vectors, vectors)
def test_codes_keep_similarities_near(stored: list[float], query: list[float]) -> None:
    """A kept request's similarity, read back from its int8 codes, is within the codes'
    resolution of the float one: each entry is off by at most half a step (the row's
    peak / 254), so the similarity by at most the query's L1 norm times that."""
    from indexes.usage_sample import encode

    row, asked = unit(np.array(stored, dtype=np.float32)), unit(np.array(query, dtype=np.float32))
    codes, scale = encode(row)
    read = float(codes.astype(np.float32) @ asked) * float(scale)
    bound = float(np.abs(asked).sum()) * float(np.abs(row).max()) / 254 + 1e-6
    assert abs(read - float(row @ asked)) <= bound


# ---- caps -----------------------------------------------------------------------------
@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(evidence_lists, st.integers(1, 60), vectors, st.floats(-0.5, 0.9))
def test_one_source_moves_a_tool_by_at_most_its_cap(
    items: list[tuple[str, str, list[float], bool]],
    flood: int,
    query: list[float],
    dense: float,
) -> None:
    """However much one untrusted source reports (here ``flood`` sessions of the very
    request asked), every tool's score moves by at most its cap."""
    q = np.array(query, dtype=np.float32)
    before = scores(build(items, preselect=3), q, dense)
    attack = [("a", "s9", query, True)] * flood
    after = scores(build([*items, *attack], preselect=3), q, dense)
    for tool in {*before, *after}:
        assert abs(after.get(tool, 0.0) - before.get(tool, 0.0)) <= SOURCE_CAP + 1e-9


def test_untrusted_sources_together_move_a_tool_no_more_than_one_of_them() -> None:
    """Four agent tokens acting together raise (or sink) a tool by one token's cap; a
    trusted source adds its own on top."""
    for completed, sign in ((True, 1.0), (False, -1.0)):
        usage = UsageIndex(DIM, trusted={"ops"})
        for n in range(4):
            usage.add(Evidence("weather", f"agent{n}", f"s{n}", vec(1), completed))
        assert usage.boosts(vec(1), {"weather": -1.0}, SPREAD)["weather"].score == sign * SOURCE_CAP
        usage.add(Evidence("weather", "ops", "s9", vec(1), completed))
        got = usage.boosts(vec(1), {"weather": -1.0}, SPREAD)["weather"].score
        assert got == sign * min(SOURCE_CAP + TRUSTED_CAP, TOTAL_CAP)


def test_a_trusted_source_has_the_larger_cap() -> None:
    cases = (("agent", SOURCE_CAP), ("gateway", TRUSTED_CAP), ("gateway:bot", TRUSTED_CAP))
    for source, cap in (*cases, ("gatewayx", SOURCE_CAP), ("otlp:bot", SOURCE_CAP)):
        # a name ending in ":" trusts every source under it, as the memory does
        usage = UsageIndex(DIM, trusted={"gateway", "gateway:"})
        usage.add(Evidence("t", source, "s", vec(1), True))
        assert usage.boosts(vec(1), {"t": -1.0}, SPREAD)["t"].score == cap


# ---- bounds, forgetting, order, rows --------------------------------------------------
def test_memory_is_bounded_per_tool_outcome_and_pool_and_prunes_exactly() -> None:
    rng = np.random.default_rng(3)
    usage = UsageIndex(DIM, memory=4)
    evidence = [
        Evidence("t", src, f"k{i}", rng.standard_normal(DIM).astype(np.float32), i % 3 > 0)
        for i, src in enumerate(["a", "b"] * 20)
    ]
    dropped: set[tuple[str, str]] = set()
    for e in evidence:
        added = usage.add(e)
        if not added.kept:
            dropped.add((e.outcome, e.key))
        dropped |= {(e.outcome, k) for k in added.evicted}
    # two untrusted sources share one sample per outcome
    assert usage.stats()["requests"] == 4 * 2
    kept = [e for e in evidence if (e.outcome, e.key) not in dropped]
    assert len(kept) == 8
    # the rows of the kept requests alone rebuild the same index
    assert_same(usage, UsageIndex.from_rows([e.row() for e in kept], DIM, memory=4))


@pytest.mark.parametrize("trusted", [False, True])
def test_memory_does_not_grow_with_the_number_of_sources(trusted: bool) -> None:
    """The same requests of one tool from one source or from sixteen: the index keeps
    the same ``memory`` vectors (and measured, about the same bytes); a source adds a
    count to a kept request, never a vector.  (A sample per source kept sixteen times
    as many.)"""
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((16 * 8, DIM)).astype(np.float32)

    def held(sources: int) -> tuple[dict[str, int], int]:
        names = [f"gateway:{n}" if trusted else f"agent{n}" for n in range(sources)]
        tracemalloc.start()
        usage = UsageIndex(DIM, trusted={"gateway:"}, memory=8)
        for i, v in enumerate(vectors):
            usage.add(Evidence("t", names[i % sources], f"k{i}", v, True))
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return usage.stats(), size

    (one, one_bytes), (many, many_bytes) = held(1), held(16)
    assert one["requests"] == many["requests"] == 8
    assert one["vector_bytes"] == many["vector_bytes"]
    assert many["sources"] <= 8 and many_bytes < 2 * one_bytes


def test_an_untrusted_source_never_pushes_a_trusted_one_out() -> None:
    """Untrusted floods of other requests fill the untrusted sample only: the trusted
    source's requests and part stay, and the flood moves the tool by at most twice the
    untrusted cap."""
    rng = np.random.default_rng(9)
    usage = UsageIndex(DIM, trusted={"gateway"}, memory=3)
    usage.add(Evidence("t", "gateway", "g", vec(1), True))
    usage.add(Evidence("t", "agent", "a", vec(1, 0.05), True))
    before = usage.boosts(vec(1), {"t": 0.0}, SPREAD)["t"].score
    for i in range(200):
        flood = rng.standard_normal(DIM).astype(np.float32)
        usage.add(Evidence("t", "attacker", f"x{i}", flood, i % 2 == 0))
        usage.add(Evidence("t", "attacker", f"y{i}", vec(1, 0.01 * (i + 1)), False))
    after = usage.boosts(vec(1), {"t": 0.0}, SPREAD)["t"].score
    assert usage.counted(Evidence("t", "gateway", "g", vec(1), True)) == 1
    assert after >= TRUSTED_CAP - SOURCE_CAP
    assert abs(after - before) <= 2 * SOURCE_CAP + 1e-9


def assert_same(a: UsageIndex, b: UsageIndex, queries: int = 12) -> None:
    assert a.stats() == b.stats()
    assert a._centroids.keys == b._centroids.keys
    assert np.array_equal(a._centroids.matrix, b._centroids.matrix)
    rng = np.random.default_rng(0)
    tools = a.tools()
    for _ in range(queries):
        q = rng.standard_normal((2, DIM)).astype(np.float32)
        dense = {t: float(rng.uniform(-0.2, 0.5)) for t in tools}
        assert a.boosts(q, dense, SPREAD) == b.boosts(q, dense, SPREAD)


@settings(max_examples=100, deadline=None)
@given(evidence_lists, st.sampled_from(["s1", "s2", "gateway"]))
def test_forget_removes_a_source_exactly_when_it_pushed_nothing_out(
    items: list[tuple[str, str, list[float], bool]], source: str
) -> None:
    usage = build(items, memory=64, preselect=2)
    forgotten = usage.forget(source)
    assert forgotten == sum(1 for _, s, _, _ in items if s == source)
    never = build_keyed(
        [(t, s, v, c, f"k{n}") for n, (t, s, v, c) in enumerate(items) if s != source],
        memory=64,
        preselect=2,
    )
    assert_same(usage, never)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(evidence_lists, st.sampled_from(["s1", "s2", "gateway"]))
def test_forget_drops_every_piece_of_a_source_and_its_rows_rebuild_the_rest_exactly(
    items: list[tuple[str, str, list[float], bool]], source: str
) -> None:
    """With a small memory a source's requests may have pushed others out of a shared
    sample: after a forget the index holds nothing of the source, and the rows a store
    keeps (each tool, source and outcome's own bottom-k) rebuild, without the source's,
    exactly the index that never heard of it."""
    keyed = [(t, s, v, c, f"k{n}") for n, (t, s, v, c) in enumerate(items)]
    usage = build_keyed(keyed, memory=3, preselect=2)
    usage.forget(source)
    assert all(
        usage.counted(Evidence(t, s, k, np.array(v, dtype=np.float32), c)) == 0
        for t, s, v, c, k in keyed
        if s == source
    )
    never = build_keyed([i for i in keyed if i[1] != source], memory=3, preselect=2)
    stored = [i for i in _store_rows(keyed, 3) if i[1] != source]
    assert_same(build_keyed(stored, memory=3, preselect=2), never)


def build_keyed(
    items: Sequence[tuple[str, str, list[float], bool, str]], **options: object
) -> UsageIndex:
    usage = UsageIndex(DIM, trusted={"gateway"}, **options)  # type: ignore[arg-type]
    for tool, source, values, completed, key in items:
        usage.add(Evidence(tool, source, key, np.array(values, dtype=np.float32), completed))
    return usage


def _store_rows(
    items: Sequence[tuple[str, str, list[float], bool, str]], kept: int
) -> list[tuple[str, str, list[float], bool, str]]:
    """The sessions whose requests a store keeping each (tool, source, outcome)'s
    ``kept`` smallest request keys keeps (:mod:`sidecar.storage.requests`)."""
    keys: dict[tuple[str, str, bool], set[str]] = {}
    for tool, source, values, completed, _ in items:
        e = Evidence(tool, source, "", np.array(values, dtype=np.float32), completed)
        keys.setdefault((tool, source, completed), set()).add(e.key)
    smallest = {g: set(sorted(k)[:kept]) for g, k in keys.items()}
    return [
        i
        for i in items
        if Evidence(i[0], i[1], "", np.array(i[2], dtype=np.float32), i[3]).key
        in smallest[(i[0], i[1], i[3])]
    ]


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(evidence_lists, st.randoms(use_true_random=False))
def test_the_same_evidence_in_any_order_gives_identical_scores(
    items: list[tuple[str, str, list[float], bool]], rnd: random.Random
) -> None:
    shuffled = list(enumerate(items))
    rnd.shuffle(shuffled)
    a = UsageIndex(DIM, trusted={"gateway"}, memory=3, preselect=2)
    b = UsageIndex(DIM, trusted={"gateway"}, memory=3, preselect=2)
    for n, (tool, source, values, completed) in enumerate(items):
        a.add(Evidence(tool, source, f"k{n}", np.array(values, dtype=np.float32), completed))
    for n, (tool, source, values, completed) in shuffled:
        b.add(Evidence(tool, source, f"k{n}", np.array(values, dtype=np.float32), completed))
    assert_same(a, b)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(evidence_lists, st.lists(st.integers(1, 5), min_size=20, max_size=20))
def test_a_request_added_with_its_count_ranks_as_its_sessions_added_one_by_one(
    items: list[tuple[str, str, list[float], bool]], counts: list[int]
) -> None:
    """A store keeps one row per request with the number of sessions that made it: the
    index built from the counts is the index of the sessions themselves."""
    one_by_one = UsageIndex(DIM, trusted={"gateway"}, memory=3, preselect=2)
    counted = UsageIndex(DIM, trusted={"gateway"}, memory=3, preselect=2)
    for n, (tool, source, values, completed) in enumerate(items):
        e = Evidence(tool, source, f"k{n}", np.array(values, dtype=np.float32), completed)
        for _ in range(counts[n % len(counts)]):
            one_by_one.add(e)
        counted.add(e, sessions=counts[n % len(counts)])
    assert_same(one_by_one, counted)


def test_rows_round_trip() -> None:
    e = Evidence("t", "agent", "s1", vec(0.3, 0.4), False, at=12.5)
    back = Evidence.from_row(e.row())
    assert (back.tool_id, back.source, back.session, back.completed, back.at) == (
        "t",
        "agent",
        "s1",
        False,
        12.5,
    )
    assert back.key == e.key and np.array_equal(back.vector, e.vector)
    with pytest.raises(ValueError, match="outcome"):
        Evidence.from_row((*e.row()[:5], "maybe", 0.0))
    with pytest.raises(ValueError, match="dimensions"):
        UsageIndex(DIM).add(Evidence("t", "a", "s", np.ones(DIM + 1, dtype=np.float32)))
    with pytest.raises(ValueError, match="non-zero"):
        UsageIndex(DIM).add(Evidence("t", "a", "s", np.zeros(DIM, dtype=np.float32)))


def test_a_request_stands_by_its_view_nearest_the_tool() -> None:
    views = np.stack([vec(1), vec(0, 1)])
    assert np.array_equal(request_vector(views, vec(0.1, 1)), vec(0, 1))
    assert np.array_equal(request_vector(views, None), vec(1))
    assert np.array_equal(request_vector(vec(0, 0, 1), vec(1)), vec(0, 0, 1))


# ---- meaning (the real model) ---------------------------------------------------------
SERVED = (
    "Book a table for four at an Italian restaurant tonight",
    "Reserve dinner for two at a sushi place on Friday",
    "Get me a table at a steakhouse near the office at 8pm",
)


@pytest.mark.model
def test_usage_raises_a_tool_for_a_paraphrase_of_its_requests_only(minilm: MiniLMEmbedder) -> None:
    """A tool whose description says nothing of restaurants served three table
    bookings: a paraphrase of them raises it, unrelated requests do not."""
    tool = minilm.embed(["venue_slots: Claims an open slot in a venue's calendar."])[0]
    usage = UsageIndex(minilm.dim)
    for n, text in enumerate(SERVED):
        usage.add(Evidence("venue_slots", "agent", f"s{n}", minilm.embed([text])[0], True))

    def boost(text: str) -> float:
        q = minilm.embed([text])
        found = usage.boosts(q, {"venue_slots": float(q[0] @ tool)}, SPREAD)
        return found["venue_slots"].score if "venue_slots" in found else 0.0

    assert boost("Could you reserve a restaurant table for three this evening?") > 0.5
    for unrelated in (
        "Convert 20 US dollars to euros",
        "What is the weather in Oslo tomorrow?",
        "Summarise this PDF report in five bullet points",
    ):
        assert boost(unrelated) == 0.0


def test_a_request_whose_key_ends_in_a_zero_byte_is_counted_as_one_request() -> None:
    """The sample keeps keys as 16-byte strings, which numpy reads back without their
    trailing zero bytes: a request whose key ends in one, seen again, is still the same
    request (found by the property test above: 2 requests one by one, 1 counted)."""
    from indexes.usage import request_key

    vector = next(
        v for i in range(1, 10_000) if request_key(unit(v := vec(1.0, i / 1000))).endswith("00")
    )
    one_by_one = UsageIndex(DIM, trusted={"gateway"}, memory=3, preselect=2)
    counted = UsageIndex(DIM, trusted={"gateway"}, memory=3, preselect=2)
    e = Evidence("a", "s1", "k1", vector, False)
    one_by_one.add(e)
    one_by_one.add(e)
    counted.add(e, sessions=2)
    assert one_by_one.stats()["requests"] == counted.stats()["requests"] == 1
    assert_same(one_by_one, counted)
