"""Every operation the shells offer, declared once: its name, the
:class:`~sidecar.core.Sidecar` method it calls, the role it needs, a one-line summary,
and the surfaces that expose it (an HTTP route, a :class:`~sidecar.shells.client.
RemoteSidecar` method, a CLI command, an MCP tool).

An operation's arguments and result are its library method's: :meth:`Operation.
signature` and :meth:`Operation.result` read them from ``Sidecar``, never from here.
The surfaces follow from this table where that is cheap and clear (a route's path,
method, summary and role: :func:`sidecar.shells.api.deps.route`; the public
paths of :mod:`sidecar.shells.api.gate`; the CLI's help; the MCP tools' descriptions),
and ``tests/sidecar/test_operations.py`` holds each surface to it either way: a route,
a command, a tool or a client method that is not declared, or a declared one that is
missing or answers another role, fails it.  The table of ``docs/service.md`` is
printed from it (``python -m sidecar.shells.operations --markdown``; ``--update
docs/service.md`` writes the table into that page in place).

Imported by ``sidecar --help``: this module imports nothing heavy (the library is read
only when a signature is asked for).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from sidecar.shells.surfaces import ACCESS, Access, Operation, http_of, library_op, shell_op

LIBRARY: tuple[Operation, ...] = (
    # the tool index
    library_op(
        "add_tools",
        "operator",
        "add or update tools (MCP tools/list, OpenAI function tools, sidecar JSON lines)",
        http="POST /v1/tools",
        cli="tools add",
    ),
    library_op(
        "list_tools",
        "agent",
        "every active tool (the client walks the pages of `GET /v1/tools`)",
        http="GET /v1/tools",
        cli="tools list",
    ),
    library_op(
        "list_tools_page",
        "agent",
        "a page of the active tools, in tool-id order",
        http="GET /v1/tools",
        detail="Follow `next_cursor` until it is null.  An operator's token sees every "
        "active tool as stored; an agent's sees what a lookup could show it: no tool "
        "evicted or withheld from every lookup, and no credential references nor pins "
        "(`view` says which).",
    ),
    library_op(
        "sync_tools",
        "operator",
        "make the hot index hold exactly one source's tools (an MCP gateway's upstream)",
        http="POST /v1/tools/sync",
    ),
    library_op(
        "hidden_tools",
        "agent",
        "the tools never to be listed or called: evicted, or with their move begun",
        http="GET /v1/tools/hidden",
    ),
    # lookups, checks and reports
    library_op(
        "search",
        "agent",
        "semantic tool lookup that withholds continuations known to fail after the "
        "executed prefix `after` under `context`",
        http="POST /v1/search",
        cli="search",
        mcp="search_tools",
        detail="Pass the session's `steps` for warnings about calls known to fail in this "
        "state. `abstained: true` means no tool fits well: the hits are only the closest "
        "candidates.",
    ),
    library_op(
        "check",
        "agent",
        "check a planned tool sequence (`plan`) against archived fatal sequences",
        http="POST /v1/check",
        cli="check",
        mcp="check_plan",
    ),
    library_op(
        "check_call",
        "agent",
        "check one call (`steps` so far, `next`: {tool, arguments}) against learned "
        "failures: allow, warn (with reasons) or block",
        http="POST /v1/check",
        cli="check",
        mcp="check_plan",
        detail="A block means the same call failed before in the same state: do not make it.",
    ),
    library_op(
        "report",
        "agent",
        "report one session (`steps` and `outcome`) or chain (`topology`): deterministic "
        "failures are archived and learned from",
        http="POST /v1/reports",
        mcp="report_chain",
        detail="Same JSON shape as a line of `sidecar report`.",
    ),
    library_op(
        "report_many",
        "agent",
        "report sessions or chains in batches (an operator may name the `source` they are "
        "attributed to)",
        http="POST /v1/reports",
        cli="report",
    ),
    # the archive and its constraints
    library_op(
        "audit",
        "agent",
        "the archived record behind a cold storage pointer (`cold://chains/<id>`, "
        "`cold://tools/<tool>`)",
        http="GET /v1/audit",
        cli="audit",
        mcp="audit_chain",
        detail="An agent token reads its own sessions' records alone.",
    ),
    library_op(
        "digest", "agent", "the archive digest", http="GET /v1/archive/digest", cli="archive digest"
    ),
    library_op(
        "status",
        "agent",
        "the archive's counts, quarantined and damaged files, health",
        http="GET /v1/archive/status",
        cli="archive status",
    ),
    library_op(
        "maintain_archive",
        "operator",
        "compact, checkpoint and vacuum a Delta archive",
        http="POST /v1/archive/maintain",
        cli="archive maintain",
    ),
    library_op(
        "constraints",
        "agent",
        "the archived constraints (lifted ones too on request)",
        http="GET /v1/constraints",
        cli="constraints list",
        detail="An agent token sees other sources' rules as verdicts.",
    ),
    library_op(
        "constraint",
        "agent",
        "one constraint, its evidence and its status",
        http="GET /v1/constraints/{constraint_id}",
        cli="constraints show",
    ),
    library_op(
        "lift",
        "operator",
        "stop enforcing a constraint (a chain id, or a call condition id)",
        http="POST /v1/constraints/{chain_id}/lift",
        cli="constraints lift",
    ),
    library_op(
        "reinstate",
        "operator",
        "enforce a lifted or retired constraint again",
        http="POST /v1/constraints/{chain_id}/reinstate",
        cli="constraints reinstate",
    ),
    library_op(
        "confirm",
        "operator",
        "vouch for a constraint: it blocks when it holds and every agent may read it",
        http="POST /v1/constraints/{chain_id}/confirm",
        cli="constraints confirm",
        detail="For a rule resting on untrusted sources alone, which only warns until a "
        "person confirms it.  Lifting or reinstating it takes the confirmation back.",
    ),
    library_op(
        "retire",
        "operator",
        "stop enforcing one constraint (not its family); reinstating undoes it",
        http="POST /v1/constraints/{chain_id}/retire",
        cli="constraints retire",
    ),
    library_op(
        "forget",
        "operator",
        "remove what one source reported, and derive again what rested on it",
        http="POST /v1/sources/{source}/forget",
        cli="forget",
        mcp="forget_source",
        detail="A source is a token's name (all its evidence, whatever the route), "
        "'otlp:<name>' or 'gateway:<name>' (that route's alone), 'gateway', 'otlp' or "
        "'local'; `since` (a Unix time) keeps what arrived before it.",
    ),
    # eviction and revocation
    library_op(
        "decide",
        "agent",
        "which tools an eviction would move, and why",
        http="GET /v1/evictions/decision",
    ),
    library_op(
        "evict",
        "operator",
        "evict dead-end prefix tools to cold storage (a dry run decides and changes nothing)",
        http="POST /v1/evictions",
        cli="evict",
    ),
    library_op(
        "recover",
        "operator",
        "finish the moves a crash interrupted",
        http="POST /v1/evictions/recover",
        cli="evict",
    ),
    library_op(
        "restore",
        "operator",
        "bring an evicted tool back from cold storage",
        http="POST /v1/tools/{tool_id}/restore",
        cli="restore",
    ),
    library_op(
        "tool_history",
        "operator",
        "one tool's state (hot, moving, cold or gone), its moves and restores newest first, "
        "its mandates, the usage sessions brought it and the rules that name it",
        http="GET /v1/tools/{tool_id}/history",
        cli="tools history",
    ),
    library_op(
        "mandates",
        "agent",
        "the credential revocation ledger",
        http="GET /v1/revocations",
        cli="revocations",
    ),
    library_op(
        "run_revocations",
        "operator",
        "apply the configured revoker to due mandates",
        http="POST /v1/revocations/run",
        cli="revocations run",
    ),
    # what waits for a person
    library_op(
        "request_approval",
        "agent",
        "hold one call (a tool and its exact arguments) for an operator's approval: "
        "approved when it may run now, else pending or denied",
        http="POST /v1/approvals",
        detail="Asked again with the same call, the same approval answers; an approval "
        "for one call is used up by it.  An operator may name the `source` it asks for.",
    ),
    library_op(
        "approvals",
        "operator",
        "calls held for approval, newest first",
        http="GET /v1/approvals",
        cli="approvals list",
    ),
    library_op(
        "approve",
        "operator",
        "let a held call run: once, or for `for_s` seconds",
        http="POST /v1/approvals/{approval_id}/approve",
        cli="approvals approve",
    ),
    library_op(
        "deny",
        "operator",
        "refuse a held call",
        http="POST /v1/approvals/{approval_id}/deny",
        cli="approvals deny",
    ),
    library_op(
        "appeal",
        "agent",
        "contest a block: the refused call, the rules that refused it and why they are wrong",
        http="POST /v1/appeals",
        mcp="appeal_block",
        detail="An appeal waits for an operator; it changes nothing until one grants it.",
    ),
    library_op(
        "note_calls",
        "operator",
        "keep what a gateway decided for the calls it relayed (the decision log)",
        http="POST /v1/decisions",
        detail="`source`: the source the calls are attributed to (a gateway names its "
        "agent's, `gateway:<name>`).",
    ),
    library_op(
        "activity",
        "operator",
        "what came in and what was decided, hour by hour; each source's rate; the "
        "newest refusals; when the first call was blocked",
        http="GET /v1/activity",
    ),
    library_op(
        "session_activity",
        "operator",
        "one session: what was learned of it, and every call and lookup decided for it",
        http="GET /v1/sessions/activity",
    ),
    library_op(
        "appeals",
        "operator",
        "agents' appeals against blocks, newest first",
        http="GET /v1/appeals",
        cli="appeals list",
    ),
    library_op(
        "close_appeal",
        "operator",
        "close an appeal: granted or upheld (recorded; lifting the rule or approving the "
        "call is what acts on it)",
        http="POST /v1/appeals/{appeal_id}/close",
        cli="appeals close",
    ),
    # the handle
    library_op(
        "health",
        "public",
        "readiness: 200 when ready, else 503 (the checks behind it only to a caller with a token)",
        http="GET /readyz",
        detail="Ready: the hot index holds every active tool, the stores are writable, no "
        "interrupted move is stuck.",
    ),
    library_op(
        "close",
        "public",
        "release the handle: the library's stores, or the client's connection (asks "
        "nothing of a server)",
    ),
)
"""The library's operations (``Sidecar``'s methods a shell offers)."""


CONSOLE_PAGES: tuple[tuple[str, str, str], ...] = (
    ("console", "GET /console", "the operator's console: its overview"),
    ("console_root", "GET /console/", "the operator's console: its overview"),
    ("console_css", "GET /console/static/console.css", "the console's stylesheet"),
    ("console_sign_in_page", "GET /console/sign-in", "the console's sign-in page"),
    ("console_sign_in", "POST /console/sign-in", "sign in to the console with an operator's token"),
    ("console_sign_out", "POST /console/sign-out", "end the console session"),
    ("console_overview", "GET /console/overview", "what came in and what it changed, over time"),
    ("console_rules", "GET /console/rules", "every rule, a page at a time"),
    ("console_rule", "GET /console/rules/{rule_id}", "one rule, its evidence and history"),
    (
        "console_rule_action",
        "POST /console/rules/{rule_id}/{action}",
        "lift, reinstate, confirm or retire a rule",
    ),
    ("console_tools", "GET /console/tools", "the catalog, cold tools, what an eviction would do"),
    (
        "console_tool",
        "GET /console/tools/{tool_id}",
        "one tool: its state, moves, restores, mandates, usage and rules",
    ),
    ("console_sources", "GET /console/sources", "every source and what it taught"),
    (
        "console_source",
        "GET /console/sources/{source}",
        "one source: its rules, forget with a preview",
    ),
    (
        "console_forget",
        "POST /console/sources/{source}/{step}",
        "preview, then confirm, forgetting a source",
    ),
    ("console_sessions", "GET /console/sessions", "the sessions learned from, a page at a time"),
    (
        "console_session",
        "GET /console/session",
        "one session: each call's verdict, each lookup's offer",
    ),
    ("console_review", "GET /console/review", "what waits for a person"),
    ("console_decide", "POST /console/approvals/{approval_id}/{decision}", "approve or deny"),
    ("console_appeal", "POST /console/appeals/{appeal_id}/{verdict}", "grant or uphold"),
)
"""The operator's console (:mod:`sidecar.shells.console`): each route, as name, route and
summary.  No bearer token at the gate: every page but sign-in needs the console's own
session of an operator (its cookie), and every form its CSRF token."""

SHELL: tuple[Operation, ...] = (
    shell_op("livez", "public", "liveness: the process answers", http="GET /livez"),
    shell_op(
        "version",
        "agent",
        "what runs, and the largest request body it takes (`max_body_bytes`: clients "
        "split their batches under it)",
        http="GET /version",
    ),
    shell_op(
        "metrics",
        "agent",
        "Prometheus metrics, labelled by route template; what untrusted tokens spent of "
        "their quotas",
        http="GET /metrics",
    ),
    shell_op(
        "traces",
        "agent",
        "OTLP/HTTP trace intake (protobuf or JSON): tool spans become sessions",
        http="POST /v1/traces",
    ),
    shell_op(
        "mcp_http",
        "agent",
        "the MCP tools over streamable HTTP, for loopback hosts and origins (served beside "
        "the API's routes)",
        http="POST /mcp",
    ),
    shell_op("openapi", "public", "the OpenAPI document", http="GET /openapi.json"),
    shell_op("swagger", "public", "the API's documentation (Swagger UI)", http="GET /docs"),
    shell_op("redoc", "public", "the API's documentation (ReDoc)", http="GET /redoc"),
    Operation(
        "docs_assets",
        "the documentation pages' scripts and styles, served from this server",
        "public",
        http=http_of("GET /docs/assets", prefix=True),
    ),
    shell_op("serve", "operator", "serve the HTTP API and MCP (streamable HTTP)", cli="serve"),
    shell_op(
        "mcp",
        "operator",
        "serve MCP over stdio (beside a running server, or with --url: through that server)",
        cli="mcp",
    ),
    shell_op(
        "gateway",
        "operator",
        "an MCP server in front of upstream MCP servers: curated tools/list, every "
        "tools/call checked against the failure memory, sessions reported with no code",
        cli="gateway",
    ),
    shell_op("demo", "public", "walk through the sediment fallacy and its prevention", cli="demo"),
    shell_op(
        "migrate",
        "operator",
        "create and upgrade the state's schema; or copy this home's local state and archive "
        "into shared stores",
        cli="migrate",
    ),
)
"""The operations of one shell alone: probes, documentation, serving, the console."""

SHELL += tuple(
    shell_op(name, "public", summary, http=route) for name, route, summary in CONSOLE_PAGES
)
OPERATIONS: tuple[Operation, ...] = LIBRARY + SHELL
BY_NAME: dict[str, Operation] = {op.name: op for op in OPERATIONS}


def on_route(method: str, path: str) -> list[Operation]:
    """The operations a route serves (``POST /v1/check`` serves two)."""
    return [op for op in OPERATIONS if op.http and (op.http.method, op.http.path) == (method, path)]


def of_command(words: str) -> list[Operation]:
    """The operations a CLI command calls (``evict`` calls ``evict`` or ``recover``)."""
    return [op for op in OPERATIONS if op.cli == words]


def of_tool(name: str) -> list[Operation]:
    """The operations an MCP tool calls."""
    return [op for op in OPERATIONS if op.mcp == name]


def public_paths() -> tuple[frozenset[str], tuple[str, ...]]:
    """The paths served without a token: exact paths, and folders (every path under
    them)."""
    public = [op.http for op in OPERATIONS if op.access == "public" and op.http is not None]
    return (
        frozenset(h.path for h in public if not h.prefix),
        tuple(h.path + "/" for h in public if h.prefix),
    )


def admits(access: Access, role: str | None) -> bool:
    """Whether a caller holding ``role`` (``None``: no token) may call what needs
    ``access``."""
    if access == "public":
        return True
    return role is not None and (access == "agent" or role == "operator")


def strictest(ops: Iterable[Operation]) -> Access:
    """The role a surface serving ``ops`` needs: the strictest of theirs."""
    return max((op.access for op in ops), key=ACCESS.index)


def joined(ops: Sequence[Operation], part: str = "summary") -> str:
    """The summaries (or details) of ``ops``, one sentence after another."""
    texts = [str(getattr(op, part)) for op in ops if getattr(op, part)]
    return "; ".join(texts) if part == "summary" else " ".join(texts)


def command_help(words: str) -> str:
    """A CLI command's help: its operations' summaries, and the role when an operator's
    (a command sent to a server with an agent's token is refused, exit 12)."""
    ops = of_command(words)
    if not ops:
        raise KeyError(f"no operation declares the command {words!r}")
    role = " (operator)" if strictest(ops) == "operator" and ops[0].method else ""
    return joined(ops) + role


def tool_description(name: str) -> str:
    """An MCP tool's description: each operation's summary and detail, as sentences."""
    ops = of_tool(name)
    if not ops:
        raise KeyError(f"no operation declares the MCP tool {name!r}")
    role = "Operators only. " if strictest(ops) == "operator" else ""
    sentences = [_sentence(op.summary) + (f" {op.detail}" if op.detail else "") for op in ops]
    return role + " ".join(sentences)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


# ---- the docs' table ------------------------------------------------------------------
BEGIN = "<!-- operations: begin (python -m sidecar.shells.operations --markdown) -->"
END = "<!-- operations: end -->"


def markdown() -> str:
    """The table of every operation, as ``docs/service.md`` holds it between
    :data:`BEGIN` and :data:`END`."""
    lines = [
        "| operation | HTTP | CLI | MCP tool | role | does |",
        "|---|---|---|---|---|---|",
    ]
    for op in OPERATIONS:
        name = f"`{op.method}()`" if op.method else op.name
        if op.client:
            name += " ¹"
        cells = [
            name,
            _code(str(op.http) if op.http else None),
            _code(f"sidecar {op.cli}" if op.cli else None),
            _code(op.mcp),
            op.access,
            op.summary.replace("|", "\\|"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "¹ `Sidecar`'s method, and `RemoteSidecar`'s with the same parameters and result.",
    ]
    return "\n".join([BEGIN, *lines, END])


def _code(text: str | None) -> str:
    return f"`{text}`" if text else ""


def updated(text: str) -> str:
    """``text`` (a docs page) with the table between :data:`BEGIN` and :data:`END` as
    :func:`markdown` prints it now."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no table to update: the page needs the lines {BEGIN} and {END}")
    return text[:start] + markdown() + text[end + len(END) :]


USAGE = "usage: python -m sidecar.shells.operations --markdown | --update PAGE.md"


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args == ["--markdown"]:
        print(markdown())
        return 0
    if len(args) == 2 and args[0] == "--update":
        from pathlib import Path

        page = Path(args[1])
        page.write_text(updated(page.read_text()))
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
