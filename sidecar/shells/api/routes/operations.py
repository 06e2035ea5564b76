from __future__ import annotations

import sys

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from sidecar.shells.api.deps import Lib, Meter
from sidecar.wire import dump

router = APIRouter(tags=["operations"])


@router.get("/livez")
def livez() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(sc: Lib) -> JSONResponse:
    health = sc.health()
    return JSONResponse(dump(health), status_code=200 if health.ready else 503)


@router.get("/version")
def version(sc: Lib, request: Request) -> dict[str, str | int]:
    """What runs, and the largest request body it takes (``max_body_bytes``: clients
    split their batches under it)."""
    from importlib.metadata import version as installed

    from sidecar import __version__

    return {
        "sidecar": __version__,
        "python": sys.version.split()[0],
        "chromadb": installed("chromadb"),
        "embedder": sc.settings.embedder,
        "max_body_bytes": int(request.app.state.max_body_bytes),
    }


@router.get("/metrics", response_class=PlainTextResponse)
def prometheus(sc: Lib, meter: Meter) -> str:
    def gauges() -> dict[str, dict[str, float]]:
        status = sc.status(verify=False)
        return {
            "revocation_mandates": {f'{{status="{s}"}}': n for s, n in sc.mandate_counts().items()},
            "quarantined_files": {"": len(status.quarantined)},
            "active_constraints": {"": status.active_constraints},
            "active_call_conditions": {"": status.call_conditions},
            "archived_chains": {"": status.chains},
            "evicted_tools": {"": status.evicted_tools},
            "contradictions_ignored": {"": status.ignored_contradictions},
        }

    return meter.render(gauges)
