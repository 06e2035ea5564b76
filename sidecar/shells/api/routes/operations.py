from __future__ import annotations

import sys

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from sidecar.shells.api.deps import Lib, Meter, route
from sidecar.trust.principals import principal_of
from sidecar.trust.quota import LIMITS, QuotaView
from sidecar.wire import dump

router = APIRouter(tags=["operations"])


@route(router, "livez")
def livez() -> dict[str, str]:
    return {"status": "ok"}


@route(router, "health")
def readyz(sc: Lib, request: Request) -> JSONResponse:
    """200 when ready, else 503, to anyone (a probe sends no token); the checks behind
    the answer only to a caller with a token (they name stores and their errors)."""
    health = sc.health()
    body = dump(health) if principal_of(request.scope) is not None else {"ready": health.ready}
    return JSONResponse(body, status_code=200 if health.ready else 503)


@route(router, "version")
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


@route(router, "metrics", response_class=PlainTextResponse)
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

    return meter.render(gauges) + "\n".join(_quota_lines(sc.quotas())) + "\n"


def _quota_lines(view: QuotaView) -> list[str]:
    """What untrusted tokens spent of their quotas (:mod:`sidecar.trust.quota`)."""
    lines = [
        "# HELP sidecar_evidence_budget_bytes Bytes of evidence each untrusted token may "
        "put into the state (0: no limit).",
        "# TYPE sidecar_evidence_budget_bytes gauge",
        f"sidecar_evidence_budget_bytes {view.budget_bytes}",
        "# HELP sidecar_evidence_bytes Bytes of evidence each token has put into the state.",
        "# TYPE sidecar_evidence_bytes gauge",
        *(
            f'sidecar_evidence_bytes{{token="{t}"}} {n}'
            for t, n in sorted(view.evidence_bytes.items())
        ),
        "# HELP sidecar_reports_refused_total Report requests refused, by the limit that "
        "refused them.",
        "# TYPE sidecar_reports_refused_total counter",
        *(
            f'sidecar_reports_refused_total{{limit="{limit}"}} {view.refused.get(limit, 0)}'
            for limit in LIMITS
        ),
        "# HELP sidecar_uncataloged_steps_total Untrusted tokens' steps on tools in no "
        "catalog, taken as context only.",
        "# TYPE sidecar_uncataloged_steps_total counter",
        *(
            f'sidecar_uncataloged_steps_total{{token="{t}"}} {n}'
            for t, n in sorted(view.uncataloged_steps.items())
        ),
    ]
    return lines
