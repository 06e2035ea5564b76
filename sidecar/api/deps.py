"""What a route receives: the library handle of the app it serves."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from sidecar.app import Sidecar
from sidecar.metrics import Metrics


def library(request: Request) -> Sidecar:
    sc: Sidecar = request.app.state.sidecar
    return sc


def metrics(request: Request) -> Metrics:
    m: Metrics = request.app.state.metrics
    return m


Lib = Annotated[Sidecar, Depends(library)]
Meter = Annotated[Metrics, Depends(metrics)]
