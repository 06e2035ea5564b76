from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from sidecar.limits import MAX_MIN_CHAINS, MandateStatus
from sidecar.shells.api.deps import Lib, Meter, Operator
from sidecar.shells.api.models import EvictIn, RestoreIn
from sidecar.wire import dump, dump_dict

router = APIRouter(tags=["eviction"])


@router.post("/v1/evictions")
def evict(body: EvictIn, sc: Lib, meter: Meter, _who: Operator) -> dict[str, Any]:
    report = sc.evict(dry_run=body.dry_run, min_chains=body.min_chains)
    if not body.dry_run:
        meter.inc("evicted_tools", len(report.evicted))
    return dump_dict(report)


@router.post("/v1/evictions/recover")
def recover(sc: Lib, _who: Operator) -> dict[str, Any]:
    return dump_dict(sc.recover())


@router.get("/v1/evictions/decision")
def decision(
    sc: Lib,
    min_chains: int | None = Query(
        default=None, ge=1, le=MAX_MIN_CHAINS, description="overrides SIDECAR_EVICT_MIN_CHAINS"
    ),
) -> dict[str, Any]:
    return {"decisions": dump(sc.decide(min_chains))}


@router.post("/v1/tools/{tool_id}/restore")
def restore(tool_id: str, body: RestoreIn, sc: Lib, _who: Operator) -> dict[str, Any]:
    return dump_dict(sc.restore(tool_id, body.reason, lift_constraints=body.lift_constraints))


@router.get("/v1/revocations")
def revocations(sc: Lib, status: MandateStatus | None = None) -> dict[str, Any]:
    return {"mandates": dump(sc.mandates(status))}


@router.post("/v1/revocations/run")
def run_revocations(sc: Lib, _who: Operator) -> dict[str, Any]:
    return dump_dict(sc.run_revocations())
