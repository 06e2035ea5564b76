"""Lookups learn from the agents' finished sessions (the real model, real Chroma): a
completed session's request raises the tools that served it, for requests like it and
not for others; an abandoned one never raises the tool it failed at; usage is
attributed to its source, capped per source, forgotten with it, kept in the state
(another process on the home, on SQLite or PostgreSQL, sees it on its next lookup) and
bounded per tool."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexes import MiniLMEmbedder
from indexes.usage import MEMORY
from sidecar import Sidecar, Tool
from sidecar.storage.requests import KEPT

CATALOG = [
    Tool("ledger_post", "Post a journal entry to the general ledger."),
    Tool("expense_claim", "Create a record of a cost with an amount and a category."),
    Tool("weather_current", "Current weather conditions for a city."),
    Tool("email_send", "Send an email message to a recipient."),
    Tool("currency_convert", "Convert an amount between two currencies."),
    Tool("calendar_book", "Book a meeting on the calendar."),
    Tool("file_upload", "Upload a file to storage."),
]
# the team files reimbursements as ledger entries: zero-shot, the expense tool ranks first
TRAINING = [
    "I need to get reimbursed for my taxi ride to the airport",
    "get my money back for the hotel I paid on the business trip",
    "reimburse the team dinner I paid for with my own card",
    "claim back the train tickets from the conference",
]
PARAPHRASE = "please reimburse the taxi fare from my client visit"
UNRELATED = "what is the weather like in Paris"


def session(
    i: int, text: str, tool: str = "ledger_post", failed: bool = False, **extra: Any
) -> dict[str, Any]:
    step: dict[str, Any] = {"tool": tool, "arguments": {"amount": 10 + i}}
    if failed:
        step["error"] = "HTTP 400: account code is not valid"
    else:
        step["output"] = {"ok": True}
    return {
        "steps": [step],
        "outcome": "abandoned" if failed else "completed",
        "task_input": text,
        "session_id": f"s{i}",
        **extra,
    }


def ranking(sc: Sidecar, query: str) -> list[tuple[str, int]]:
    return [(h.tool_id, h.usage) for h in sc.search(query, k=4).hits]


@pytest.fixture
def sc(tmp_path: Path, minilm: MiniLMEmbedder) -> Iterator[Sidecar]:
    with Sidecar.open(embedder=minilm, home=tmp_path / "home", report_rate=0) as sidecar:
        sidecar.add_tools(CATALOG)
        yield sidecar


def test_completed_sessions_raise_their_tool_for_requests_like_theirs(sc: Sidecar) -> None:
    before = ranking(sc, PARAPHRASE)
    assert before[0] == ("expense_claim", 0) and ("ledger_post", 0) in before
    unrelated = ranking(sc, UNRELATED)
    for i, text in enumerate(TRAINING):
        sc.report(session(i, text))
    after = ranking(sc, PARAPHRASE)
    assert after[0][0] == "ledger_post"
    assert after[0][1] >= 1  # the hit says how many sessions raised it
    assert all(usage == 0 for tool, usage in after if tool != "ledger_post")
    # a request unlike the ones it served: nothing moves
    assert ranking(sc, UNRELATED) == unrelated
    # the answer carries it
    assert sc.search(PARAPHRASE, k=1).hits[0].to_dict()["usage"] == after[0][1]


def test_a_replayed_session_counts_once(sc: Sidecar) -> None:
    for _ in range(3):
        sc.report(session(0, TRAINING[0]))
    assert sc.state.requests.count() == 1


def test_abandoned_sessions_never_raise_the_tool_they_failed_at(sc: Sidecar) -> None:
    before = ranking(sc, PARAPHRASE)
    for i, text in enumerate(TRAINING):
        sc.report(session(i, text, failed=True))
    assert sc.state.requests.count() == len(TRAINING)  # kept, as evidence against
    after = ranking(sc, PARAPHRASE)
    assert all(usage == 0 for _tool, usage in after)  # nothing raised
    ranked, zero_shot = [t for t, _ in after], [t for t, _ in before]
    # the tool stays where it was, or falls
    assert "ledger_post" not in ranked or (
        ranked.index("ledger_post") >= zero_shot.index("ledger_post")
    )
    # and they cancel a source's completed sessions for the same requests
    for i, text in enumerate(TRAINING):
        sc.report(session(10 + i, text))
    assert ranking(sc, PARAPHRASE)[0][0] == "expense_claim"


def test_sessions_without_a_request_or_an_outcome_teach_no_usage(sc: Sidecar) -> None:
    sc.report({"steps": [{"tool": "ledger_post", "output": {}}], "outcome": "completed"})
    sc.report(session(1, TRAINING[0], outcome="unknown"))
    assert sc.state.requests.count() == 0


def test_forgetting_a_source_removes_its_usage(sc: Sidecar) -> None:
    before = ranking(sc, PARAPHRASE)
    for i, text in enumerate(TRAINING):
        sc.report(session(i, text), source="finance-bot", role="agent")
    sc.report(session(99, UNRELATED, tool="weather_current"), source="other", role="agent")
    assert dict(ranking(sc, PARAPHRASE)).get("ledger_post", 0) > 0
    sc.forget("finance-bot")
    assert ranking(sc, PARAPHRASE) == before
    assert sc.state.requests.count() == 1  # the other source's stays


def test_one_untrusted_source_moves_a_tool_no_further_than_its_cap(sc: Sidecar) -> None:
    """Zero-shot, the expense tool leads by more than an untrusted source's cap (one
    spread of the dense similarity): however many sessions one agent reports, it cannot
    put its tool first; the operator's own sessions (a trusted source) can."""
    for i in range(12):
        text = TRAINING[i % len(TRAINING)] + f" (trip {i})"
        sc.report(session(i, text), source="finance-bot", role="agent")
    raised = ranking(sc, PARAPHRASE)
    assert raised[0][0] == "expense_claim" and dict(raised)["ledger_post"] > 0
    for i, text in enumerate(TRAINING):
        sc.report(session(50 + i, text))  # the local operator: trusted
    assert ranking(sc, PARAPHRASE)[0][0] == "ledger_post"


