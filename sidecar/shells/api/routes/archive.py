from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from sidecar.errors import Forbidden
from sidecar.limits import MAX_POINTER
from sidecar.shells.api.deps import Caller, Lib, route
from sidecar.shells.api.deps import viewer as shown_to
from sidecar.shells.api.models import ForgetIn, MaintainIn, ReasonIn, ReportsIn
from sidecar.wire import dump, dump_dict

router = APIRouter(tags=["archive"])


@route(router, "report_many")
def reports(body: ReportsIn, sc: Lib, who: Caller) -> dict[str, Any]:
    if body.source is not None and body.source != who.name and not who.operator:
        # worded as deps.operator's: "the token 'x'" would be masked as a quoted token
        raise Forbidden(
            f"only an operator may attribute reports to another source; {who.name!r} holds "
            f"an {who.role} token"
        )
    source = body.source or who.name
    return {"results": dump(sc.report_many(body.reports, source=source, role=who.role))}


VIEWER = Query(
    default=None, max_length=64, description="operators only: answer as this agent token"
)


@route(router, "audit")
def audit(
    sc: Lib,
    who: Caller,
    pointer: str = Query(min_length=1, max_length=MAX_POINTER),
    viewer: str | None = VIEWER,
) -> dict[str, Any]:
    """The record behind a pointer; an agent token reads its own sessions' alone."""
    return dump_dict(sc.audit(pointer, viewer=shown_to(who, viewer)))


@route(router, "digest")
def digest(sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.digest())


@route(router, "status")
def archive_status(sc: Lib, verify: bool = False) -> dict[str, Any]:
    return dump_dict(sc.status(verify))


@route(router, "maintain_archive")
def maintain(body: MaintainIn, sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.maintain_archive(body.retention_hours))


@route(router, "constraints")
def constraints(
    sc: Lib, who: Caller, include_lifted: bool = False, viewer: str | None = VIEWER
) -> dict[str, Any]:
    """Every rule; an agent token sees other sources' rules as verdicts."""
    return {"constraints": dump(sc.constraints(include_lifted, shown_to(who, viewer)))}


@route(router, "constraint")
def constraint(
    constraint_id: str, sc: Lib, who: Caller, viewer: str | None = VIEWER
) -> dict[str, Any]:
    return dump_dict(sc.constraint(constraint_id, shown_to(who, viewer)))


@route(router, "lift")
def lift(chain_id: str, body: ReasonIn, sc: Lib, who: Caller) -> dict[str, Any]:
    return dump_dict(sc.lift(chain_id, body.reason, by=who.name))


@route(router, "reinstate")
def reinstate(chain_id: str, body: ReasonIn, sc: Lib, who: Caller) -> dict[str, Any]:
    return dump_dict(sc.reinstate(chain_id, body.reason, by=who.name))


@route(router, "confirm")
def confirm(chain_id: str, body: ReasonIn, sc: Lib, who: Caller) -> dict[str, Any]:
    return dump_dict(sc.confirm(chain_id, body.reason, by=who.name))


@route(router, "retire")
def retire(chain_id: str, body: ReasonIn, sc: Lib, who: Caller) -> dict[str, Any]:
    return dump_dict(sc.retire(chain_id, body.reason, by=who.name))


@route(router, "forget")
def forget(source: str, body: ForgetIn, sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.forget(source, body.since))
