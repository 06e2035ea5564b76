"""The ``sidecar`` commands: each opens the library (here, or the server at ``--url``),
calls one method and formats its answer."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar.errors import EXIT_BLOCKED, EXIT_OK, EXIT_REJECTED, EXIT_WARNED, UsageError
from sidecar.shells.cli.inputs import BadLine, StepsFile, batches, read_steps, report_lines
from sidecar.shells.cli.output import bar, emit, short, status, when
from sidecar.trust.neutralize import as_data
from sidecar.trust.redact import redact
from sidecar.wire import dump

if TYPE_CHECKING:
    from sidecar.core import Sidecar
    from sidecar.shells.client import RemoteSidecar

    Backend = Sidecar | RemoteSidecar


def home_of(args: argparse.Namespace) -> Path:
    if getattr(args, "home", None):
        return Path(args.home)
    return Path(os.environ.get("SIDECAR_HOME") or ".sidecar")


def open_local(args: argparse.Namespace, read_only: bool = False, create: bool = True) -> Sidecar:
    """The library on the home; ``create``: a write may make the home where there is
    none (a read never does)."""
    from sidecar.app.home import require_home
    from sidecar.core import Sidecar
    from sidecar.settings import Settings

    settings = Settings.load(home=home_of(args), chroma_url=args.chroma_url)
    if not create:
        require_home(settings)
    return Sidecar(settings, read_only=read_only)


@contextlib.contextmanager
def backend(
    args: argparse.Namespace, write: bool = False, create: bool = False
) -> Iterator[Backend]:
    """The sidecar at ``--url`` (or ``$SIDECAR_URL``); else the server that owns the
    home, if one runs; else the library on the home, opened read-only for reads.

    ``create``: the command may make the home where there is none (it brings tools or
    reports, or serves: :data:`~sidecar.errors.HOME_CREATORS`).  Any other command on a
    path that holds no home fails and makes nothing, whether it reads or writes: a
    mistyped ``--home`` given to ``evict --dry-run`` must not answer from an empty home."""
    from sidecar.app.home import server_url

    home = home_of(args)
    url = args.url or os.environ.get("SIDECAR_URL") or server_url(home)
    b: Backend
    if url:
        from sidecar.shells.client import RemoteSidecar

        token, source = _token(home)
        b = RemoteSidecar(url, token, token_source=source)
    else:
        b = open_local(args, read_only=not write, create=create)
    try:
        yield b
    finally:
        b.close()


def _token(home: Path) -> tuple[str | None, str]:
    """The token to send and where it came from (where none was found, when none)."""
    env = os.environ.get("SIDECAR_TOKEN")
    if env:
        return env, "$SIDECAR_TOKEN"
    path = home / "token"
    if path.exists():
        token = path.read_text().strip() or None
        return token, str(path)
    return None, f"$SIDECAR_TOKEN or {path}"


# ---- tools and lookup -----------------------------------------------------------------
def tools_add(args: argparse.Namespace) -> int:
    from sidecar.tools.catalog import load_tool_file

    tools = [t for path in args.files for t in load_tool_file(path)]
    with backend(args, write=True, create=True) as b:
        out = b.add_tools(tools, progress=None if args.json else bar("tools", len(tools)))
    emit(args, out, lambda: f"{len(out.added)} tool(s) added, {len(out.updated)} updated")
    return EXIT_OK


def tools_list(args: argparse.Namespace) -> int:
    with backend(args) as b:
        tools = b.list_tools()

    def human() -> str:
        if not tools:
            return "no active tools"
        width = max(len(t.tool_id) for t in tools)
        lines = [f"{'TOOL':<{width}}  {'TYPE':<12}  DESCRIPTION"]
        lines += [
            f"{t.tool_id:<{width}}  {t.tool_type:<12}  {short(t.description, 70)}" for t in tools
        ]
        return "\n".join(lines)

    emit(args, {"tools": tools}, human)
    return EXIT_OK


def tools_history(args: argparse.Namespace) -> int:
    with backend(args) as b:
        h = b.tool_history(args.tool_id)

    def human() -> str:
        where = f" since {when(h.evicted_at)}, move {h.move_id}, {h.pointer}" if h.pointer else ""
        lines = [f"{h.tool_id}: {h.state}{where}"]
        if h.tool is not None:
            lines.append(f"  {h.tool.tool_type}  {short(h.tool.description, 90)}")
        lines += [f"MOVE {m.move_id}  {m.status:<8}  {when(m.created_at)}" for m in h.moves]
        lines += [f"RESTORE {r.move_id}  {when(r.restored_at)}  {r.reason}" for r in h.restores]
        lines += [f"MANDATE {m.ref}  {m.status}  attempts={m.attempts}" for m in h.mandates]
        lines += [f"USAGE {u.source}  {u.outcome}  sessions={u.sessions}" for u in h.usage]
        lines += [f"RULE {v.chain_id}  {v.kind}  {v.status}" for v in h.rules]
        return "\n".join(lines)

    emit(args, h, human)
    return EXIT_OK


def search(args: argparse.Namespace) -> int:
    session = read_steps(args.steps)
    with backend(args) as b:
        out = b.search(
            args.query,
            args.k,
            args.after,
            dict(args.context),
            steps=session.steps,
            task_input=args.task_input or session.task_input,
        )

    def human() -> str:
        lines = []
        for n, hit in enumerate(out.hits, 1):
            lines.append(f"{n:>2}. {hit.tool_id}  ({hit.score:.3f})  {short(hit.description, 60)}")
            lines += [f"      ! {w}" for w in hit.warnings]
            if hit.usage:
                lines.append(f"      + raised by {hit.usage} completed session(s) like this one")
        if not out.hits:
            lines.append("no active tools match")
        elif out.abstained:
            lines.insert(0, "abstained: no active tool fits well; the best candidates:")
        for w in out.withheld:
            lines.append(f"withheld {w.tool_id}: {w.rule} [{w.pointer}]")
        return "\n".join(lines)

    emit(args, out, human)
    return EXIT_OK


def check(args: argparse.Namespace) -> int:
    if args.next is not None or args.steps is not None:
        if args.plan is not None:
            raise UsageError("give a plan (A,B,C), or a call (--steps FILE, --next), not both")
        return check_call(args)
    if args.args is not None:
        raise UsageError("--args goes with --next TOOL, or with --steps FILE")
    if args.plan is None:
        raise UsageError("give a plan (A,B,C), or --steps FILE [--next TOOL] for one call")
    with backend(args) as b:
        out = b.check(args.plan, args.mode, dict(args.context))

    def human() -> str:
        if out.safe:
            return f"safe: {' > '.join(args.plan)}"
        lines = [f"BLOCKED: {' > '.join(args.plan)}"]
        for c in out.collisions:
            if args.mode == "prefix":
                lines.append(f"  {c.reason}")
            else:
                lines.append(f"  {'>'.join(c.matched)}")
                lines.append(f"    rule: {c.rule}")
                lines.append(f"    expected failure: {c.expected_failure}")
                lines.append(f"    why: {c.reason}")
            lines.append(f"    audit: {c.pointer}")
        return "\n".join(lines)

    emit(args, out, human)
    return EXIT_OK if out.safe else EXIT_BLOCKED


def next_call(args: argparse.Namespace, session: StepsFile) -> tuple[str, dict[str, Any]]:
    """The call to check: ``--next`` and ``--args`` where given, else the file's
    ``next``.  ``--next`` alone takes the file's arguments when the file's ``next`` is
    the same tool, else none."""
    if args.next is not None:
        if args.args is not None:
            return args.next, args.args
        same = session.next is not None and session.next[0] == args.next
        return args.next, session.next[1] if session.next is not None and same else {}
    if session.next is None:
        raise UsageError(
            f"{args.steps} has no `next` (the call to check): give --next TOOL [--args JSON]"
        )
    tool, arguments = session.next
    return tool, args.args if args.args is not None else arguments


def check_call(args: argparse.Namespace) -> int:
    session = read_steps(args.steps)
    tool, arguments = next_call(args, session)
    task = args.task_input or session.task_input
    with backend(args) as b:
        out = b.check_call(session.steps or [], tool, arguments, task, dict(args.context))

    def human() -> str:
        # the call is shown as the check saw it: redacted
        shown_args = json.dumps(redact(arguments), ensure_ascii=False)
        lines = [f"{out.decision.upper()}: {tool}({shown_args})"]
        for r in out.reasons:
            lines.append(f"  {r.level}: {r.explanation}")
            if r.quoted:
                lines.append(f"    {as_data(r.quoted)}")
            if r.evidence:
                lines.append(f"    because: {r.evidence}")
            if r.pointer:
                lines.append(f"    audit: {r.pointer}")
        return "\n".join(lines)

    emit(args, out, human)
    return {"allow": EXIT_OK, "warn": EXIT_WARNED, "block": EXIT_BLOCKED}[out.decision]


# ---- intake ---------------------------------------------------------------------------
REJECTED_SHOWN = 10
"""Rejected lines a report's summary names one by one, without --verbose."""


