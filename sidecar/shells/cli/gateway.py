"""``sidecar gateway``: an MCP gateway in front of upstream MCP servers, with the memory
of this home, or of the server that owns it (or the one ``--url`` names)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar.errors import EXIT_OK
from sidecar.shells.cli.commands import backend, home_of
from sidecar.shells.cli.output import status


def gateway(args: argparse.Namespace) -> int:
    """An MCP gateway in front of upstream MCP servers, with this home's memory (or,
    beside a server that owns the home, or with --url, that server's)."""
    import anyio

    from sidecar.agents.gateway.guard.library import LibraryBackend
    from sidecar.agents.gateway.proxy.serving import serve_on
    from sidecar.shells.api.serve import bind, token_for

    home = home_of(args)
    with backend(args, write=True, create=True) as b:
        through = getattr(b, "url", None)
        gw = _build_gateway(args, LibraryBackend(b), home, token_for)
        if args.stdio:
            if through:
                status(f"sidecar gateway: serving stdio, its memory the sidecar at {through}")
            gw.run_stdio()
            return EXIT_OK
        sock = bind(args.host, args.port)

        def announce(url: str) -> None:
            where = "no token" if gw.token is None else f"token: {home / 'token'} or $SIDECAR_TOKEN"
            memory = f"; memory: the sidecar at {through}" if through else ""
            status(f"sidecar gateway serving {url} ({where}{memory})")

        try:
            anyio.run(serve_on, gw, sock, announce)
        finally:
            sock.close()
    return EXIT_OK


def add_arguments(gw: argparse.ArgumentParser, port: Callable[[str], int]) -> None:
    """``sidecar gateway``'s arguments (``port``: the parser's port type)."""
    gw.add_argument(
        "upstream",
        nargs="+",
        metavar="NAME=URL|NAME=COMMAND",
        help="an upstream: NAME=http://host:port/mcp (streamable HTTP) or NAME='COMMAND "
        "ARGS...' (stdio); tool names are prefixed NAME_ only when two upstreams clash",
    )
    gw.add_argument(
        "--expose",
        choices=["all", "search"],
        default="all",
        help="all: the upstreams' tools (evicted ones hidden); search: search_tools and "
        "call_tool only (plus --pin tools)",
    )
    gw.add_argument("--pin", action="append", default=[], metavar="NAME", help="always listed")
    gw.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="S",
        help="report a session after this many idle seconds (default $SIDECAR_SESSION_IDLE_S, 300)",
    )
    gw.add_argument(
        "--call-timeout",
        type=float,
        default=None,
        metavar="S",
        help="answer a call the upstream has not answered in S seconds with an error "
        "(default $SIDECAR_GATEWAY_CALL_TIMEOUT, 30; 0: no limit)",
    )
    gw.add_argument(
        "--warning-text",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a warned call's result carries the warning as a text block the model reads, "
        "besides _meta['sidecar/warnings'] (default $SIDECAR_GATEWAY_WARNING_TEXT, true; "
        "--no-warning-text: _meta only)",
    )
    gw.add_argument(
        "--json-response",
        action="store_true",
        help="answer each request with one JSON body instead of an event stream (faster, "
        "but relays no progress, log message, sampling or elicitation during a request)",
    )
    gw.add_argument(
        "--no-token",
        action="store_true",
        help="serve HTTP without the bearer token (loopback only; for clients that cannot "
        "send one)",
    )
    gw.add_argument("--stdio", action="store_true", help="serve MCP over stdio instead of HTTP")
    gw.add_argument("--host", default="127.0.0.1")
    gw.add_argument("--port", type=port, default=8766, help="port (default 8766; 0: any)")


def _build_gateway(args: argparse.Namespace, memory: Any, home: Path, token_for: Any) -> Any:
    from sidecar.agents.gateway import build_gateway
    from sidecar.agents.gateway.guard.approval import (
        ApprovalPolicy,
        parse_triggers,
        tool_names,
    )
    from sidecar.agents.gateway.guard.contest import ContestPolicy
    from sidecar.agents.sessions import session_limits
    from sidecar.settings import Settings
    from sidecar.trust.principals import Principals

    settings = Settings.load(home=home)
    timeout = args.call_timeout if args.call_timeout is not None else settings.gateway_call_timeout
    token = None if args.stdio or args.no_token else token_for(home)
    # read with the home's token, so that an entry holding it stops the gateway here
    # rather than letting that entry's holder in as the home itself
    principals = (
        None
        if args.stdio or args.no_token
        else Principals.load(settings.tokens_path, token).named()
    )
    text = args.warning_text if args.warning_text is not None else settings.gateway_warning_text
    return build_gateway(
        memory,
        args.upstream,
        expose=args.expose,
        pins=args.pin,
        sessions=session_limits(settings, report_clean=True),
        idle_s=args.idle_timeout,
        token=token,
        principals=principals,
        call_timeout_s=timeout or None,
        json_response=args.json_response,
        warning_text=text,
        warn_risk=settings.gateway_warn_risk or None,
        link_window_s=settings.gateway_link_window,
        approval=ApprovalPolicy(
            parse_triggers(settings.gateway_approval),
            tool_names(settings.gateway_approval_tools),
            settings.gateway_approval_wait,
        ),
        contest=ContestPolicy(
            rate=settings.gateway_contest_rate,
            budget=settings.gateway_contest_budget,
            scope=settings.gateway_contest_scope,
        ),
    )
