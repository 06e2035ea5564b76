"""What every console page shares: the templates, who is signed in, the forms' checks
(the session's CSRF token, and the ``Origin`` when the browser sends one), and the
headers every answer carries."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from sidecar.core import Sidecar
from sidecar.shells.console.sessions import (
    COOKIE,
    PATH,
    ConsoleSession,
    ConsoleSessions,
    same_token,
)
from sidecar.trust.principals import Principals

PAGE_SIZE = 50
MAX_FORM_BYTES = 65_536
HEADERS = {
    # no script runs on these pages, nothing is framed, forms post only here
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("sidecar.shells.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def _utc(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) if at else ""


TEMPLATES.filters["utc"] = _utc


@dataclass
class Console:
    """The console's state in one app: the tokens it accepts and its sessions."""

    principals: Principals
    sessions: ConsoleSessions


def console_of(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


def library(request: Request) -> Sidecar:
    sc: Sidecar = request.app.state.sidecar
    return sc


def render(
    request: Request,
    template: str,
    code: int = 200,
    session: ConsoleSession | None = None,
    **values: Any,
) -> HTMLResponse:
    page = TEMPLATES.get_template(template).render(session=session, path=request.url.path, **values)
    return HTMLResponse(page, status_code=code, headers=HEADERS)


def redirect(to: str) -> RedirectResponse:
    return RedirectResponse(to, status_code=303, headers=HEADERS)


def signed_in(request: Request) -> ConsoleSession | None:
    return console_of(request).sessions.find(request.cookies.get(COOKIE))


def to_sign_in(request: Request) -> RedirectResponse:
    return redirect(f"{PATH}/sign-in")


def secure(request: Request) -> bool:
    """Whether the page was served over https (the cookie is then ``Secure``)."""
    return request.url.scheme == "https"


def set_cookie(response: Response, request: Request, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )


def same_origin(request: Request) -> bool:
    """A form's ``Origin`` (when the browser sends one) is this server's own."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"{request.url.scheme}://{host}", f"http://{host}", f"https://{host}")


async def form(request: Request) -> dict[str, str]:
    """An url-encoded form's fields (the first value of each)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


def refused_form(request: Request, session: ConsoleSession, fields: Mapping[str, str]) -> bool:
    """Whether a state-changing form must be refused: no or a wrong CSRF token, or
    another site's ``Origin``."""
    return not (same_origin(request) and same_token(session.csrf, fields.get("csrf")))


def forbidden(request: Request, session: ConsoleSession | None) -> HTMLResponse:
    return render(
        request,
        "message.html",
        403,
        session,
        title="Refused",
        message="This form came without its session's token, or from another site: "
        "nothing was changed.  Reload the page and try again.",
    )


@dataclass(frozen=True)
class Paged:
    """One page of rows, by page number."""

    rows: Sequence[Any]
    page: int
    pages: int
    total: int


def page_number(raw: str | None) -> int:
    try:
        return max(1, int(raw or 1))
    except ValueError:
        return 1


def paged(rows: Sequence[Any], page: int, size: int = PAGE_SIZE) -> Paged:
    pages = max(1, math.ceil(len(rows) / size))
    page = min(page, pages)
    return Paged(rows[(page - 1) * size : page * size], page, pages, len(rows))
