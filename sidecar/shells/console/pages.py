"""The console's pages: each reads the library through :class:`~sidecar.core.Sidecar`
methods alone and shows one page of rows."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sidecar.errors import NotFound, SidecarError
from sidecar.limits import CONSTRAINT_STATUSES
from sidecar.results import ConstraintView, SourceActivity
from sidecar.shells.console.figures import overview
from sidecar.shells.console.sessions import PATH
from sidecar.shells.console.web import (
    PAGE_SIZE,
    console_of,
    library,
    page_number,
    paged,
    redirect,
    render,
    signed_in,
    to_sign_in,
)
from sidecar.trust.principals import LOCAL

router = APIRouter(prefix=PATH, include_in_schema=False)


@router.get("")
@router.get("/")
def home(request: Request) -> Response:
    return redirect(f"{PATH}/overview" if signed_in(request) else f"{PATH}/sign-in")


@router.get("/static/console.css")
def stylesheet() -> Response:
    css = resources.files("sidecar.shells.console").joinpath("static/console.css").read_text()
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


@router.get("/overview")
def overview_page(request: Request) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    figures = overview(library(request))
    return render(request, "overview.html", session=session, o=figures)


def relation(view: ConstraintView) -> str:
    """A rule's relation in words: what fails, after what."""
    if view.kind == "sequence":
        *prefix, last = view.sequence
        after = " then ".join(prefix)
        return f"after {after}, calling {last} fails with {view.expected_failure!r}"
    return view.rule or f"calling {view.sequence[0]} fails with {view.expected_failure!r}"


@router.get("/rules")
def rules_page(request: Request) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    status = request.query_params.get("status") or "all"
    views = library(request).constraints(include_lifted=True)
    counts = Counter(v.status for v in views)
    shown = [v for v in views if status in ("all", v.status)]
    page = paged(shown, page_number(request.query_params.get("page")))
    return render(
        request,
        "rules.html",
        session=session,
        page=page,
        status=status,
        statuses=CONSTRAINT_STATUSES,
        counts=counts,
        relation=relation,
    )


@router.get("/rules/{rule_id}")
def rule_page(request: Request, rule_id: str) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    sc = library(request)
    try:
        view = sc.constraint(rule_id)
    except (NotFound, SidecarError) as exc:
        return render(request, "message.html", 404, session, title="No such rule", message=str(exc))
    history, sessions = sc.constraint_history(view.chain_id), sc.rule_sessions(view.chain_id)
    done = request.query_params.get("done")
    return render(
        request, "rule.html", session=session, v=view, history=history, relation=relation,
        done=done, sessions=sessions,
    )  # fmt: skip


@router.get("/tools")
def tools_page(request: Request) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    sc = library(request)
    cursor = request.query_params.get("cursor") or None
    try:
        tools = sc.list_tools_page(cursor, PAGE_SIZE)
    except SidecarError as exc:
        return render(request, "message.html", 400, session, title="Tools", message=str(exc))
    cold = sorted(sc.hidden_tools())
    mandates = paged(sc.mandates(), page_number(request.query_params.get("mandates")))
    # what an eviction would do reads every dead end's sessions: asked for, not by default
    asked = request.query_params.get("decisions")
    decisions = None if asked is None else paged(sc.decide(), page_number(asked))
    return render(
        request,
        "tools.html",
        session=session,
        tools=tools,
        cursor=cursor,
        cold=cold,
        mandates=mandates,
        decisions=decisions,
        counts=sc.mandate_counts(),
    )


@router.get("/tools/{tool_id}")
def tool_page(request: Request, tool_id: str) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    try:
        history = library(request).tool_history(tool_id)
    except SidecarError as exc:
        return render(request, "message.html", 404, session, title="No such tool", message=str(exc))
    return render(request, "tool.html", session=session, h=history, relation=relation)


@dataclass(frozen=True)
class SourceRow:
    name: str
    role: str
    trusted: bool
    rules: int
    alone: int
    evidence_bytes: int
    uncataloged_steps: int
    rate: SourceActivity | None = None
    """Its calls and lookups kept in the decision log, the last hour and day."""


def sources_taught(request: Request) -> tuple[list[SourceRow], int]:
    """Every token and every source a rule names: its role, trust, the rules it
    supports and alone taught, and what it spent of its evidence budget; and that budget
    (0: no limit)."""
    sc = library(request)
    roles = {name: role for name, role in console_of(request).principals.names()}
    views = sc.constraints(include_lifted=True)
    rules = Counter(s for v in views for s in v.sources)
    alone = Counter(v.sources[0] for v in views if len(v.sources) == 1)
    quotas, trusted = sc.quotas(), sc.trusted_sources()
    rates = {r.source: r for r in sc.activity(1).sources}
    names = sorted({LOCAL, *roles, *rules, *rates})
    rows = [
        SourceRow(
            n,
            roles.get(n, "operator" if n == LOCAL else ""),
            n in trusted,
            rules[n],
            alone[n],
            quotas.evidence_bytes.get(n, 0),
            quotas.uncataloged_steps.get(n, 0),
            rates.get(n),
        )
        for n in names
    ]
    return rows, quotas.budget_bytes


@router.get("/sources")
def sources_page(request: Request) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    rows, budget = sources_taught(request)
    page = paged(rows, page_number(request.query_params.get("page")))
    return render(request, "sources.html", session=session, page=page, budget=budget)


@router.get("/sources/{source}")
def source_page(request: Request, source: str) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    views = library(request).constraints(include_lifted=True)
    taught = [v for v in views if source in v.sources]
    page = paged(taught, page_number(request.query_params.get("page")))
    return render(
        request, "source.html", session=session, source=source, page=page, relation=relation
    )


@router.get("/sessions")
def sessions_page(request: Request) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    cursor = request.query_params.get("cursor") or None
    try:
        found = library(request).sessions_page(cursor, PAGE_SIZE)
    except SidecarError as exc:
        return render(request, "message.html", 400, session, title="Sessions", message=str(exc))
    return render(request, "sessions.html", session=session, page=found, cursor=cursor)


@router.get("/session")
def session_page(request: Request) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    key = request.query_params.get("key") or ""
    try:
        story = library(request).session_activity(key)
    except SidecarError as exc:
        return render(request, "message.html", 400, session, title="Session", message=str(exc))
    if story.learned is None and not story.decisions:
        message = f"Nothing was learned of the session {key!r}, and nothing decided for it is kept."
        return render(
            request, "message.html", 404, session, title="No such session", message=message
        )
    called = {d.tool for d in story.decisions if d.kind == "call"}
    return render(request, "session.html", session=session, s=story, called=called)


@router.get("/review")
def review_page(request: Request) -> Response:
    session = signed_in(request)
    if session is None:
        return to_sign_in(request)
    sc = library(request)
    decided = [a for a in sc.approvals(limit=PAGE_SIZE) if a.status != "pending"]
    # rules that warn on one untrusted source's word until a person judges them
    waiting = [v for v in sc.constraints() if not v.independent and v.judged is None]
    return render(
        request,
        "review.html",
        session=session,
        pending=sc.approvals("pending", PAGE_SIZE),
        appeals=sc.appeals("open", PAGE_SIZE),
        decided=decided,
        unconfirmed=paged(waiting, page_number(request.query_params.get("page"))),
        relation=relation,
        done=request.query_params.get("done"),
    )
