from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from sidecar.limits import MAX_MIN_CHAINS, MandateStatus
from sidecar.shells.api.deps import Lib, Meter, route
from sidecar.shells.api.models import EvictIn, RestoreIn
from sidecar.wire import dump, dump_dict

router = APIRouter(tags=["eviction"])


@route(router, "evict")
def evict(body: EvictIn, sc: Lib, meter: Meter) -> dict[str, Any]:
    report = sc.evict(dry_run=body.dry_run, min_chains=body.min_chains)
    if not body.dry_run:
        meter.inc("evicted_tools", len(report.evicted))
    return dump_dict(report)


@route(router, "recover")
def recover(sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.recover())


@route(router, "decide")
def decision(
    sc: Lib,
    min_chains: int | None = Query(
        default=None, ge=1, le=MAX_MIN_CHAINS, description="overrides SIDECAR_EVICT_MIN_CHAINS"
    ),
) -> dict[str, Any]:
    return {"decisions": dump(sc.decide(min_chains))}


@route(router, "restore")
def restore(tool_id: str, body: RestoreIn, sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.restore(tool_id, body.reason, lift_constraints=body.lift_constraints))


@route(router, "tool_history")
def tool_history(tool_id: str, sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.tool_history(tool_id))


@route(router, "mandates")
def revocations(sc: Lib, status: MandateStatus | None = None) -> dict[str, Any]:
    return {"mandates": dump(sc.mandates(status))}


@route(router, "run_revocations")
def run_revocations(sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.run_revocations())