def report(args: argparse.Namespace) -> int:
    """Every line reported; one line per report with --json or --verbose, else a
    progress bar on a terminal and one summary line (after the first rejected lines)."""
    total, lines = report_lines(args.file)
    tally: Counter[str] = Counter()
    rejected: list[str] = []
    quiet = not (args.json or args.verbose)
    show = bar("reports", total) if quiet and total is not None else None
    with backend(args, write=True, create=True) as b:
        for batch in batches(lines):
            good = [data for _, data in batch if not isinstance(data, BadLine)]
            progress = None if show is None else _offset(show, sum(tally.values()))
            answers = iter(b.report_many(good, progress=progress) if good else [])
            for lineno, data in batch:
                if isinstance(data, BadLine):
                    reason = f"line {lineno}: not JSON ({data.msg})"
                    out: dict[str, Any] = {"status": "rejected", "reason": reason}
                else:
                    out = next(answers).to_dict()
                tally[out["status"]] += 1
                if quiet:
                    if out["status"] == "rejected" and len(rejected) < REJECTED_SHOWN:
                        rejected.append(_human_intake(lineno, out))
                    continue
                emit(args, out, functools.partial(_human_intake, lineno, out))
            sys.stdout.flush()
            if show is not None:
                show(sum(tally.values()))
    if not args.json:
        for line in rejected:
            print(line)
        if tally["rejected"] > len(rejected) and quiet:
            print(f"… and {tally['rejected'] - len(rejected)} more rejected (--verbose or --json)")
        print(report_summary(tally))
    return EXIT_REJECTED if tally["rejected"] else EXIT_OK