def test_usage_survives_a_restart_and_reaches_another_process(
    tmp_path: Path, minilm: MiniLMEmbedder, state_url: str | None
) -> None:
    home = tmp_path / "home"
    settings: dict[str, Any] = {"home": home, "database_url": state_url, "report_rate": 0}
    with Sidecar.open(embedder=minilm, **settings) as writer:
        writer.add_tools(CATALOG)
        with Sidecar.open(embedder=minilm, read_only=True, **settings) as reader:
            assert ranking(reader, PARAPHRASE)[0][0] == "expense_claim"
            for i, text in enumerate(TRAINING):
                writer.report(session(i, text))
            assert ranking(reader, PARAPHRASE)[0][0] == "ledger_post"  # no reopening
            writer.forget("local")
            assert ranking(reader, PARAPHRASE)[0][0] == "expense_claim"
            for i, text in enumerate(TRAINING):
                writer.report(session(20 + i, text))
    with Sidecar.open(embedder=minilm, **settings) as again:
        assert ranking(again, PARAPHRASE)[0][0] == "ledger_post"


def test_the_rows_kept_per_tool_and_source_are_bounded(sc: Sidecar) -> None:
    """The store keeps, per tool, source and outcome, the bottom-k of its request keys,
    whatever the order they arrive in: every request the index (one sample per tool,
    outcome and pool of sources) may score, and they rebuild it."""
    import numpy as np

    from indexes import Evidence, UsageIndex
    from sidecar.storage.requests import RequestRepository, RequestRow

    assert KEPT == MEMORY
    rng = np.random.default_rng(5)
    evidence = [
        Evidence("t", src, f"k{i}", rng.standard_normal(8).astype(np.float32), i % 4 > 0)
        for i, src in enumerate(["a", "b"] * 12)
    ]
    kept = {}
    for order in (evidence, evidence[::-1]):
        repo = RequestRepository(sc.state.database, memory=3)
        with sc.state.tx() as tx:
            tx.execute("DELETE FROM usage_request_counts")
            for e in order:
                repo.add(tx, [RequestRow(*e.row())])
        rows, _ = repo.since(0)
        kept[len(kept)] = sorted((r.source, r.outcome, r.key) for r in rows)
    assert kept[0] == kept[1]
    index = UsageIndex(8, memory=3)
    for e in evidence:
        index.add(e)
    # three groups (source b completed every session), three requests each; the index
    # shares one sample per outcome between the two sources, each of its requests stored
    assert len(kept[0]) == 3 * 3
    assert index.stats()["requests"] == 2 * 3
    stored = UsageIndex.from_rows([r.evidence_row() for r in rows], 8, memory=3)
    assert stored.stats() == index.stats()


