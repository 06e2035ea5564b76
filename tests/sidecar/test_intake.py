"""Chain reports through the decision boundary, on real Chroma and real Parquet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.model import CredentialRef
from tests.sidecar.helpers import abandoned, completed


@pytest.fixture
def sc(tmp_path: Path, state_url: str | None) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "home", database_url=state_url
    ) as sidecar:
        sidecar.add_tools(
            [
                Tool("search_api", "Search the web", "search", {"type": "object"}),
                Tool(
                    "html_parser",
                    "Parse HTML",
                    "parser",
                    credentials=(CredentialRef("vault://kv/parser", ("read",), "p"),),
                ),
                Tool("llm_extractor", "Extract fields", "extractor"),
            ]
        )
        yield sidecar


CHAIN = ["search_api", "html_parser", "llm_extractor"]


def test_transient_failures_are_not_archived(sc: Sidecar) -> None:
    result = sc.report(abandoned(CHAIN, "HTTP 429 Too Many Requests"))
    assert result.status == "not_archived"
    assert result.reason is not None and "transient" in result.reason
    assert "HTTP 429" in result.reason
    assert sc.cold.chains.count() == 0
    assert sc.check(CHAIN).safe


def test_explicit_kind_wins(sc: Sidecar) -> None:
    assert sc.report(abandoned(CHAIN, "HTTP 429", kind="deterministic")).status == "archived"
    assert sc.report(abandoned(CHAIN, "ValidationError", kind="transient")).status == "not_archived"


def test_deterministic_failure_is_archived_with_a_pointer(sc: Sidecar) -> None:
    result = sc.report(abandoned(CHAIN, "HTTP 413 Payload Too Large"))
    assert result.status == "archived"
    assert result.pointer == f"cold://chains/{result.chain_id}"
    assert not sc.check(CHAIN).safe
    assert sc.audit(result.pointer)["topology"] == CHAIN


def test_unknown_kind_is_archived_once_reproduced(sc: Sidecar) -> None:
    first = sc.report(abandoned(CHAIN, "timeout after 30s", session_id="s1"))
    assert first.status == "not_archived"
    assert first.reason is not None and "seen in 1 of the 2 sessions" in first.reason
    assert sc.check(CHAIN).safe
    second = sc.report(abandoned(CHAIN, "timeout after 30s", session_id="s2"))
    assert second.status == "archived"
    assert second.reason is not None and "reproduced in 2 sessions" in second.reason
    assert sc.audit(second.pointer or "")["occurrences"] == 2


def test_a_replay_is_one_sighting_and_sessions_count_apart(sc: Sidecar) -> None:
    report = abandoned(CHAIN, "timeout after 30s")
    assert [sc.report(report).status for _ in range(3)] == ["not_archived"] * 3
    assert sc.report({**report, "session_id": "s9"}).status == "archived"
    by_id = abandoned(["a", "b"], "timeout after 30s", session_id="same")
    assert sc.report({**by_id, "report_id": "r1"}).status == "not_archived"
    assert sc.report({**by_id, "report_id": "r1"}).status == "not_archived"  # replayed
    assert sc.report({**by_id, "report_id": "r2"}).status == "archived"


def test_reproduce_threshold_is_configurable(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, reproduce_threshold=3) as sc:
        statuses = [
            sc.report(abandoned(["a", "b"], "weird", session_id=f"s{i}")).status for i in range(3)
        ]
    assert statuses == ["not_archived", "not_archived", "archived"]


def test_replayed_report_is_idempotent(sc: Sidecar) -> None:
    first = sc.report(abandoned(CHAIN, "HTTP 404"))
    again = sc.report(abandoned(CHAIN, "HTTP 404"))
    assert again.status == "archived" and again.chain_id == first.chain_id
    assert again.reason == "already archived (replayed report)"
    assert sc.cold.chains.count() == 1
    assert len(sc.rules.matcher()) == 1
    assert len(list(sc.cold.chains.scan())) == 1


def test_a_new_session_on_an_archived_chain_is_answered_as_counted(sc: Sidecar) -> None:
    """Only the same session again is a replay; another session meeting the archived
    failure is a new sighting, and its answer says so."""
    first = sc.report(abandoned(CHAIN, "HTTP 404", session_id="s1"))
    second = sc.report(abandoned(CHAIN, "HTTP 404", session_id="s2"))
    assert second.status == "archived" and second.chain_id == first.chain_id
    assert second.reason == (
        f"already archived as {first.pointer}; this session counted: 2 sessions so far"
    )
    replay = sc.report(abandoned(CHAIN, "HTTP 404", session_id="s2"))
    assert replay.reason == "already archived (replayed report)"
    third, again = sc.report_many(
        [abandoned(CHAIN, "HTTP 404", session_id=s) for s in ("s3", "s3")]
    )
    assert third.reason is not None and third.reason.endswith("counted: 3 sessions so far")
    assert again.reason == "already archived (replayed report)"
    assert sc.cold.chains.count() == 1


def test_completed_chains_are_recorded_as_usage(sc: Sidecar) -> None:
    result = sc.report(completed(["search_api", "summarizer"]))
    assert result.status == "recorded"
    sc.report(completed(["search_api", "summarizer"]))
    assert sc.state.uses.completed_chain_count("search_api") == 1  # one distinct chain
    sc.report(completed(["search_api", "translator"]))
    assert sc.state.uses.completed_chain_count("search_api") == 2
    assert sc.state.uses.completed_chain_count("html_parser") == 0


def test_a_batch_counts_each_completed_run_once(sc: Sidecar) -> None:
    def run(session: str) -> dict[str, object]:
        return {**completed(["search_api", "summarizer"]), "session_id": session}

    results = sc.report_many([run("s1"), run("s2"), run("s1"), run("s3")])
    assert [r.reason for r in results] == [
        "completed chain recorded as usage evidence (1 run(s))",
        "completed chain recorded as usage evidence (2 run(s))",
        "completed chain already recorded (a replay; 2 run(s))",
        "completed chain recorded as usage evidence (3 run(s))",
    ]
    again = sc.report_many([run("s2"), run("s4")])
    assert [r.reason for r in again] == [
        "completed chain already recorded (a replay; 3 run(s))",
        "completed chain recorded as usage evidence (4 run(s))",
    ]


@pytest.mark.parametrize(
    ("report", "reason"),
    [
        ({"topology": ["a", "b"], "outcome": "maybe"}, "outcome must be"),
        ({"topology": "a,b", "outcome": "abandoned"}, "topology must be a list"),
        ({"topology": ["a", "b c"], "outcome": "abandoned"}, "not a valid tool name"),
        ({"topology": ["a", "b"], "outcome": "abandoned", "colour": 1}, "unknown report field"),
        (abandoned(["a", "b"], kind="sometimes"), "failure.kind"),
        (abandoned(["a", "b"], when=[{"field": "x", "op": "~", "value": 1}]), "op must be"),
        (
            abandoned(["a", "b"], when=[{"step": "z", "field": "x", "op": ">", "value": 1}]),
            "not a tool of the topology",
        ),
        (abandoned(["a", "b"], when=[{"field": "x", "op": ">", "value": "big"}]), "numeric"),
        ({"topology": [], "outcome": "completed"}, "at least one tool"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_reports_are_rejected_with_the_reason(sc: Sidecar, report: object, reason: str) -> None:
    result = sc.report(report)  # type: ignore[arg-type]
    assert result.status == "rejected"
    assert result.reason is not None and reason in result.reason


def test_the_archived_record_holds_the_evidence(sc: Sidecar) -> None:
    report = abandoned(
        CHAIN,
        "timeout after 30s on 7.2 MB payload",
        rule="IF html_parser output > 5 MB THEN llm_extractor times out",
        when=[{"step": "html_parser", "field": "payload_bytes", "op": ">", "value": 5_000_000}],
        error={"type": "Timeout", "headers": {"Authorization": "Bearer abcdefgh12345678"}},
        logs=["call with api_key=supersecretvalue1", {"password": "hunter2"}],
        session_id="s-1",
        reported_at="2026-11-30T10:00:00Z",
    )
    result = sc.report(report)
    assert result.status == "archived"
    record = sc.audit(result.pointer or "")
    assert record["topology"] == CHAIN
    assert record["tool_types"] == ["search", "parser", "extractor"]
    assert record["terminal_signature"] == "timeout after 30s on 7.2 MB payload"
    assert record["failure_kind"] == "deterministic"
    assert record["classification"].startswith("rule 6:")
    assert record["rule"].startswith("IF html_parser")
    assert record["condition"]["when"][0]["value"] == 5_000_000
    assert record["tool_snapshots"]["search_api"]["description"] == "Search the web"
    assert record["tool_snapshots"]["search_api"]["input_schema"] == {"type": "object"}
    assert record["credentials"]["html_parser"][0]["ref"] == "vault://kv/parser"
    assert record["session_id"] == "s-1"
    assert record["reported_at"] == "2026-11-30T10:00:00Z"
    assert record["archived_at"].endswith("Z")
    text = json.dumps(record.to_dict())
    for secret in ("abcdefgh12345678", "supersecretvalue1", "hunter2"):
        assert secret not in text
    for path in sc.settings.home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"supersecretvalue1" not in data and b"hunter2" not in data


def test_unregistered_tools_are_archived_without_snapshot(sc: Sidecar) -> None:
    result = sc.report(abandoned(["ghost_a", "ghost_b"], "HTTP 400"))
    record = sc.audit(result.pointer or "")
    assert record["tool_snapshots"] == {"ghost_a": None, "ghost_b": None}
    assert record["tool_types"] == ["unknown", "unknown"]


def test_crash_between_cold_append_and_constraint_is_repaired(tmp_path: Path) -> None:
    home = tmp_path / "h"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        result = sc.report(abandoned(["a", "b"], "HTTP 400"))
        # the cold append happened; lose the compiled constraint as a crash would
        sc.state.database.execute("DELETE FROM constraints")
        sc.state.database.execute("UPDATE meta SET value = value + 1 WHERE key='constraints_rev'")
        assert sc.check(["a", "b"]).safe
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        collisions = sc.check(["a", "b"]).collisions
        assert [c.chain_id for c in collisions] == [result.chain_id]


def test_constraints_reach_other_processes_views(tmp_path: Path) -> None:
    """A second Sidecar on the same home sees a chain archived by the first, without
    reopening (the compiled matcher follows the state revision)."""
    home = tmp_path / "h"
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=home) as writer,
        Sidecar.open(embedder=HashingEmbedder(), home=home, read_only=True) as reader,
    ):
        assert reader.check(["a", "b"]).safe
        writer.report(abandoned(["a", "b"], "HTTP 400"))
        assert not reader.check(["a", "b"]).safe


def test_audit_errors(sc: Sidecar) -> None:
    from sidecar import InvalidInput, NotFound

    with pytest.raises(NotFound):
        sc.audit("cold://chains/0000")
    with pytest.raises(InvalidInput, match="bad cold storage pointer"):
        sc.audit("s3://bucket/x")


def test_a_second_sidecar_on_the_home_serves_the_first_ones_tool_updates(tmp_path: Path) -> None:
    """Lookup keeps hit fields in-process; a write by the owner of the home (the
    hot-index revision in the state) makes a reader read them again."""
    from sidecar import Tool

    home = tmp_path / "h"
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=home) as writer,
        Sidecar.open(embedder=HashingEmbedder(), home=home, read_only=True) as reader,
    ):
        writer.add_tools([Tool("fetch", "fetch a page", tool_type="http")])
        [hit] = reader.search("fetch a page", k=1).hits
        assert (hit.description, hit.tool_type) == ("fetch a page", "http")
        writer.add_tools([Tool("fetch", "fetch a page", tool_type="browser")])
        [hit] = reader.search("fetch a page", k=1).hits
        assert hit.tool_type == "browser"


def test_status_finds_damaged_cold_files_before_a_read_does(sc: Sidecar) -> None:
    sc.report(abandoned(CHAIN, "HTTP 404"))
    sc.report(abandoned(["a", "b"], "HTTP 400"))
    files = sorted((sc.settings.cold_path / "chains").rglob("*.parquet"))
    assert len(files) == 2 and sc.status(verify=True).damaged == ()
    data = bytearray(files[0].read_bytes())
    data[8] ^= 0xFF  # same size, other bytes, in the first page: the footer reads fine
    files[0].write_bytes(bytes(data))
    assert sc.status().damaged == ()  # sizes alone cannot see it
    (found,) = sc.status(verify=True).damaged
    assert found.file.endswith(files[0].name) and "checksum" in found.reason
    grown = files[1].read_bytes()
    files[1].write_bytes(grown[:8] + b"junk" + grown[8:])  # the footer still reads
    reasons = sorted(d.reason for d in sc.status().damaged)
    assert len(reasons) == 1 and "were published" in reasons[0]
    health = sc.health()
    assert not health.ready and "not as published" in health.checks["cold_store"]


def test_a_batch_is_learned_and_counted_in_one_transaction(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the memory learns and what a batch counts commit together, in one turn at
    the state's ``learned`` lock: a batch whose counting fails teaches the memory
    nothing."""
    from sidecar.errors import SidecarError
    from tests.support.shop import good_session

    turns: list[str | None] = []
    opened = sc.state.tx

    def tx(concern: str | None = None) -> object:
        turns.append(concern)
        return opened(concern)  # type: ignore[arg-type]

    monkeypatch.setattr(sc.state, "tx", tx)
    sc.report(good_session(1))
    assert turns == ["learned"]
    assert sc.rules.conditions.memory().summary()["sessions"] == 1

    def fail(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the counters could not be written")

    monkeypatch.setattr(sc.state.uses, "record_successes", fail)
    with pytest.raises((RuntimeError, SidecarError)):
        sc.report(good_session(2))
    monkeypatch.undo()
    assert sc.rules.conditions.memory().summary()["sessions"] == 1
    sc.report(good_session(2))  # sent again once the state takes it: learned once
    assert sc.rules.conditions.memory().summary()["sessions"] == 2


def test_a_report_locks_what_it_learns_and_the_publisher_what_it_publishes(
    sc: Sidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archived session's report takes the ``learned`` lock (it folds into the
    memory and the rules), the publisher's removal of the records it published the
    ``archive`` lock; neither takes every lock of the state."""
    from tests.support.shop import failing_session

    turns: list[str | None] = []
    opened = sc.state.tx

    def tx(concern: str | None = None) -> object:
        turns.append(concern)
        return opened(concern)  # type: ignore[arg-type]

    monkeypatch.setattr(sc.state, "tx", tx)
    result = sc.report(failing_session(1))
    assert result.status == "archived"
    assert turns == ["learned", "archive"]


def test_a_record_archived_by_the_batch_that_teaches_a_condition_carries_it(
    tmp_path: Path,
) -> None:
    """The cold record of a failing call holds the conditions known for its failure when
    it was archived: those its own batch taught included (they were learned in the same
    transaction, before the record was built)."""
    from indexes import HashingEmbedder
    from sidecar import Sidecar
    from tests.support.shop import failing_session, good_session

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        batch = [good_session(n) for n in range(20)] + [failing_session(n) for n in range(3)]
        results = sc.report_many(batch)
        pointers = [r.pointer for r in results[20:] if r.pointer]
        assert pointers
        record = sc.audit(pointers[-1])
        carried = {c["predicate"]["feature"] for c in record["conditions"]}
        assert "obj:order_id.status" in carried, record["conditions"]
