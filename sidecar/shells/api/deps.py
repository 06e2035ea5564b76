"""What a route receives: the library handle of the app it serves, and its caller; and
:func:`route`, which makes a route of its declared operations."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request

from sidecar.core import Sidecar
from sidecar.errors import Forbidden
from sidecar.metrics import Metrics
from sidecar.shells.operations import BY_NAME, joined, strictest
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
Meter = Annotated[Metrics, Depends(metrics)]


Handler = TypeVar("Handler", bound=Callable[..., Any])


ROLE_NOTES = {
    "public": "Needs no token.",
    "agent": "Needs a token: an agent's or an operator's.",
    "operator": "Needs an operator's token.",
}
"""The sentence that closes a route's OpenAPI description: the role it needs."""


def route(router: APIRouter, *names: str, **more: Any) -> Callable[[Handler], Handler]:
    """The route of the operations ``names`` (:mod:`sidecar.shells.operations`): its
    method and path, its summary, its description (their details, else the handler's
    docstring, then the role) and the role's check, all as declared; the role is also
    the OpenAPI operation's ``x-role``.  ``more``: what only the route says (its
    response class)."""
    ops = [BY_NAME[name] for name in names]
    routes = {op.http for op in ops}
    if len(routes) != 1 or None in routes:
        raise ValueError(f"{names} must declare one route between them, not {routes}")
    (http,) = routes
    assert http is not None
    access = strictest(ops)
    # the token itself the Gate requires of every path not declared public
    needs = [Depends(operator)] if access == "operator" else []

    def declared(handler: Handler) -> Handler:
        told = joined(ops, "detail") or inspect.cleandoc(handler.__doc__ or "")
        add = router.api_route(
            http.path,
            methods=[http.method],
            summary=joined(ops),
            description=f"{told}\n\n{ROLE_NOTES[access]}".strip(),
            dependencies=needs,
            openapi_extra={"x-role": access},
            **more,
        )
        return add(handler)

    return declared
