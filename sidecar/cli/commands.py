"""The ``sidecar`` commands: each opens the library (here, or the server at ``--url``),
calls one method and formats its answer."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from sidecar.cli.output import bar, emit, short, status
from sidecar.errors import EXIT_BLOCKED, EXIT_OK, EXIT_REJECTED, EXIT_WARNED, UsageError
from sidecar.redact import redact
from sidecar.wire import dump

if TYPE_CHECKING:
    from sidecar.app import Sidecar
    from sidecar.client import RemoteSidecar

    Backend = Sidecar | RemoteSidecar


def home_of(args: argparse.Namespace) -> Path:
    if getattr(args, "home", None):
        return Path(args.home)
    return Path(os.environ.get("SIDECAR_HOME") or ".sidecar")


def open_local(args: argparse.Namespace, read_only: bool = False) -> Sidecar:
    from sidecar.app import Sidecar

    return Sidecar.open(home=home_of(args), chroma_url=args.chroma_url, read_only=read_only)


@contextlib.contextmanager
def backend(args: argparse.Namespace, write: bool = False) -> Iterator[Backend]:
    """The sidecar at ``--url`` (or ``$SIDECAR_URL``); else the server that owns the
    home, if one runs; else the library on the home, opened read-only for reads."""
    from sidecar.home import server_url

    home = home_of(args)
    url = args.url or os.environ.get("SIDECAR_URL") or server_url(home)
    b: Backend
    if url:
        from sidecar.client import RemoteSidecar

        token, source = _token(home)
        b = RemoteSidecar(url, token, token_source=source)
    else:
        b = open_local(args, read_only=not write)
    try:
        yield b
    finally:
        b.close()


def _token(home: Path) -> tuple[str | None, str]:
    env = os.environ.get("SIDECAR_TOKEN")
    if env:
        return env, "from $SIDECAR_TOKEN"
    path = home / "token"
    if path.exists():
        return path.read_text().strip() or None, f"from {path}"
    return None, f"none: neither $SIDECAR_TOKEN nor {path} is set"


# ---- tools and lookup -----------------------------------------------------------------
def tools_add(args: argparse.Namespace) -> int:
    from sidecar.catalog import load_tool_file

    tools = [t for path in args.files for t in load_tool_file(path)]
    with backend(args, write=True) as b:
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


def read_steps(source: str | None) -> tuple[list[Any] | None, str | None]:
    """A session's steps from a JSON file (a list of steps, or a report holding
    ``steps`` and maybe ``task_input``), or ``-`` for stdin."""
    if source is None:
        return None, None
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON ({exc.msg})") from None
    if isinstance(data, dict) and "steps" in data:
        task = data.get("task_input")
        return data["steps"], task if isinstance(task, str) else None
    if isinstance(data, list):
        return data, None
    raise UsageError(f"{source}: expected a list of steps or an object with `steps`")


def search(args: argparse.Namespace) -> int:
    steps, task = read_steps(args.steps)
    with backend(args) as b:
        out = b.search(
            args.query,
            args.k,
            args.after,
            dict(args.context),
            steps=steps,
            task_input=args.task_input or task,
        )

    def human() -> str:
        lines = []
        for n, hit in enumerate(out.hits, 1):
            lines.append(f"{n:>2}. {hit.tool_id}  ({hit.score:.3f})  {short(hit.description, 60)}")
            lines += [f"      ! {w}" for w in hit.warnings]
        if not out.hits:
            lines.append("no active tools match")
        for w in out.withheld:
            lines.append(f"withheld {w.tool_id}: {w.rule} [{w.pointer}]")
        return "\n".join(lines)

    emit(args, out, human)
    return EXIT_OK


def check(args: argparse.Namespace) -> int:
    if args.next is not None:
        return check_call(args)
    if args.plan is None:
        raise UsageError("give a plan (A,B,C), or --steps FILE --next TOOL for one call")
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


def check_call(args: argparse.Namespace) -> int:
    steps, task = read_steps(args.steps)
    with backend(args) as b:
        out = b.check_call(
            steps or [], args.next, args.args, args.task_input or task, dict(args.context)
        )

    def human() -> str:
        # the call is shown as the check saw it: redacted
        lines = [f"{out.decision.upper()}: {args.next}({json.dumps(redact(args.args))})"]
        for r in out.reasons:
            lines.append(f"  {r.level}: {r.explanation}")
            if r.evidence:
                lines.append(f"    because: {r.evidence}")
            if r.pointer:
                lines.append(f"    audit: {r.pointer}")
        return "\n".join(lines)

    emit(args, out, human)
    return {"allow": EXIT_OK, "warn": EXIT_WARNED, "block": EXIT_BLOCKED}[out.decision]


# ---- intake ---------------------------------------------------------------------------
REPORT_BATCH = 500


class _BadLine:
    def __init__(self, msg: str) -> None:
        self.msg = msg


def _report_lines(source: str) -> Iterator[tuple[int, str]]:
    handle: TextIO
    if source == "-":
        handle = sys.stdin
    else:
        try:
            handle = open(source, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise UsageError(f"cannot read {source}: {exc.strerror}") from None
    try:
        for lineno, line in enumerate(handle, 1):
            if line.strip():
                yield lineno, line
    finally:
        if handle is not sys.stdin:
            handle.close()


def report(args: argparse.Namespace) -> int:
    rejected = 0

    def flush(b: Backend, batch: list[tuple[int, Any]]) -> None:
        nonlocal rejected
        good = [(n, data) for n, data in batch if not isinstance(data, _BadLine)]
        answers = iter(b.report_many([data for _, data in good]) if good else [])
        for lineno, data in batch:
            if isinstance(data, _BadLine):
                out: dict[str, Any] = {
                    "status": "rejected",
                    "reason": f"line {lineno}: not JSON ({data.msg})",
                }
            else:
                out = next(answers).to_dict()
            rejected += out["status"] == "rejected"
            emit(args, out, functools.partial(_human_intake, lineno, out))
        sys.stdout.flush()

    with backend(args, write=True) as b:
        batch: list[tuple[int, Any]] = []
        for lineno, line in _report_lines(args.file):
            try:
                batch.append((lineno, json.loads(line)))
            except json.JSONDecodeError as exc:
                batch.append((lineno, _BadLine(exc.msg)))
            if len(batch) == REPORT_BATCH:
                flush(b, batch)
                batch = []
        if batch:
            flush(b, batch)
    return EXIT_REJECTED if rejected else EXIT_OK


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


def archive_status(args: argparse.Namespace) -> int:
    with backend(args) as b:
        st = b.status(args.verify)

    def human() -> str:
        lines = [
            f"active tools:       {st.active_tools}",
            f"archived chains:    {st.chains}",
            f"active constraints: {st.active_constraints}",
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
            f"{r.status:<9} {r.chain_id}  {'>'.join(r.sequence)}  {r.rule}" for r in rows
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
            out = b.reinstate(args.chain_id, args.reason)
        else:
            out = b.lift(args.chain_id, args.reason)
    emit(args, out, lambda: f"{out.chain_id}: {out.status}")
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
    from sidecar.api import serve as run_server

    status(f"opening the sidecar home {home_of(args)}")
    with open_local(args) as sc:
        if args.demo_if_empty and not sc.list_tools():
            from sidecar.demo import demo_tools

            status("loading the demo catalog (62 tools) into the empty home")
            sc.add_tools(demo_tools())

        def announce(url: str, token_path: str) -> None:
            status(
                f"sidecar serving {url} (MCP at {url}/mcp, streamable HTTP)\n"
                f"token: {token_path} (or $SIDECAR_TOKEN)\n"
                f"try:\n"
                f'  curl -s -H "Authorization: Bearer $(cat {token_path})" \\\n'
                f"       -H 'content-type: application/json' \\\n"
                f'       -d \'{{"query": "weather forecast", "k": 3}}\' {url}/v1/search\n'
                f"  OpenAPI: {url}/docs   MCP: point a client at {url}/mcp with the same "
                f"bearer token, or run `sidecar mcp` for stdio"
            )

        run_server(
            sc,
            host=args.host,
            port=args.port,
            max_body_bytes=args.max_body,
            announce=announce,
            progress=status,
        )
    return EXIT_OK


def gateway(args: argparse.Namespace) -> int:
    """An MCP gateway in front of upstream MCP servers, with this home's memory."""
    from sidecar.api.serve import bind, token_for
    from sidecar.gateway import build_gateway
    from sidecar.gateway.library import LibraryBackend

    with open_local(args) as sc:
        home = home_of(args)
        gw = build_gateway(
            LibraryBackend(sc),
            args.upstream,
            expose=args.expose,
            pins=args.pin,
            idle_timeout_s=args.idle_timeout,
            report_clean=True,
            token=None if args.stdio else token_for(home),
        )
        if args.stdio:
            gw.run_stdio()
            return EXIT_OK
        import uvicorn

        sock = bind(args.host, args.port)
        url = f"http://{args.host}:{sock.getsockname()[1]}{gw.path}"
        status(f"sidecar gateway serving {url} (token: {home / 'token'} or $SIDECAR_TOKEN)")
        config = uvicorn.Config(gw.asgi_app, log_level="warning", access_log=False)
        try:
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            sock.close()
    return EXIT_OK


def mcp(args: argparse.Namespace) -> int:
    from sidecar.mcp_server import build_mcp

    with open_local(args) as sc:
        build_mcp(sc).run("stdio")
    return EXIT_OK


def demo(args: argparse.Namespace) -> int:
    from sidecar.demo import run_demo

    return run_demo(home=Path(args.home) if args.home else None, as_json=args.json)
