from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sidecar.api.deps import Lib, Meter
from sidecar.api.models import CheckIn, SearchIn
from sidecar.errors import InvalidInput
from sidecar.wire import dump_dict

router = APIRouter(tags=["lookup"])


@router.post("/v1/search")
def search(body: SearchIn, sc: Lib, meter: Meter) -> dict[str, Any]:
    steps = [s.model_dump() for s in body.steps] if body.steps is not None else None
    result = sc.search(
        body.query, body.k, body.after, body.context, steps=steps, task_input=body.task_input
    )
    meter.inc("lookups")
    meter.inc("withheld_continuations", len(result.withheld))
    return dump_dict(result)


@router.post("/v1/check")
def check(body: CheckIn, sc: Lib) -> dict[str, Any]:
    """A plan's check (``plan``), or a call's before it is made (``steps`` and ``next``:
    ``decision`` allow, warn or block, with every reason)."""
    if body.next is not None:
        if body.plan is not None:
            raise InvalidInput("send either a plan, or steps and next, not both")
        steps = [s.model_dump() for s in body.steps or []]
        return dump_dict(
            sc.check_call(steps, body.next.tool, body.next.arguments, body.task_input, body.context)
        )
    if body.plan is None:
        raise InvalidInput("send a plan (tool ids), or steps and next (the call to check)")
    return dump_dict(sc.check(body.plan, mode=body.mode, context=body.context))