def _offset(show: Callable[[int], None], before: int) -> Callable[[int], None]:
    """A batch's progress (reports done in it) as the whole file's."""
    return lambda done: show(before + done)


def report_summary(tally: Counter[str]) -> str:
    counts = ", ".join(
        f"{tally[status]} {status.replace('_', ' ')}"
        for status in ("archived", "recorded", "not_archived", "rejected")
    )
    return f"{sum(tally.values())} report(s): {counts}"


def _human_intake(lineno: int, out: dict[str, Any]) -> str:
    parts = [f"line {lineno}: {out['status']}"]
    if "pointer" in out:
        parts.append(out["pointer"])
    if "reason" in out:
        parts.append(f"- {out['reason']}")
    return " ".join(parts)


# ---- archive ----------------------------------------------------------------------------
def audit(args: argparse.Namespace) -> int:
    with backend(args) as b:
        record = b.audit(args.pointer)
    emit(args, record, lambda: json.dumps(record.to_dict(), indent=2, ensure_ascii=False))
    return EXIT_OK


def archive_digest(args: argparse.Namespace) -> int:
    with backend(args) as b:
        out = b.digest()

    def human() -> str:
        note = f" ({out.unreadable_chains} chain(s) unreadable)" if out.unreadable_chains else ""
        return f"{out.digest}{note}"

    emit(args, out, human)
    return EXIT_OK


