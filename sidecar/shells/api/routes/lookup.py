from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from sidecar.errors import InvalidInput
from sidecar.shells.api.deps import Caller, Lib, Meter, route, viewer
from sidecar.shells.api.models import CheckIn, SearchIn
from sidecar.wire import dump_dict

router = APIRouter(tags=["lookup"])


def _answer(value: Any) -> JSONResponse:
    """A hot route's answer, already plain JSON values (:func:`dump_dict`): returned as
    a response, so the framework does not walk it again to encode it."""
    return JSONResponse(dump_dict(value))


@route(router, "search", response_class=JSONResponse)
def search(body: SearchIn, sc: Lib, meter: Meter, who: Caller) -> JSONResponse:
    steps = [s.model_dump() for s in body.steps] if body.steps is not None else None
    result = sc.search(
        body.query,
        body.k,
        body.after,
        body.context,
        steps=steps,
        task_input=body.task_input,
        viewer=viewer(who, body.viewer),
        session_id=body.session_id,
    )
    meter.inc("lookups")
    meter.inc("withheld_continuations", len(result.withheld))
    return _answer(result)


@route(router, "check", "check_call", response_class=JSONResponse)
def check(body: CheckIn, sc: Lib, who: Caller) -> JSONResponse:
    """A plan's check (``plan``), or a call's before it is made (``steps`` and ``next``:
    ``decision`` allow, warn or block, with every reason, worded for the caller)."""
    shown_to = viewer(who, body.viewer)
    if body.next is not None:
        if body.plan is not None:
            raise InvalidInput("send either a plan, or steps and next, not both")
        steps = [s.model_dump() for s in body.steps or []]
        return _answer(
            sc.check_call(
                steps,
                body.next.tool,
                body.next.arguments,
                body.task_input,
                body.context,
                viewer=shown_to,
                session_id=body.session_id,
            )
        )
    if body.plan is None:
        raise InvalidInput("send a plan (tool ids), or steps and next (the call to check)")
    return _answer(sc.check(body.plan, mode=body.mode, context=body.context, viewer=shown_to))
