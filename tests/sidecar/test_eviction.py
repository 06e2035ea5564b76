"""The eviction decision and moves on hand-built histories (real Chroma and Parquet).

Most histories here hold one abandoned chain, so they open the sidecar with
``evict_min_chains=1`` to test each rule and the moves on their own; the default
policy (two distinct chains) has its own tests at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexes import HashingEmbedder, MiniLMEmbedder
from sidecar import InvalidInput, NotFound, Sidecar, Tool
from sidecar.app.lock import LockBusy, WriterLock
from sidecar.eviction import decide
from sidecar.eviction.journal import Move
from sidecar.model import CredentialRef
from tests.sidecar.helpers import abandoned, completed, constraint


def tool(tool_id: str, *refs: str, pinned: bool = False) -> Tool:
    return Tool(
        tool_id,
        f"{tool_id.replace('_', ' ')} tool",
        input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        credentials=tuple(CredentialRef(r, ("scope",)) for r in refs),
        pinned=pinned,
    )


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(),
        home=tmp_path / "home",
        evict_min_chains=1,
        database_url=state_url,
    ) as sidecar:
        sidecar.add_tools(
            [
                tool("search_api", "env:SEARCH"),
                tool("html_parser", "env:PARSER", "env:SHARED"),
                tool("llm_extractor"),
                tool("summarizer", "env:SHARED"),
                tool("pinned_fetch", pinned=True),
            ]
        )
        yield sidecar


FATAL = ["search_api", "html_parser", "llm_extractor"]


def hot(sc: Sidecar) -> set[str]:
    return {t.tool_id for t in sc.list_tools()}


def test_prefix_only_tools_are_evicted(sc: Sidecar) -> None:
    chain = sc.report(abandoned(FATAL, "HTTP 413"))
    report = sc.evict()
    assert [d.tool_id for d in report.evicted] == ["html_parser", "search_api"]
    assert all(d.chains == (chain.chain_id,) for d in report.evicted)
    assert hot(sc) == {"llm_extractor", "summarizer", "pinned_fetch"}
    assert "search_api" not in [h.tool_id for h in sc.search("search api", k=5).hits]
    audit = sc.audit(report.pointers["search_api"])
    assert audit["tool_id"] == "search_api"
    assert audit["input_schema"] == {"type": "object", "properties": {"q": {"type": "string"}}}
    assert audit["credentials"] == [{"ref": "env:SEARCH", "scopes": ["scope"]}]
    assert audit["chain_ids"] == [chain.chain_id]
    assert audit["decision"]["reason"] == "appears only in abandoned chains"


def test_the_terminal_tool_is_not_evicted(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413"))
    sc.evict()
    assert "llm_extractor" in hot(sc)


def test_a_reused_tool_is_kept_and_its_constraint_enforced(sc: Sidecar) -> None:
    sc.report(completed(["search_api", "summarizer"]))
    chain = sc.report(abandoned(FATAL, "HTTP 413"))
    report = sc.evict()
    assert [d.tool_id for d in report.evicted] == ["html_parser"]
    kept = {d.tool_id: d for d in report.kept}
    assert kept["search_api"].reason.startswith("used: 1 completed chain(s)")
    assert kept["search_api"].chains == (chain.chain_id,)
    assert "search_api" in hot(sc)
    # the constraint is active in checks, whatever was evicted
    assert not sc.check(FATAL).safe
    assert sc.check(["search_api", "summarizer"]).safe


def test_a_kept_prefix_tool_never_gets_the_fatal_continuation(sc: Sidecar) -> None:
    sc.report(completed(["search_api", "html_parser", "summarizer"]))
    chain = sc.report(abandoned(FATAL, "HTTP 413"))
    assert sc.evict().evicted == ()
    result = sc.search("llm extractor tool", k=4, after=["search_api", "html_parser"])
    assert "llm_extractor" not in [h.tool_id for h in result.hits]
    assert [(w.tool_id, w.chain_id) for w in result.withheld] == [("llm_extractor", chain.chain_id)]


def test_a_pinned_tool_is_kept(sc: Sidecar) -> None:
    sc.report(abandoned(["pinned_fetch", "llm_extractor"], "HTTP 404"))
    report = sc.evict()
    assert report.evicted == ()
    assert [(d.tool_id, d.reason, d.pinned) for d in report.kept] == [
        ("pinned_fetch", "pinned by an operator", True)
    ]


def test_a_tool_that_became_reusable_is_not_evicted_later(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413"))
    assert {d.tool_id for d in sc.evict(dry_run=True).evicted} == {"search_api", "html_parser"}
    sc.report(completed(["html_parser", "summarizer"]))
    report = sc.evict()
    assert [d.tool_id for d in report.evicted] == ["search_api"]
    assert "html_parser" in hot(sc)


def test_the_decision_is_deterministic() -> None:
    cs = [constraint(["a", "b", "c"], 0), constraint(["b", "d"], 1), constraint(["x", "a"], 2)]
    args = ({"a", "b", "c", "d", "x"}, {"x"}, {"d": 1}, {})
    first = decide(cs, *args, min_chains=1)
    assert first == decide(list(reversed(cs)), *args, min_chains=1)
    assert [(d.tool_id, d.action, d.chains) for d in first] == [
        ("a", "evict", ("c0",)),
        ("b", "evict", ("c0", "c1")),
        ("x", "keep", ("c2",)),
    ]


def test_dry_run_changes_nothing(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413"))
    before = hot(sc)
    report = sc.evict(dry_run=True)
    # what the real run will write: env:SEARCH and env:PARSER (env:SHARED stays in use)
    assert report.dry_run and len(report.evicted) == 2 and report.mandates == 2
    assert report.reclaimed["tools"] == 2 and report.reclaimed["schema_bytes"] > 0
    assert hot(sc) == before
    assert sc.cold.tools.count() == 0
    assert sc.mandates() == []


def test_eviction_is_idempotent(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413"))
    sc.report(abandoned(FATAL, "HTTP 413"))  # a replayed report
    first = sc.evict()
    again = sc.evict()
    assert len(first.evicted) == 2 and again.evicted == ()
    assert sc.cold.tools.count() == 2
    assert len(list(sc.cold.tools.scan())) == 2
    assert len(sc.mandates()) == 2  # env:SEARCH and env:PARSER; env:SHARED still used


def test_mandates_only_for_credentials_no_active_tool_uses(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413"))
    sc.evict()
    mandates = {m.ref: m for m in sc.mandates()}
    assert set(mandates) == {"env:SEARCH", "env:PARSER"}
    assert mandates["env:PARSER"].tool_ids == ("html_parser",)
    assert mandates["env:PARSER"].status == "pending"
    assert mandates["env:PARSER"].scopes == ("scope",)
    assert len(mandates["env:PARSER"].chain_ids) == 1
    # the last user of the shared credential goes: now it gets its mandate
    sc.report(abandoned(["summarizer", "llm_extractor"], "HTTP 400"))
    sc.evict()
    assert {m.ref for m in sc.mandates()} == {"env:SEARCH", "env:PARSER", "env:SHARED"}


def test_shared_credential_of_tools_evicted_together_gets_one_mandate(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, evict_min_chains=1) as sc:
        sc.add_tools([tool("a", "env:S"), tool("b", "env:S"), tool("c")])
        sc.report(abandoned(["a", "b", "c"], "HTTP 400"))
        sc.evict()
        [mandate] = sc.mandates()
        assert mandate.ref == "env:S" and mandate.tool_ids == ("a", "b")


def test_a_dry_run_counts_the_mandates_the_run_writes(tmp_path: Path) -> None:
    """Batches of one tool: a credential two evicted tools share is released by the
    second batch only, and one a kept tool holds by none."""
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path, evict_min_chains=1, evict_batch_size=1
    ) as sc:
        sc.add_tools(
            [tool("a", "env:S", "env:A"), tool("b", "env:S"), tool("c", "env:K"),
             tool("d", "env:K"), tool("sink")]
        )  # fmt: skip
        sc.report(abandoned(["a", "b", "c", "sink"], "HTTP 400"))
        sc.report(completed(["d", "sink"]))
        dry = sc.evict(dry_run=True)
        assert sc.mandates() == []
        real = sc.evict()
        assert [d.tool_id for d in real.evicted] == ["a", "b", "c"]
        assert dry.mandates == real.mandates == len(sc.mandates()) == 2  # env:S, env:A


def test_evicted_tools_cannot_be_re_added_but_can_be_restored(sc: Sidecar) -> None:
    chain = sc.report(abandoned(FATAL, "HTTP 413"))
    pointer = sc.evict().pointers["html_parser"]
    with pytest.raises(InvalidInput, match="sidecar restore"):
        sc.add_tools([tool("html_parser")])
    result = sc.restore("html_parser", "parser fixed upstream")
    assert result.pointer == pointer and result.lifted == ()
    assert "html_parser" in hot(sc)
    assert sc.get_tools(["html_parser"])["html_parser"].credentials == (
        CredentialRef("env:PARSER", ("scope",)),
        CredentialRef("env:SHARED", ("scope",)),
    )
    # the restore sticks: the same chains no longer evict it
    assert "html_parser" not in [d.tool_id for d in sc.evict().evicted]
    # ...the constraint is still enforced unless lifted
    assert not sc.check(FATAL).safe
    trail = sc.audit(pointer)["restores"]
    assert [r["reason"] for r in trail] == ["parser fixed upstream"]
    # a new abandoned chain through it can evict it again
    sc.report(abandoned(["html_parser", "summarizer"], "HTTP 400"))
    again = sc.evict()
    assert [d.tool_id for d in again.evicted] == ["html_parser"]
    assert again.pointers["html_parser"] != pointer
    del chain


def test_restore_can_lift_the_constraints(sc: Sidecar) -> None:
    chain = sc.report(abandoned(FATAL, "HTTP 413"))
    sc.evict()
    result = sc.restore("search_api", "fixed", lift_constraints=True)
    assert result.lifted == (chain.chain_id,)
    assert sc.check(FATAL).safe
    rows = sc.constraints(include_lifted=True)
    assert [(r.chain_id, r.status) for r in rows] == [(chain.chain_id, "lifted")]
    assert sc.constraints() == []
    sc.reinstate(chain.chain_id, "regressed")
    assert not sc.check(FATAL).safe


def test_restore_errors(sc: Sidecar) -> None:
    with pytest.raises(NotFound):
        sc.restore("search_api", "never evicted")
    with pytest.raises(InvalidInput):
        sc.restore("search_api", "  ")
    with pytest.raises(NotFound):
        sc.lift("0" * 32, "x")


def test_a_second_eviction_fails_fast(sc: Sidecar) -> None:
    sc.report(abandoned(FATAL, "HTTP 413"))
    # another eviction holds the lock: evict.lock under a SQLite home, an advisory lock
    # on a PostgreSQL state
    lock = (
        WriterLock(sc.settings.home / "evict.lock")
        if sc.settings.database_url is None
        else sc.eviction.lock()
    )
    with lock, pytest.raises(LockBusy, match="pid"):
        sc.evict()
    assert sc.eviction_running() is False
    assert len(sc.evict().evicted) == 2  # the lock is free again


def test_tools_in_flight_are_never_served(sc: Sidecar) -> None:
    sc.journal.write_intents(
        [Move("m1", "summarizer", "intent", {"document": "", "metadata": {}}, ())]
    )
    assert "summarizer" not in [h.tool_id for h in sc.search("summarizer tool", k=5).hits]
    assert len(sc.search("summarizer tool", k=4).hits) == 4  # still a full page
    with pytest.raises(InvalidInput, match="eviction in progress"):
        sc.add_tools([tool("summarizer")])


def test_evict_on_report(tmp_path: Path) -> None:
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path, evict_on_report=True, evict_min_chains=1
    ) as sc:
        sc.add_tools([tool("a"), tool("b")])
        result = sc.report(abandoned(["a", "b"], "HTTP 400"))
        assert result.reason is not None and result.reason.endswith("evicted a")
        assert {t.tool_id for t in sc.list_tools()} == {"b"}
        # a batch that archives nothing runs no eviction, and says none
        again = sc.report_many([completed(["b"]), abandoned(["a", "b"], "HTTP 400")], chunk=1)
        assert [r.reason is not None and "evicted" in r.reason for r in again] == [False, False]


def test_reclaimed_tokens_use_the_model_tokenizer(tmp_path: Path, minilm: MiniLMEmbedder) -> None:
    with Sidecar.open(embedder=minilm, home=tmp_path, evict_min_chains=1) as sc:
        sc.add_tools([tool("a"), tool("b")])
        sc.report(abandoned(["a", "b"], "HTTP 400"))
        report = sc.evict()
        row = sc.audit(report.pointers["a"])
        shown = json.dumps(
            {
                "name": "a",
                "description": "a tool",
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
            }
        )
        assert row["schema_tokens"] == minilm.tokenizer_count(shown)
        assert row["schema_bytes"] == len(shown.encode())
        assert report.reclaimed == {
            "tools": 1,
            "schema_bytes": len(shown.encode()),
            "schema_tokens": minilm.tokenizer_count(shown),
            "tokenizer": "all-MiniLM-L6-v2 tokenizer",
        }


# ---- the default policy: two distinct abandoned chains ------------------------------
@pytest.fixture
def default_sc(tmp_path: Path) -> Iterator[Sidecar]:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sidecar:
        sidecar.add_tools(
            [tool("search_api"), tool("html_parser"), tool("llm_extractor"), tool("summarizer")]
        )
        yield sidecar


def test_by_default_one_abandoned_chain_keeps_the_tools_with_the_constraint(
    default_sc: Sidecar,
) -> None:
    sc = default_sc
    assert sc.settings.evict_min_chains == 2
    first = sc.report(abandoned(FATAL, "HTTP 413"))
    sc.report(abandoned(FATAL, "HTTP 413"))  # replayed: the same chain, not a second one
    report = sc.evict()
    assert report.evicted == ()
    assert [(d.tool_id, d.reason, d.chains) for d in report.kept] == [
        (t, "1 dead-end session(s) through it; eviction needs 2", (first.chain_id,))
        for t in ("html_parser", "search_api")
    ]
    assert {"search_api", "html_parser"} <= hot(sc)
    # the constraint does the work meanwhile
    assert not sc.check(FATAL).safe
    result = sc.search("llm extractor tool", k=3, after=FATAL[:2])
    assert "llm_extractor" not in [h.tool_id for h in result.hits]
    assert [w.tool_id for w in result.withheld] == ["llm_extractor"]


def test_by_default_a_second_distinct_chain_evicts(default_sc: Sidecar) -> None:
    sc = default_sc
    one = sc.report(abandoned(FATAL, "HTTP 413"))
    two = sc.report(abandoned(["search_api", "summarizer"], "HTTP 400"))
    report = sc.evict()
    evicted = {d.tool_id: d for d in report.evicted}
    assert set(evicted) == {"search_api"}
    assert evicted["search_api"].chains == tuple(sorted((one.chain_id, two.chain_id)))
    assert evicted["search_api"].reason == "appears only in abandoned chains"
    assert [d.tool_id for d in report.kept] == ["html_parser"]
    # a third chain through the parser crosses its threshold too
    sc.report(abandoned(["html_parser", "summarizer"], "HTTP 400"))
    assert [d.tool_id for d in sc.evict().evicted] == ["html_parser"]
    assert hot(sc) == {"llm_extractor", "summarizer"}


def test_min_chains_can_be_set_per_run_and_is_checked(default_sc: Sidecar) -> None:
    sc = default_sc
    sc.report(abandoned(FATAL, "HTTP 413"))
    assert {d.tool_id for d in sc.evict(dry_run=True, min_chains=1).evicted} == {
        "search_api",
        "html_parser",
    }
    assert sc.evict(dry_run=True, min_chains=3).evicted == ()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidInput, match="min_chains"):
            sc.evict(min_chains=bad)  # type: ignore[arg-type]
    assert sc.evict(min_chains=1).evicted != ()


def test_decide_counts_distinct_chains_and_rejects_a_zero_threshold() -> None:
    cs = [constraint(["a", "b", "c"], 0), constraint(["b", "d"], 1), constraint(["a", "a", "e"], 2)]
    args = ({"a", "b", "c", "d", "e"}, set(), {}, {})
    got = {d.tool_id: d.action for d in decide(cs, *args, min_chains=2)}
    assert got == {"a": "evict", "b": "evict"}
    got = {d.tool_id: d.action for d in decide(cs, *args, min_chains=3)}
    assert got == {"a": "keep", "b": "keep"}
    with pytest.raises(ValueError, match="min_chains"):
        decide(cs, *args, min_chains=0)


def test_after_a_restore_only_new_chains_count(default_sc: Sidecar) -> None:
    sc = default_sc
    sc.report(abandoned(FATAL, "HTTP 413"))
    sc.report(abandoned(["search_api", "summarizer"], "HTTP 400"))
    assert "search_api" in {d.tool_id for d in sc.evict().evicted}
    sc.restore("search_api", "quota raised upstream")
    sc.report(abandoned(["search_api", "llm_extractor"], "HTTP 422"))
    report = sc.evict()
    assert "search_api" not in {d.tool_id for d in report.evicted}
    kept = {d.tool_id: d for d in report.kept}
    assert kept["search_api"].reason == (
        "1 dead-end session(s) through it since its restore; eviction needs 2"
    )
    assert len(kept["search_api"].chains) == 3  # every chain is still listed
    sc.report(abandoned(["search_api", "html_parser", "summarizer"], "HTTP 422"))
    assert "search_api" in {d.tool_id for d in sc.evict().evicted}


def test_a_name_variant_of_an_evicted_tool_is_added_with_a_warning_and_recorded(
    sc: Sidecar,
) -> None:
    sc.report(abandoned(FATAL, "HTTP 413"))
    assert "search_api" in {d.tool_id for d in sc.evict().evicted}
    result = sc.add_tools([tool("Search-API")])
    assert result.added == ("Search-API",)
    (warning,) = result.warnings
    assert "looks like the evicted tool search_api" in warning
    record = sc.audit("cold://tools/search_api")
    assert [v["detail"] for v in record["variants_added"]] == ["Search-API"]
    with pytest.raises(InvalidInput, match="cannot be re-added"):
        sc.add_tools([tool("search_api")])  # the exact name still needs a restore
