"""The ``sidecar`` command line: one sub-parser per command, bound to its function in
:mod:`sidecar.shells.cli.commands`."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

from sidecar import __version__
from sidecar.limits import CHECK_MODES, MANDATE_STATUSES, MAX_BODY_BYTES, MAX_K
from sidecar.shells.cli import commands as cmd
from sidecar.shells.cli import gateway as gateway_cli
from sidecar.shells.cli import migrate as migrate_cli
from sidecar.shells.cli import review as review_cli
from sidecar.shells.operations import command_help


# ---- argument types -------------------------------------------------------------------
def csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


FORGET_SOURCE = (
    "a token's name (all its evidence), one of its routes ('otlp:<name>', 'gateway:<name>'), "
    "'gateway', 'otlp' or 'local'"
)


def context_pair(value: str) -> tuple[str, Any]:
    """``key=value``; the value is read as JSON when it parses (a number, a boolean),
    else as a string.  A number that is not finite is refused."""
    key, sep, raw = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {value!r}")
    try:
        parsed = json.loads(raw)
        if isinstance(parsed, dict | list):
            parsed = raw
    except json.JSONDecodeError:
        parsed = raw
    if isinstance(parsed, float) and not math.isfinite(parsed):
        raise argparse.ArgumentTypeError(f"{key.strip()}: {raw!r} is not a finite number")
    return key.strip(), parsed


def json_object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def k_int(raw: str) -> int:
    value = positive_int(raw)
    if value > MAX_K:
        raise argparse.ArgumentTypeError(f"at most {MAX_K}, got {value}")
    return value


def port_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {raw!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, got {value}")
    return value


# ---- the parser -----------------------------------------------------------------------
def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--home",
        default=argparse.SUPPRESS,
        help="sidecar home (default: $SIDECAR_HOME, else ./.sidecar)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    common.add_argument(
        "--chroma-url",
        default=argparse.SUPPRESS,
        help="use the Chroma server at this http://host:port instead of the embedded store "
        "(default: $SIDECAR_CHROMA_URL)",
    )
    common.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help="talk to a running sidecar (default: $SIDECAR_URL, else the server that owns "
        "the home; token from $SIDECAR_TOKEN or the home's token file)",
    )
    return common


Command = Callable[..., argparse.ArgumentParser]
"""``command(name, help, parent=sub)``: a sub-parser with the common options; ``help``
``None``: the command's words are ``name`` after its groups', and its help is the one
:mod:`sidecar.shells.operations` declares (``note``: what the command's own ``--help``
adds, such as its exit codes)."""


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="Failure memory for agent tool retrieval: an active tool index, an "
        "archive of abandoned tool chains, and constraint-aware lookup.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        name: str, help: str | None = None, parent: Any = sub, note: str = "", **kw: Any
    ) -> argparse.ArgumentParser:
        if help is None:
            help = command_help(_words(parent, name))
            kw["description"] = f"{help}: {note}" if note else help
        p: argparse.ArgumentParser = parent.add_parser(name, help=help, parents=[common], **kw)
        return p

    tool_commands(command)
    lookup_commands(command)
    archive_commands(command)
    eviction_commands(command)
    review_cli.add_commands(command)
    serving_commands(command)
    return parser


def _words(parent: Any, name: str) -> str:
    """A sub-parser's words after ``sidecar``: its groups' (the parent parser's ``prog``
    is ``sidecar tools ...``) and its own."""
    groups = parent._prog_prefix.split()[1:]
    return " ".join([w for w in groups if not w.startswith("-")] + [name])


def tool_commands(command: Command) -> None:
    """The commands of the tool index."""
    tools = command("tools", "manage the active tool index")
    tools_sub = tools.add_subparsers(dest="tools_command", metavar="ACTION", required=True)
    add = command("add", parent=tools_sub, note="from files")
    add.add_argument("files", nargs="+", metavar="FILE")
    add.set_defaults(func=cmd.tools_add)
    command("list", parent=tools_sub).set_defaults(func=cmd.tools_list)
    history = command("history", parent=tools_sub)
    history.add_argument("tool_id", metavar="ID")
    history.set_defaults(func=cmd.tools_history)


def lookup_commands(command: Command) -> None:
    """The commands of lookups, checks and reports."""
    search_command(command)
    report_command(command)
    check_command(command)


def search_command(command: Command) -> None:
    """``search``: a lookup, after the tools already executed."""
    search = command("search")
    search.add_argument("query")
    search.add_argument("-k", type=k_int, default=5, help="number of tools (default 5)")
    search.add_argument(
        "--after", type=csv, default=[], metavar="A,B", help="tools already executed, in order"
    )
    search.add_argument(
        "--context",
        type=context_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="runtime context for conditions, e.g. payload_bytes=7200000 (repeatable)",
    )
    search.add_argument(
        "--steps",
        metavar="FILE",
        help="the session so far (JSON: a list of {tool, arguments, output, error}, or a "
        "report with `steps`; - for stdin): stands for --after and adds warnings",
    )
    search.add_argument("--task-input", metavar="TEXT", help="what the agent was asked")
    search.set_defaults(func=cmd.search)


def report_command(command: Command) -> None:
    """``report``: sessions or chains, as JSON lines."""
    report = command(
        "report",
        note="one JSON object per line, from FILE or - for stdin: one summary line "
        "(archived, recorded, not archived, rejected), a progress bar on a terminal",
    )
    report.add_argument("file", metavar="FILE|-")
    report.add_argument(
        "--verbose", action="store_true", help="one line per report (--json: one JSON object)"
    )
    report.set_defaults(func=cmd.report)


def check_command(command: Command) -> None:
    """``check``: a plan against the archive, or a call before it is made."""
    check = command(
        "check",
        note="a plan as A,B,C, or a call as --steps FILE [--next TOOL] [--args JSON] (exit "
        "0 allow, 4 warn, 3 block)",
    )
    check.add_argument("plan", type=csv, metavar="A,B,C", nargs="?")
    check.add_argument("--mode", choices=CHECK_MODES, default="sequence")
    check.add_argument(
        "--context", type=context_pair, action="append", default=[], metavar="KEY=VALUE"
    )
    check.add_argument(
        "--steps",
        metavar="FILE",
        help="the session so far (as for search); its `next`, if it has one, is the call to check",
    )
    check.add_argument(
        "--next", metavar="TOOL", help="the call about to be made (default: the file's `next`)"
    )
    check.add_argument(
        "--args",
        type=json_object,
        default=None,
        metavar="JSON",
        help="its arguments (default: the file's `next` arguments for the same tool, else {})",
    )
    check.add_argument("--task-input", metavar="TEXT", help="what the agent was asked")
    check.set_defaults(func=cmd.check)


def archive_commands(command: Command) -> None:
    """The commands of the archive and its constraints."""
    audit = command("audit")
    audit.add_argument("pointer", metavar="POINTER")
    audit.set_defaults(func=cmd.audit)

    arch = command("archive", "the abandoned chain archive")
    arch_sub = arch.add_subparsers(dest="archive_command", metavar="ACTION", required=True)
    command("digest", parent=arch_sub).set_defaults(func=cmd.archive_digest)
    st = command("status", parent=arch_sub)
    st.add_argument("--verify", action="store_true", help="checksum every cold file")
    st.set_defaults(func=cmd.archive_status)
    maint = command("maintain", parent=arch_sub, note="one replica at a time")
    maint.add_argument(
        "--retention-hours",
        type=float,
        default=None,
        help="delete files no commit names only once this old (default 168, at least 1)",
    )
    maint.set_defaults(func=cmd.archive_maintain)


def eviction_commands(command: Command) -> None:
    """The commands of eviction, restores and revocations."""
    evict_command(command)
    restore_command(command)
    revocations_command(command)
    constraints_commands(command)
    forget_command(command)


def evict_command(command: Command) -> None:
    """``evict``: dead-end prefix tools to cold storage."""
    evict = command("evict")
    evict.add_argument("--dry-run", action="store_true", help="decide and report; change nothing")
    evict.add_argument(
        "--recover", action="store_true", help="only finish moves a crash interrupted"
    )
    evict.add_argument(
        "--min-chains",
        type=positive_int,
        metavar="N",
        help="dead-end sessions a tool must drive to be evicted, for this run "
        "(default: SIDECAR_EVICT_MIN_CHAINS, 2)",
    )
    evict.add_argument("--verbose", action="store_true", help="name every evicted and kept tool")
    evict.set_defaults(func=cmd.evict)


def restore_command(command: Command) -> None:
    """``restore``: an evicted tool back from cold storage."""
    restore = command("restore")
    restore.add_argument("tool_id", metavar="TOOL_ID")
    restore.add_argument("--reason", required=True, help="what was fixed (kept for audit)")
    restore.add_argument(
        "--lift-constraints",
        action="store_true",
        help="also stop enforcing the chains that drove its eviction",
    )
    restore.set_defaults(func=cmd.restore)


def revocations_command(command: Command) -> None:
    """``revocations``: the credential revocation ledger, and ``revocations run``."""
    rev = command("revocations")
    rev.add_argument("--status", choices=MANDATE_STATUSES)
    rev.set_defaults(func=cmd.revocations)
    rev_sub = rev.add_subparsers(dest="revocations_command", metavar="ACTION")
    command("run", parent=rev_sub).set_defaults(func=cmd.revocations_run)


def constraints_commands(command: Command) -> None:
    """``constraints``: list, show, lift, reinstate, confirm and retire the rules."""
    cons = command("constraints", "archived negative constraints")
    cons_sub = cons.add_subparsers(dest="constraints_command", metavar="ACTION", required=True)
    cons_list = command("list", parent=cons_sub)
    cons_list.add_argument("--all", action="store_true", help="include lifted ones")
    cons_list.set_defaults(func=cmd.constraints_list)
    show = command("show", parent=cons_sub)
    show.add_argument("constraint_id", metavar="ID")
    show.set_defaults(func=cmd.constraints_show)
    lift = command("lift", parent=cons_sub)
    lift.add_argument("constraint_id", metavar="ID")
    lift.add_argument("--reason", required=True, help="why (kept for audit)")
    lift.add_argument(
        "--reinstate", action="store_true", help="enforce it again instead (= reinstate)"
    )
    lift.set_defaults(func=cmd.constraints_lift)
    reinstate = command("reinstate", parent=cons_sub)
    reinstate.add_argument("constraint_id", metavar="ID")
    reinstate.add_argument("--reason", required=True, help="why (kept for audit)")
    reinstate.set_defaults(func=cmd.constraints_reinstate)
    for name, func in (("confirm", cmd.constraints_confirm), ("retire", cmd.constraints_retire)):
        judged = command(name, parent=cons_sub)
        judged.add_argument("constraint_id", metavar="ID")
        judged.add_argument("--reason", required=True, help="why (kept for audit)")
        judged.set_defaults(func=func)


def forget_command(command: Command) -> None:
    """``forget``: what one source reported, removed (operator)."""
    forget = command("forget")
    forget.add_argument("--source", required=True, help=FORGET_SOURCE)
    forget.add_argument(
        "--since",
        type=since_time,
        default=None,
        help="only what arrived since: a Unix time or an ISO date/time (UTC if no zone)",
    )
    forget.set_defaults(func=cmd.forget)


def since_time(text: str) -> float:
    """A Unix time, or an ISO 8601 date or date and time (UTC unless it names a zone)."""
    from datetime import UTC, datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a Unix time or an ISO date/time, got {text!r}"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def serving_commands(command: Command) -> None:
    """The commands of serving and the walk-through."""
    serve_command(command)
    command("mcp").set_defaults(func=cmd.mcp)
    gateway_command(command)
    command("demo").set_defaults(func=cmd.demo)
    migrate_command(command)


def serve_command(command: Command) -> None:
    """``serve``: the HTTP API and MCP over streamable HTTP."""
    serve = command("serve")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument(
        "--port", type=port_int, default=8765, help="port (default 8765; 0: any free port)"
    )
    serve.add_argument(
        "--max-body",
        type=positive_int,
        default=MAX_BODY_BYTES,
        help="largest request body in bytes",
    )
    serve.add_argument(
        "--demo-if-empty", action="store_true", help="load the demo catalog into an empty home"
    )
    serve.set_defaults(func=cmd.serve)


def gateway_command(command: Command) -> None:
    """``gateway``: an MCP server in front of upstream MCP servers."""
    gw = command("gateway")
    gateway_cli.add_arguments(gw, port_int)
    gw.set_defaults(func=gateway_cli.gateway)


def migrate_command(command: Command) -> None:
    """``migrate``: the state's schema brought to this version, or the home's local state
    and archive copied to shared stores."""
    migrate = command(
        "migrate",
        note="the schema one run at a time (what replicas with SIDECAR_MIGRATE=never wait "
        "for); with --to-database or --to-cold: this home's local state into a PostgreSQL "
        "database and its archive into a shared cold store (both empty)",
    )
    migrate.add_argument(
        "--to-database",
        metavar="URL",
        help="postgresql://... of the database that will hold the state from now on",
    )
    migrate.add_argument(
        "--to-cold",
        metavar="URL",
        help="s3://bucket/prefix or delta+file:///folder that will hold the archive "
        "from now on (S3 endpoint and credentials from the AWS_* variables)",
    )
    migrate.set_defaults(func=migrate_cli.migrate)