def test_reports_over_http_raise_the_tool_in_http_lookups(sc: Sidecar) -> None:
    from starlette.testclient import TestClient

    from sidecar.shells.api import create_app

    token = "test-token-0123456789"
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(sc, token), base_url="http://127.0.0.1") as client:
        body = {"reports": [session(i, text) for i, text in enumerate(TRAINING)]}
        assert client.post("/v1/reports", json=body, headers=auth).status_code == 200
        found = client.post("/v1/search", json={"query": PARAPHRASE, "k": 3}, headers=auth)
    first = found.json()["hits"][0]
    assert first["tool_id"] == "ledger_post" and first["usage"] >= 1


def test_each_tool_of_a_request_with_several_parts_keeps_the_part_nearest_it(
    sc: Sidecar,
) -> None:
    import numpy as np

    from indexes import query_vectors
    from sidecar.lookup.ranking import query_views

    text = "Reimburse the taxi fare from my client visit. Then tell me the weather in Paris."
    steps = [
        {"tool": "ledger_post", "arguments": {"amount": 10}, "output": {"ok": True}},
        {"tool": "weather_current", "arguments": {"city": "Paris"}, "output": {"ok": True}},
    ]
    sc.report({"steps": steps, "outcome": "completed", "task_input": text, "session_id": "m"})
    parts = query_views(text)
    assert len(parts) == 2
    views = query_vectors(sc.index.embedder, parts)
    rows, _ = sc.state.requests.since(0)
    kept = {r.tool_id: np.frombuffer(r.vector, dtype="<f4") for r in rows}
    assert np.allclose(kept["ledger_post"], views[0], atol=1e-6)
    assert np.allclose(kept["weather_current"], views[1], atol=1e-6)


def test_an_abandoned_session_lowers_only_the_tool_it_was_abandoned_at(sc: Sidecar) -> None:
    """A session listing many failing calls (every rival of a tool) lowers the one it
    ended at, not each tool it names."""
    tools = [t.tool_id for t in CATALOG]
    steps = [{"tool": t, "arguments": {}, "error": "Error: not allowed"} for t in tools]
    sc.report({"steps": steps, "outcome": "abandoned", "task_input": TRAINING[0]})
    rows, _ = sc.state.requests.since(0)
    assert [(r.tool_id, r.outcome) for r in rows] == [(tools[-1], "abandoned")]


def test_sessions_of_one_request_are_one_row_and_a_replay_adds_nothing(tmp_path: Path) -> None:
    """500 sessions with one task text kept 500 rows: now one row counting them; the same
    batch sent again counts nothing more, and forgetting the source removes the row."""
    from indexes import HashingEmbedder

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, report_rate=0) as sc:
        sc.add_tools(CATALOG)
        batch = [session(i, TRAINING[0]) for i in range(500)]
        for _ in range(2):
            sc.report_many(batch, source="finance-bot", role="agent")
        rows, _ = sc.state.requests.since(0)
        assert [(r.tool_id, r.sessions) for r in rows] == [("ledger_post", 500)]
        sc.forget("finance-bot")
        assert sc.state.requests.count() == 0


def test_forgetting_a_source_brings_back_the_requests_it_pushed_out(sc: Sidecar) -> None:
    """Two untrusted sources share the index's sample of a tool: the flood's requests,
    every key smaller than the other source's, push that one out of the index (the
    store keeps it); forgetting the flood rebuilds the index from the rows left, with
    the other source's request back, as if the flood had never reported."""
    import numpy as np

    from indexes import Evidence, UsageIndex
    from sidecar.lookup.usage import UsageState
    from sidecar.storage.filters import SessionFilter
    from sidecar.storage.requests import RequestRow

    rng = np.random.default_rng(11)
    vectors = sorted(
        (rng.standard_normal(8).astype(np.float32) for _ in range(MEMORY + 1)),
        key=lambda v: Evidence("t", "", "", v).key,
    )
    flood = [Evidence("t", "flood", f"src:flood/{i}", v) for i, v in enumerate(vectors[:-1])]
    mine = Evidence("t", "mine", "src:mine/0", vectors[-1])
    usage = UsageState(sc.state, trusted=())
    with sc.state.tx() as tx:
        sc.state.requests.add(tx, [RequestRow(*mine.row())])
    index = usage.current(8)
    assert index is not None and index.counted(mine) == 1
    with sc.state.tx() as tx:
        sc.state.requests.add(tx, [RequestRow(*e.row()) for e in flood])
    index = usage.current(8)
    assert index is not None and index.counted(mine) == 0
    assert index.stats()["requests"] == MEMORY
    with sc.state.tx() as tx:
        sc.state.requests.forget(tx, SessionFilter("src:flood/"))
    index = usage.current(8)
    assert index is not None and index.counted(mine) == 1
    assert index.stats() == UsageIndex.from_rows([mine.row()], 8).stats()
