"""``sidecar approvals`` and ``sidecar appeals``: what waits for a person (operator)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sidecar.errors import EXIT_OK
from sidecar.shells.cli import commands as cmd
from sidecar.shells.cli.output import emit, short
from sidecar.storage.review import APPEAL_STATUSES, APPROVAL_STATUSES

Command = Callable[..., argparse.ArgumentParser]


def add_commands(command: Command) -> None:
    approvals = command("approvals", "calls held for an operator's approval")
    app_sub = approvals.add_subparsers(dest="approvals_command", metavar="ACTION", required=True)
    listing = command("list", parent=app_sub)
    listing.add_argument("--status", choices=APPROVAL_STATUSES)
    listing.set_defaults(func=approvals_list)
    approve = command("approve", parent=app_sub)
    approve.add_argument("approval_id", metavar="ID")
    approve.add_argument(
        "--for",
        dest="for_s",
        type=float,
        metavar="S",
        help="approve every such call for S seconds (default: this one call)",
    )
    approve.set_defaults(func=approvals_approve)
    deny = command("deny", parent=app_sub)
    deny.add_argument("approval_id", metavar="ID")
    deny.set_defaults(func=approvals_deny)

    appeals = command("appeals", "agents' appeals against blocks")
    apl_sub = appeals.add_subparsers(dest="appeals_command", metavar="ACTION", required=True)
    apl_list = command("list", parent=apl_sub)
    apl_list.add_argument("--status", choices=APPEAL_STATUSES)
    apl_list.set_defaults(func=appeals_list)
    close = command("close", parent=apl_sub)
    close.add_argument("appeal_id", metavar="ID")
    verdict = close.add_mutually_exclusive_group(required=True)
    verdict.add_argument(
        "--granted", action="store_true", help="the agent was right (lift the rule to act on it)"
    )
    verdict.add_argument("--upheld", action="store_true", help="the block stays")
    close.set_defaults(func=appeals_close)


def approvals_list(args: argparse.Namespace) -> int:
    with cmd.backend(args) as b:
        rows = b.approvals(args.status)

    def human() -> str:
        if not rows:
            return "no approvals"
        return "\n".join(
            f"{a.status:<8} {a.approval_id}  {a.tool}({short(json.dumps(a.arguments), 60)})  "
            f"for {a.source or 'local'}" + (f"  {short(a.why, 60)}" if a.why else "")
            for a in rows
        )

    emit(args, {"approvals": rows}, human)
    return EXIT_OK


def _decided(args: argparse.Namespace, out: Any) -> int:
    until = ""
    if out.until:
        at = datetime.fromtimestamp(out.until, UTC)
        until = f" until {at:%Y-%m-%d %H:%M:%S} UTC"
    emit(args, out, lambda: f"{out.approval_id}: {out.status}{until} ({out.tool})")
    return EXIT_OK


def approvals_approve(args: argparse.Namespace) -> int:
    with cmd.backend(args, write=True) as b:
        out = b.approve(args.approval_id, args.for_s)
    return _decided(args, out)


def approvals_deny(args: argparse.Namespace) -> int:
    with cmd.backend(args, write=True) as b:
        out = b.deny(args.approval_id)
    return _decided(args, out)


def appeals_list(args: argparse.Namespace) -> int:
    with cmd.backend(args) as b:
        rows = b.appeals(args.status)

    def human() -> str:
        if not rows:
            return "no appeals"
        return "\n".join(
            f"{a.status:<7} {a.appeal_id}  {a.tool}  by {a.source}  {short(a.reason, 70)}"
            for a in rows
        )

    emit(args, {"appeals": rows}, human)
    return EXIT_OK


def appeals_close(args: argparse.Namespace) -> int:
    with cmd.backend(args, write=True) as b:
        out = b.close_appeal(args.appeal_id, bool(args.granted))
    emit(args, out, lambda: f"{out.appeal_id}: {out.status}")
    return EXIT_OK
