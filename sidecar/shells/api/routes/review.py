from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query

from sidecar.errors import Forbidden
from sidecar.shells.api.deps import Caller, Lib, route
from sidecar.shells.api.models import (
    AppealIn,
    ApprovalIn,
    ApproveIn,
    CloseAppealIn,
    DecisionsIn,
)
from sidecar.trust.principals import Principal
from sidecar.wire import dump, dump_dict

router = APIRouter(tags=["review"])


def _source(who: Principal, asked: str | None) -> str:
    if asked is not None and asked != who.name and not who.operator:
        raise Forbidden(
            f"only an operator may ask for another source; {who.name!r} holds an {who.role} token"
        )
    return asked or who.name


@route(router, "request_approval")
def request_approval(body: ApprovalIn, sc: Lib, who: Caller) -> dict[str, Any]:
    held = sc.request_approval(
        body.tool, body.arguments, source=_source(who, body.source), why=body.why
    )
    return dump_dict(held)


@route(router, "approvals")
def approvals(
    sc: Lib,
    status: Literal["pending", "approved", "denied", "used", "expired"] | None = None,
    limit: int = Query(default=100, ge=1, le=1_000),
) -> dict[str, Any]:
    return {"approvals": dump(sc.approvals(status, limit))}


@route(router, "approve")
def approve(approval_id: str, body: ApproveIn, sc: Lib, who: Caller) -> dict[str, Any]:
    return dump_dict(sc.approve(approval_id, body.for_s, by=who.name))


@route(router, "deny")
def deny(approval_id: str, sc: Lib, who: Caller) -> dict[str, Any]:
    return dump_dict(sc.deny(approval_id, by=who.name))


@route(router, "appeal")
def appeal(body: AppealIn, sc: Lib, who: Caller) -> dict[str, Any]:
    filed = sc.appeal(
        body.tool,
        body.arguments,
        body.reason,
        body.constraint_ids,
        source=_source(who, body.source),
    )
    return dump_dict(filed)


@route(router, "appeals")
def appeals(
    sc: Lib,
    status: Literal["open", "upheld", "granted"] | None = None,
    limit: int = Query(default=100, ge=1, le=1_000),
) -> dict[str, Any]:
    return {"appeals": dump(sc.appeals(status, limit))}


@route(router, "close_appeal")
def close_appeal(appeal_id: str, body: CloseAppealIn, sc: Lib, who: Caller) -> dict[str, Any]:
    return dump_dict(sc.close_appeal(appeal_id, body.granted, by=who.name))


@route(router, "note_calls")
def note_calls(body: DecisionsIn, sc: Lib, who: Caller) -> dict[str, Any]:
    calls = [c.model_dump() for c in body.calls]
    return {"kept": sc.note_calls(calls, source=_source(who, body.source))}


@route(router, "activity")
def activity(sc: Lib, hours: int = Query(default=48, ge=1, le=336)) -> dict[str, Any]:
    return dump_dict(sc.activity(hours))


@route(router, "session_activity")
def session_activity(
    sc: Lib,
    key: str = Query(min_length=1, max_length=1024),
    limit: int = Query(default=500, ge=1, le=5000),
) -> dict[str, Any]:
    return dump_dict(sc.session_activity(key, limit))
