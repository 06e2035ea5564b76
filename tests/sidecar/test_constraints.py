"""The compiled matcher against brute-force oracles and hand-built cases."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.model import ArchivedConstraint, Condition
from sidecar.rules.matcher import ConstraintMatcher, evaluate
from tests.sidecar.helpers import constraint
from tests.sidecar.seed_oracle import OracleChain, oracle_prefix_check

TOOLS = ["a", "b", "c", "d", "e"]
tool = st.sampled_from(TOOLS)
sequence = st.lists(tool, min_size=2, max_size=4)
plan = st.lists(tool, min_size=0, max_size=8)


def is_subsequence(needle: Sequence[str], hay: Sequence[str]) -> bool:
    it = iter(hay)
    return all(any(x == y for y in it) for x in needle)


def contains_run(needle: Sequence[str], hay: Sequence[str]) -> bool:
    n = len(needle)
    return any(tuple(hay[i : i + n]) == tuple(needle) for i in range(len(hay) - n + 1))


def brute_matches(cs: Sequence[ArchivedConstraint], p: Sequence[str]) -> set[str]:
    return {
        c.chain_id
        for c in cs
        if (is_subsequence(c.sequence, p) if c.gapped else contains_run(c.sequence, p))
    }


def brute_next(cs: Sequence[ArchivedConstraint], after: Sequence[str]) -> set[tuple[str, str]]:
    out = set()
    for c in cs:
        if c.gapped:
            ok = is_subsequence(c.prefix, after)
        else:
            ok = (
                len(after) >= len(c.prefix)
                and tuple(after[len(after) - len(c.prefix) :]) == c.prefix
            )
        if ok:
            out.add((c.terminal, c.chain_id))
    return out


@st.composite
def archives(draw: st.DrawFn) -> list[ArchivedConstraint]:
    seqs = draw(st.lists(st.tuples(sequence, st.booleans()), min_size=0, max_size=12))
    return [constraint(s, i, gapped=g) for i, (s, g) in enumerate(seqs)]


@settings(max_examples=300, deadline=None)
@given(archives(), plan)
def test_sequence_check_equals_brute_force(cs: list[ArchivedConstraint], p: list[str]) -> None:
    result = ConstraintMatcher(cs).check(p)
    assert {c.chain_id for c in result.collisions} == brute_matches(cs, p)
    assert result.safe == (not brute_matches(cs, p))


@settings(max_examples=300, deadline=None)
@given(archives(), plan)
def test_next_steps_equal_brute_force(cs: list[ArchivedConstraint], after: list[str]) -> None:
    blocked, conditional = ConstraintMatcher(cs).next_steps(after)
    got = {(t, c.chain_id) for t, items in blocked.items() for c, _ in items}
    assert got == brute_next(cs, after)
    assert conditional == {}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(sequence, st.text(min_size=1, max_size=5)), min_size=0, max_size=10),
    plan,
)
def test_prefix_mode_is_the_seed_check(chains: list[tuple[list[str], str]], p: list[str]) -> None:
    cs = [constraint(s, i, rule=f"r{i}", signature=sig) for i, (s, sig) in enumerate(chains)]
    oracle = [OracleChain(tuple(s), sig, f"r{i}") for i, (s, sig) in enumerate(chains)]
    assert ConstraintMatcher(cs).seed_verdict(p) == oracle_prefix_check(oracle, p)


def test_prefix_mode_message_shape() -> None:
    m = ConstraintMatcher(
        [constraint(["search_api", "html_parser", "llm_extractor"], rule="R", signature="T/O")]
    )
    safe, reason = m.seed_verdict(["search_api", "html_parser", "other"])
    assert not safe
    assert reason == (
        "PREFIX_COLLISION: Sequence ('search_api', 'html_parser') matches the prefix of an "
        "abandoned chain. Rule: R. Expected failure: T/O"
    )
    # the seed blocks on the prefix alone, even without the terminal tool
    assert m.check(["search_api", "html_parser"], mode="prefix").safe is False
    # ...but not a plan that merely contains the prefix later (the seed looks at the start)
    assert m.check(["x", "search_api", "html_parser"], mode="prefix").safe is True


def test_prefix_mode_picks_the_earliest_archived_chain() -> None:
    late = constraint(["a", "b"], order=5, rule="late")
    early = constraint(["a", "b", "c", "d"], order=1, rule="early")
    safe, reason = ConstraintMatcher([late, early]).seed_verdict(["a", "b", "c", "z"])
    assert not safe and reason is not None and "Rule: early." in reason


def test_contiguous_match_anywhere_in_plan() -> None:
    m = ConstraintMatcher([constraint(["b", "c", "d"])])
    assert not m.check(["x", "a", "b", "c", "d", "y"]).safe
    assert m.check(["b", "c", "x", "d"]).safe
    hit = m.check(["x", "b", "c", "d"]).collisions[0]
    assert hit.matched == ("b", "c", "d")
    assert hit.pointer == "cold://chains/c0"


def test_gapped_rule_matches_subsequence() -> None:
    m = ConstraintMatcher([constraint(["a", "c"], gapped=True)])
    assert not m.check(["a", "b", "b", "c"]).safe
    assert m.check(["c", "a"]).safe


BIG = Condition(field="payload_bytes", op=">", value=5_000_000, step="b")


def test_condition_narrows_the_block() -> None:
    m = ConstraintMatcher([constraint(["a", "b", "c"], when=[BIG])])
    assert not m.check(["a", "b", "c"], {"payload_bytes": 7_000_000}).safe
    assert m.check(["a", "b", "c"], {"payload_bytes": 10}).safe
    # a step-scoped key wins over the global one
    assert not m.check(["a", "b", "c"], {"b.payload_bytes": 9e6, "payload_bytes": 1}).safe


def test_missing_field_fails_closed_unless_allowed() -> None:
    cs = [constraint(["a", "b"], when=[BIG])]
    blocked = ConstraintMatcher(cs).check(["a", "b"], {})
    assert not blocked.safe
    assert "failing closed" in blocked.collisions[0].reason
    assert ConstraintMatcher(cs, missing_field="allow").check(["a", "b"], {}).safe


def test_incomparable_value_fails_closed() -> None:
    applies, why = evaluate([BIG], {"payload_bytes": "huge"})
    assert applies and "cannot compare" in why


def test_all_conditions_must_hold() -> None:
    when = [BIG, Condition(field="mime", op="==", value="text/html")]
    assert evaluate(when, {"payload_bytes": 6e6, "mime": "text/html"})[0]
    assert not evaluate(when, {"payload_bytes": 6e6, "mime": "application/pdf"})[0]
    assert evaluate([], {})[0]


def test_next_steps_split_blocked_from_conditional() -> None:
    m = ConstraintMatcher([constraint(["a", "b", "c"], when=[BIG])])
    blocked, conditional = m.next_steps(["x", "a", "b"], {"payload_bytes": 6e6})
    assert set(blocked) == {"c"}
    blocked, conditional = m.next_steps(["a", "b"], {"payload_bytes": 1})
    assert blocked == {} and "c" in conditional
    assert "does not hold" in conditional["c"][0].text
    assert conditional["c"][0].standing == "conditional"
    assert m.next_steps(["a"], {"payload_bytes": 6e6}) == ({}, {})


def test_warnings_mark_steps_toward_a_fatal_sequence() -> None:
    m = ConstraintMatcher([constraint(["a", "b", "c"], rule="R")])
    first = m.warnings([], "a")
    pointer = m.constraints[0].pointer
    assert first == [f"step 1 of 3 toward fatal sequence a>b>c ({pointer})"]
    assert m.warnings(["a"], "b")[0].startswith("step 2 of 3")
    assert m.warnings(["z"], "b") == []  # b alone leads nowhere
    assert m.warnings([], "c") == []  # c completes, it does not lead toward


def test_warnings_are_capped() -> None:
    cs = [constraint(["a", t], i) for i, t in enumerate("bcdefgh")]
    assert len(ConstraintMatcher(cs).warnings([], "a", limit=3)) == 3


class CountingList(list):  # type: ignore[type-arg]
    """A list that counts element reads, to prove a check touches no unrelated chain."""

    reads = 0

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        CountingList.reads += 1
        return super().__getitem__(i)

    def __iter__(self):  # type: ignore[no-untyped-def]
        CountingList.reads += len(self)
        return super().__iter__()


def test_checks_read_only_the_matching_chains() -> None:
    """No linear scan: with 20,000 unrelated chains, a check and a lookup read only the
    constraints they report."""
    cs = [constraint(["a", "b", "c"], 0)] + [
        constraint([f"u{i}", f"v{i}"], i + 1) for i in range(20_000)
    ]
    m = ConstraintMatcher(cs)
    m.constraints = CountingList(m.constraints)
    CountingList.reads = 0
    p = ["q", "a", "b", "c", "r"]
    assert len(m.check(p).collisions) == 1
    blocked, _ = m.next_steps(["a", "b"])
    assert set(blocked) == {"c"}
    assert m.seed_verdict(["a", "b", "x"])[0] is False
    assert m.warnings([], "a")
    assert CountingList.reads <= 8  # a linear scan would read 20,001


def test_a_call_seen_several_ways_gets_one_verdict_decided_as_one_check_is() -> None:
    from sidecar.model import CallCheck, CheckReason
    from sidecar.rules.verdict import merged

    warn_c1 = CheckReason("warn", "c1", "call", "e1", "seen one way")
    block_c1 = CheckReason("block", "c1", "call", "e1", "seen the other way")
    warn_c2 = CheckReason("warn", "c2", "sequence", "e2", "ev")
    one = merged([CallCheck("warn", (warn_c1, warn_c2)), CallCheck("block", (block_c1,))])
    assert one.decision == "block"
    assert one.reasons == (block_c1, warn_c2)  # each rule once, at its strictest
    assert merged([CallCheck("warn", (warn_c2,)), CallCheck("allow")]).reasons == (warn_c2,)
    assert merged([CallCheck("warn", (warn_c2,))]).decision == "warn"
    assert merged([]) == CallCheck("allow")