def archive_maintain(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        out = b.maintain_archive(args.retention_hours)

    def human() -> str:
        if out.backend == "parquet":
            return "nothing to maintain: a Parquet folder's files are never rewritten"
        return "\n".join(
            f"{s.table} {s.step}: +{s.files_added} -{s.files_removed} file(s)"
            + ("" if s.version is None else f", version {s.version}")
            for s in out.steps
        )

    emit(args, out, human)
    return EXIT_OK


def archive_status(args: argparse.Namespace) -> int:
    with backend(args) as b:
        st = b.status(args.verify)

    def human() -> str:
        enforced = st.active_constraints + st.call_conditions
        lines = [
            f"active tools:       {st.active_tools}",
            f"archived chains:    {st.chains}",
            f"active constraints: {enforced} ({st.active_constraints} fatal sequence(s), "
            f"{st.call_conditions} call condition(s))",
            f"evicted tools:      {st.evicted_tools}",
            f"quarantined files:  {len(st.quarantined)}",
        ]
        lines += [f"  {q.path}: {q.reason}" for q in st.quarantined]
        if st.unreadable_chains:
            lines.append(f"unreadable chains:  {st.unreadable_chains} (in quarantined files)")
        if st.unfinished_moves:
            lines.append(f"unfinished moves:   {st.unfinished_moves}")
        if st.degraded:
            lines.append(f"degraded:           {st.degraded}")
        lines += [f"damaged file:       {d.path}: {d.reason}" for d in st.damaged]
        return "\n".join(lines)

    emit(args, st, human)
    return EXIT_OK


def constraints_list(args: argparse.Namespace) -> int:
    with backend(args) as b:
        rows = b.constraints(args.all)

    def human() -> str:
        if not rows:
            return "no constraints"
        return "\n".join(
            f"{r.status:<9} {r.chain_id}  {'>'.join(r.sequence)}  {r.rule}"
            + (
                f" ({r.sessions or r.support} session(s), {r.contradictions} success(es))"
                if r.kind == "sequence"
                else ""
            )
            for r in rows
        )

    emit(args, {"constraints": rows}, human)
    return EXIT_OK


def constraints_show(args: argparse.Namespace) -> int:
    with backend(args) as b:
        view = b.constraint(args.constraint_id)
    emit(args, view, lambda: json.dumps(dump(view), indent=2, ensure_ascii=False))
    return EXIT_OK


def constraints_lift(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        if args.reinstate:
            out = b.reinstate(args.constraint_id, args.reason)
        else:
            out = b.lift(args.constraint_id, args.reason)
    emit(args, out, lambda: f"{out.chain_id}: {out.status}")
    return EXIT_OK


def constraints_reinstate(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        out = b.reinstate(args.constraint_id, args.reason)
    emit(args, out, lambda: f"{out.chain_id}: {out.status}")
    return EXIT_OK


def constraints_confirm(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        out = b.confirm(args.constraint_id, args.reason)
    emit(args, out, lambda: f"{out.chain_id}: confirmed, {out.status}")
    return EXIT_OK


def constraints_retire(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        out = b.retire(args.constraint_id, args.reason)
    emit(args, out, lambda: f"{out.chain_id}: {out.status}")
    return EXIT_OK


def forget(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        out = b.forget(args.source, args.since)
    emit(
        args,
        out,
        lambda: (
            f"forgot {out.sessions} session(s) and {out.conditions} hand-written "
            f"condition(s) from {out.source}; {out.constraints} archived chain(s) lifted; "
            f"derived again for {len(out.tools)} tool(s)"
        ),
    )
    return EXIT_OK


# ---- eviction ---------------------------------------------------------------------------
def evict(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        if args.recover:
            done = b.recover()
            emit(args, done, lambda: f"recovered {done.recovered_moves} move(s)")
            return EXIT_OK
        progress = None
        if sys.stderr.isatty() and not args.json:

            def progress(done: int, total: int) -> None:
                show = bar("tools", total)
                if show is not None:
                    show(done)

        out = b.evict(args.dry_run, progress, args.min_chains)

    def human() -> str:
        verb = "would evict" if out.dry_run else "evicted"
        lines = [f"{verb} {len(out.evicted)} tool(s), kept {len(out.kept)} with constraints"]
        shown = out.evicted if args.verbose else out.evicted[:EVICT_SHOWN]
        lines += [f"  - {d.tool_id}: {d.reason} ({len(d.chains)} chain(s))" for d in shown]
        if len(shown) < len(out.evicted):
            lines.append(f"  … and {len(out.evicted) - len(shown)} more (--verbose or --json)")
        kept = out.kept if args.verbose else out.kept[:EVICT_SHOWN]
        lines += [f"  + {d.tool_id}: {d.reason}" for d in kept]
        if len(kept) < len(out.kept):
            lines.append(f"  … and {len(out.kept) - len(kept)} more kept (--verbose or --json)")
        r = out.reclaimed
        lines.append(
            f"reclaimed: {r['tools']} tools, {r['schema_bytes']} schema bytes, "
            f"{r['schema_tokens']} schema tokens ({r['tokenizer']})"
        )
        lines.append(f"revocation mandates: {out.mandates}")
        if out.recovered_moves:
            lines.append(f"recovered {out.recovered_moves} interrupted move(s)")
        lines.append(f"took {out.duration_s:.2f}s")
        return "\n".join(lines)

    emit(args, out, human)
    return EXIT_OK


EVICT_SHOWN = 10
"""Tools an eviction's summary names one by one, without --verbose."""


def restore(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        out = b.restore(args.tool_id, args.reason, args.lift_constraints)
    lifted = f"; lifted {', '.join(out.lifted)}" if out.lifted else ""
    emit(args, out, lambda: f"restored {out.tool_id} from {out.pointer}{lifted}")
    return EXIT_OK


def revocations(args: argparse.Namespace) -> int:
    with backend(args) as b:
        mandates = b.mandates(args.status)

    def human() -> str:
        if not mandates:
            return "no revocation mandates"
        return "\n".join(
            f"{m.status:<11} {m.ref}  tools={','.join(m.tool_ids)}  attempts={m.attempts}"
            + (f"  ({m.last_error})" if m.last_error else "")
            for m in mandates
        )

    emit(args, {"mandates": mandates}, human)
    return EXIT_OK


def revocations_run(args: argparse.Namespace) -> int:
    with backend(args, write=True) as b:
        out = b.run_revocations()
    tally = out.results
    emit(
        args,
        out,
        lambda: (
            f"{out.revoker}: "
            + (", ".join(f"{n} {s}" for s, n in sorted(tally.items())) or "nothing due")
        ),
    )
    return EXIT_OK


# ---- serving ----------------------------------------------------------------------------
def serve(args: argparse.Namespace) -> int:
    from sidecar.settings import Settings
    from sidecar.shells.api.serve import serve_home

    def demo_if_empty(sc: Sidecar) -> None:
        if args.demo_if_empty and not sc.list_tools():
            from sidecar.demo import demo_tools

            status("loading the demo catalog (62 tools) into the empty home")
            sc.add_tools(demo_tools())

    def announce(url: str, token_path: str | None) -> None:
        # a shared state's tokens are configured: none is in the home to `cat`
        token, where = "$SIDECAR_TOKEN", "$SIDECAR_TOKEN or a named token of $SIDECAR_TOKENS_FILE"
        if token_path:
            token, where = f"$(cat {token_path})", f"{token_path} (or $SIDECAR_TOKEN)"
        status(
            f"sidecar serving {url} (MCP at {url}/mcp, streamable HTTP)\n"
            f"token: {where}\n"
            f"try:\n"
            f'  curl -s -H "Authorization: Bearer {token}" \\\n'
            f"       -H 'content-type: application/json' \\\n"
            f'       -d \'{{"query": "weather forecast", "k": 3}}\' {url}/v1/search\n'
            f"  OpenAPI: {url}/docs   MCP: point a client at {url}/mcp with the same "
            f"bearer token, or run `sidecar mcp` for stdio\n"
            f"  the operator's console: {url}/console (sign in with an operator's token)"
        )

    serve_home(
        Settings.load(home=home_of(args), chroma_url=args.chroma_url),
        host=args.host,
        port=args.port,
        max_body_bytes=args.max_body,
        announce=announce,
        progress=status,
        prepare=demo_if_empty,
    )
    return EXIT_OK


def mcp(args: argparse.Namespace) -> int:
    """MCP over stdio, on the home (or, beside a server that owns it, or with --url, on
    that server: every call goes through it over HTTP)."""
    from sidecar.shells.mcp_server import build_mcp

    with backend(args, write=True, create=True) as b:
        url = getattr(b, "url", None)
        if url:
            status(f"sidecar mcp: serving stdio, every call sent to the sidecar at {url}")
        build_mcp(b).run("stdio")
    return EXIT_OK


def demo(args: argparse.Namespace) -> int:
    from sidecar.demo import run_demo

    return run_demo(home=Path(args.home) if args.home else None, as_json=args.json)
