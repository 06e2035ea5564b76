"""What a route receives: the library handle of the app it serves, and its caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from sidecar.core import Sidecar
from sidecar.errors import Forbidden
from sidecar.metrics import Metrics
from sidecar.trust.principals import THE_PROCESS, Principal, principal_of


def library(request: Request) -> Sidecar:
    sc: Sidecar = request.app.state.sidecar
    return sc


def metrics(request: Request) -> Metrics:
    m: Metrics = request.app.state.metrics
    return m


def caller(request: Request) -> Principal:
    """Who asks (the Gate authenticated the token); an app mounted without the Gate
    (tests of routes alone) acts as the process itself."""
    return principal_of(request.scope) or THE_PROCESS


def operator(request: Request) -> Principal:
    """The caller, who must hold the operator role."""
    who = caller(request)
    if not who.operator:
        # the token's name is no secret, and the message says it outside any pattern the
        # redaction of error messages masks ("token 'x'" reads as a quoted token)
        raise Forbidden(f"this needs the operator role; {who.name!r} holds an {who.role} token")
    return who


def viewer(who: Principal, asked: str | None) -> str | None:
    """Whom an answer is worded for: an agent always for itself; an operator for the
    agent it names (a gateway in front of agents), else for operators."""
    if not who.operator:
        if asked is not None and asked != who.name:
            raise Forbidden(
                f"only an operator may ask for another agent's answer; {who.name!r} holds an "
                f"{who.role} token"
            )
        return who.name
    return asked


Lib = Annotated[Sidecar, Depends(library)]
Caller = Annotated[Principal, Depends(caller)]
Operator = Annotated[Principal, Depends(operator)]
Meter = Annotated[Metrics, Depends(metrics)]
