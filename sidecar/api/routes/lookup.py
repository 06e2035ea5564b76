from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sidecar.api.deps import Lib, Meter
from sidecar.api.models import CheckIn, SearchIn
from sidecar.wire import dump_dict

router = APIRouter(tags=["lookup"])


@router.post("/v1/search")
def search(body: SearchIn, sc: Lib, meter: Meter) -> dict[str, Any]:
    result = sc.search(body.query, k=body.k, after=body.after, context=body.context)
    meter.inc("lookups")
    meter.inc("withheld_continuations", len(result.withheld))
    return dump_dict(result)


@router.post("/v1/check")
def check(body: CheckIn, sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.check(body.plan, mode=body.mode, context=body.context))
