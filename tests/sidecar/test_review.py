"""What waits for a person, through the library and over HTTP alike: a call held for
approval is approved for exactly its arguments and its source, once or for a time, or
denied; an appeal is filed and closed; each records who asked and who decided."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import RemoteSidecar, Sidecar
from sidecar.errors import Forbidden, InvalidInput, NotFound
from sidecar.interface import SidecarAPI
from tests.serving import serving
from tests.support.tokens import OPERATOR, TOKENS, tokens_file

TOKEN = "review-contract-token-0123456789"
ORDER = {"order_id": "#W1", "amount": 12}


@pytest.fixture(params=["library", "http"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SidecarAPI]:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        if request.param == "library":
            yield sc
            return
        with serving(sc, TOKEN) as url, RemoteSidecar(url, TOKEN) as remote:
            yield remote


def test_a_held_call_is_approved_once_for_exactly_its_arguments(api: SidecarAPI) -> None:
    held = api.request_approval("refund", ORDER, source="alice", why="destructive tool")
    assert (held.status, held.tool, held.arguments, held.source) == (
        "pending", "refund", ORDER, "alice",
    )  # fmt: skip
    again = api.request_approval("refund", ORDER, source="alice")
    assert again.approval_id == held.approval_id and again.status == "pending"
    other = api.request_approval("refund", {**ORDER, "amount": 13}, source="alice")
    assert other.approval_id != held.approval_id  # other arguments: another approval
    elsewhere = api.request_approval("refund", ORDER, source="bob")
    assert elsewhere.approval_id != held.approval_id  # another agent's call
    [pending] = [a for a in api.approvals("pending") if a.approval_id == held.approval_id]
    assert pending.why == "destructive tool"

    approved = api.approve(held.approval_id)
    assert approved.status == "approved" and approved.decided_by == "local"
    assert approved.until is None
    ran = api.request_approval("refund", ORDER, source="alice")
    assert ran.status == "approved" and ran.approval_id == held.approval_id
    # used up by that call: the next one is held anew
    next_one = api.request_approval("refund", ORDER, source="alice")
    assert next_one.status == "pending" and next_one.approval_id != held.approval_id
    assert [a.status for a in api.approvals() if a.approval_id == held.approval_id] == ["used"]
    with pytest.raises(InvalidInput, match="not pending"):
        api.approve(held.approval_id)


def test_an_approval_for_a_time_and_a_denial(api: SidecarAPI) -> None:
    held = api.request_approval("refund", ORDER, source="alice")
    assert api.approve(held.approval_id, 3600).until is not None
    for _ in range(3):  # as often as it is made, within the time
        assert api.request_approval("refund", ORDER, source="alice").status == "approved"
    denied = api.deny(api.request_approval("close_account", {}, source="alice").approval_id)
    assert denied.status == "denied"
    assert api.request_approval("close_account", {}, source="alice").status == "denied"
    with pytest.raises(InvalidInput, match="for_s"):
        api.approve(api.request_approval("x", {}, source="a").approval_id, 0)
    with pytest.raises(NotFound):
        api.deny("no-such-approval")


def test_an_appeal_is_filed_listed_and_closed(api: SidecarAPI) -> None:
    filed = api.appeal(
        "exchange", {"order_id": "#W9"}, "the order was delivered", ["c1"], source="alice"
    )
    assert (filed.status, filed.tool, filed.constraint_ids) == ("open", "exchange", ("c1",))
    assert [a.appeal_id for a in api.appeals("open")] == [filed.appeal_id]
    closed = api.close_appeal(filed.appeal_id, granted=False)
    assert closed.status == "upheld" and closed.decided_by == "local"
    assert api.appeals("open") == []
    with pytest.raises(InvalidInput, match="not open"):
        api.close_appeal(filed.appeal_id, granted=True)
    with pytest.raises(InvalidInput, match="reason"):
        api.appeal("exchange", {}, "  ")


def test_secrets_in_held_arguments_are_not_shown(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        held = sc.request_approval("pay", {"card": "4111", "api_key": "sk-live-abcdef0123456789"})
        assert held.arguments["api_key"] != "sk-live-abcdef0123456789"
        # the approval is still bound to the real arguments
        sc.approve(held.approval_id)
        ok = sc.request_approval("pay", {"card": "4111", "api_key": "sk-live-abcdef0123456789"})
        assert ok.status == "approved"


def test_over_http_an_agent_asks_for_itself_and_only_an_operator_decides(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc, serving(sc, OPERATOR) as url:
        with RemoteSidecar(url, TOKENS["alice"]) as alice:
            held = alice.request_approval("refund", ORDER)
            assert held.source == "alice"
            with pytest.raises(Forbidden):
                alice.request_approval("refund", ORDER, source="bob")
            with pytest.raises(Forbidden):
                alice.approve(held.approval_id)
            with pytest.raises(Forbidden):
                alice.approvals()
            appeal = alice.appeal("exchange", {}, "delivered")
            assert appeal.source == "alice"
        with RemoteSidecar(url, OPERATOR) as ops:
            approved = ops.approve(held.approval_id)
            assert approved.status == "approved"
            assert ops.close_appeal(appeal.appeal_id, True).status == "granted"


def test_one_source_may_keep_only_so_many_calls_waiting_and_appeals_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sidecar.errors import RateLimited
    from sidecar.review import appeals, approvals

    monkeypatch.setattr(approvals, "MAX_PENDING", 3)
    monkeypatch.setattr(appeals, "MAX_OPEN", 2)
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        held = [sc.request_approval("refund", {"n": n}, source="alice") for n in range(3)]
        with pytest.raises(RateLimited, match="waiting for approval"):
            sc.request_approval("refund", {"n": 3}, source="alice")
        assert sc.request_approval("refund", {"n": 0}, source="alice") == held[0]  # asked again
        sc.request_approval("refund", {"n": 3}, source="bob")  # another source's own room
        sc.deny(held[0].approval_id)
        sc.request_approval("refund", {"n": 3}, source="alice")  # a decision made room
        for n in range(2):
            sc.appeal("exchange", {"n": n}, "delivered", source="alice")
        with pytest.raises(RateLimited, match="appeals open"):
            sc.appeal("exchange", {"n": 2}, "delivered", source="alice")


def test_the_reason_a_call_is_held_is_redacted(tmp_path: Path) -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        held = sc.request_approval("push", {}, why=f"the memory warns (token {secret})")
        assert secret not in held.why and secret not in sc.approvals()[0].why
