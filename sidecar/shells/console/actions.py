"""The console's forms: signing in and out, lifting, reinstating, confirming and
retiring a rule, and forgetting a source after a preview.  Every form that changes state
carries the session's CSRF token; the sign-in form carries its own (a cookie of the
sign-in page)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from sidecar.errors import SidecarError
from sidecar.shells.console.sessions import COOKIE, PATH, SIGN_IN_COOKIE, same_token
from sidecar.shells.console.web import (
    console_of,
    forbidden,
    form,
    library,
    redirect,
    refused_form,
    render,
    same_origin,
    set_cookie,
    signed_in,
    to_sign_in,
)

router = APIRouter(prefix=PATH, include_in_schema=False)
NO_TOKENS = (
    "This sidecar has no tokens: its API refuses every request, and the console lets no "
    "one in.  Set SIDECAR_TOKEN, or name tokens in the home's tokens.json "
    "(SIDECAR_TOKENS_FILE), and restart the server."
)


def _sign_in_form(request: Request, error: str | None = None, status: int = 200) -> Response:
    nonce = secrets.token_urlsafe(32)
    no_tokens = not len(console_of(request).principals)
    response = render(
        request, "sign_in.html", status, None, nonce=nonce, error=error, no_tokens=no_tokens,
        no_tokens_text=NO_TOKENS,
    )  # fmt: skip
    set_cookie(response, request, SIGN_IN_COOKIE, nonce, 3600)
    return response


@router.get("/sign-in")
def sign_in_page(request: Request) -> Response:
    if signed_in(request):
        return redirect(f"{PATH}/overview")
    return _sign_in_form(request)


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    fields = await form(request)
    nonce = request.cookies.get(SIGN_IN_COOKIE) or ""
    if not (same_origin(request) and nonce and same_token(nonce, fields.get("nonce"))):
        return _sign_in_form(request, "The sign-in form expired; try again.", 403)
    console = console_of(request)
    if not len(console.principals):
        return _sign_in_form(request, NO_TOKENS, 403)
    principal = console.principals.authenticate(fields.get("token", "").encode())
    if principal is None:
        return _sign_in_form(request, "That token matches none of this sidecar's tokens.", 401)
    if not principal.operator:
        return render(
            request,
            "message.html",
            403,
            None,
            title="The console is for operators",
            message=f"The token named {principal.name!r} is an agent's token.  The console "
            "shows and changes what the sidecar learned from every agent, so it takes an "
            "operator's token only.  Nothing was shown and no session was opened.",
        )
    session_id, _session = console.sessions.open(principal)
    response = redirect(f"{PATH}/overview")
    set_cookie(response, request, COOKIE, session_id, int(console.sessions.lifetime_s))
    response.delete_cookie(SIGN_IN_COOKIE, path=PATH, httponly=True, samesite="strict")
    return response


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    if refused_form(request, session, await form(request)):
        return forbidden(request, session)
    console_of(request).sessions.close(request.cookies.get(COOKIE))
    response = redirect(f"{PATH}/sign-in")
    response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict")
    return response


@router.post("/rules/{rule_id}/{action}")
async def change_rule(request: Request, rule_id: str, action: str) -> Response:
    """Lift, reinstate, confirm or retire a rule, with the operator's reason and name."""
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    fields = await form(request)
    if refused_form(request, session, fields):
        return forbidden(request, session)
    sc, reason, who = library(request), fields.get("reason", ""), session.principal.name
    change = {
        "lift": sc.lift, "reinstate": sc.reinstate, "confirm": sc.confirm, "retire": sc.retire
    }.get(action)  # fmt: skip
    if change is None:
        return render(request, "message.html", 404, session, title="No such action", message=action)
    try:
        done = await run_in_threadpool(change, rule_id, reason, who)
    except SidecarError as exc:
        return render(
            request, "message.html", exc.status, session, title="Not done", message=str(exc)
        )
    shown = "confirmed" if action == "confirm" else done.status
    return redirect(f"{PATH}/rules/{quote(done.chain_id, safe='')}?done={shown}")


def _since(raw: str) -> float | None:
    """A form's ``since``: empty (everything), a Unix time, or an ISO date and time (UTC
    unless it says otherwise)."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        at = datetime.fromisoformat(raw)
        return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


@router.post("/sources/{source}/{step}")
async def forget_source(request: Request, source: str, step: str) -> Response:
    """``preview``: what forgetting ``source`` would change, with a confirm form;
    ``forget``: forget it, shown beside the preview it confirmed."""
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    fields = await form(request)
    if refused_form(request, session, fields) or step not in ("preview", "forget"):
        return forbidden(request, session)
    sc, raw = library(request), fields.get("since", "")
    try:
        since = _since(raw)
        result = await run_in_threadpool(sc.forget, source, since, step == "preview")
    except (SidecarError, ValueError) as exc:
        status = exc.status if isinstance(exc, SidecarError) else 400
        return render(request, "message.html", status, session, title="Not done", message=str(exc))
    if step == "preview":
        session.previews[source] = (raw, result)
        return render(request, "forget.html", session=session, source=source, since=raw,
                      preview=result, result=None)  # fmt: skip
    before = session.previews.pop(source, None)
    preview = before[1] if before and before[0] == raw else None
    return render(request, "forget.html", session=session, source=source, since=raw,
                  preview=preview, result=result)  # fmt: skip


@router.post("/approvals/{approval_id}/{decision}")
async def decide_approval(request: Request, approval_id: str, decision: str) -> Response:
    """Approve (once, or for a time) or deny a held call, in the operator's name."""
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    fields = await form(request)
    if refused_form(request, session, fields):
        return forbidden(request, session)
    sc, who = library(request), session.principal.name
    raw = fields.get("for_s", "").strip()
    try:
        if decision == "approve":
            for_s = float(raw) if raw else None
            done = await run_in_threadpool(lambda: sc.approve(approval_id, for_s, by=who))
        elif decision == "deny":
            done = await run_in_threadpool(lambda: sc.deny(approval_id, by=who))
        else:
            return render(
                request, "message.html", 404, session, title="No such action", message=decision
            )
    except (SidecarError, ValueError) as exc:
        status = exc.status if isinstance(exc, SidecarError) else 400
        return render(request, "message.html", status, session, title="Not done", message=str(exc))
    return redirect(f"{PATH}/review?done={quote(f'{done.approval_id} {done.status}')}")


@router.post("/appeals/{appeal_id}/{verdict}")
async def close_appeal(request: Request, appeal_id: str, verdict: str) -> Response:
    """Close an appeal: granted, or the block upheld, in the operator's name."""
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    if refused_form(request, session, await form(request)):
        return forbidden(request, session)
    if verdict not in ("granted", "upheld"):
        return render(
            request, "message.html", 404, session, title="No such action", message=verdict
        )
    sc, who = library(request), session.principal.name
    try:
        done = await run_in_threadpool(
            lambda: sc.close_appeal(appeal_id, verdict == "granted", by=who)
        )
    except SidecarError as exc:
        return render(
            request, "message.html", exc.status, session, title="Not done", message=str(exc)
        )
    return redirect(f"{PATH}/review?done={quote(f'{done.appeal_id} {done.status}')}")
