"""The ``sidecar`` command: a thin shell over :class:`sidecar.Sidecar`.

Each command opens the sidecar, calls one library function and formats the answer;
errors become messages and exit codes in :func:`main` alone.  Nothing heavy is imported
before a command needs it, so ``sidecar --help`` answers at once.

Exit codes: 0 ok; 1 storage or internal failure; 2 invalid input or usage;
3 ``check`` found the plan unsafe; 4 ``report`` rejected at least one line;
5 not found (also: an empty archive has no digest); 6 busy: another eviction holds
the lock, or a server owns the home (use ``--url``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from sidecar.app import Sidecar
    from sidecar.backends import Backend

EXIT_OK, EXIT_FAILURE, EXIT_INVALID, EXIT_BLOCKED, EXIT_REJECTED = 0, 1, 2, 3, 4
EXIT_NOT_FOUND, EXIT_BUSY = 5, 6


class UsageError(Exception):
    pass


# ---- argument helpers ------------------------------------------------------------------
def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _context_pair(value: str) -> tuple[str, Any]:
    key, sep, raw = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {value!r}")
    try:
        parsed = json.loads(raw)
        if isinstance(parsed, dict | list):
            parsed = raw
    except json.JSONDecodeError:
        parsed = raw
    return key.strip(), parsed


def _home(args: argparse.Namespace) -> Path:
    if getattr(args, "home", None):
        return Path(args.home)
    return Path(os.environ.get("SIDECAR_HOME") or ".sidecar")


def _sidecar(args: argparse.Namespace) -> Sidecar:
    from sidecar.app import Sidecar

    return Sidecar.open(home=_home(args), chroma_url=args.chroma_url)


@contextlib.contextmanager
def _backend(args: argparse.Namespace, write: bool = False) -> Iterator[Backend]:
    """The library on the home, or the sidecar at ``--url``.  A local write refuses
    while a server owns the home: it would open the embedded store behind its back."""
    from sidecar.backends import Local, Remote

    url = getattr(args, "url", None) or os.environ.get("SIDECAR_URL")
    backend: Backend
    if url:
        from sidecar.client import RemoteSidecar

        token = os.environ.get("SIDECAR_TOKEN")
        token_file = _home(args) / "token"
        if not token and token_file.exists():
            token = token_file.read_text().strip()
        backend = Remote(RemoteSidecar(url, token))
    else:
        from sidecar.lock import LockBusy, holder

        if write:
            busy = holder(_home(args) / "server.lock", "sidecar server")
            if busy:
                raise LockBusy(
                    f"a sidecar server owns {_home(args)} ({busy}); send this through it "
                    "with --url http://HOST:PORT"
                )
        backend = Local(_sidecar(args))
    try:
        yield backend
    finally:
        backend.close()


def _emit(args: argparse.Namespace, payload: Any, human: Callable[[], str]) -> None:
    if args.json:
        print(json.dumps(payload, ensure_ascii=False, default=str))
    else:
        print(human())


# ---- commands --------------------------------------------------------------------------
def cmd_tools_add(args: argparse.Namespace) -> int:
    from sidecar.catalog import load_tool_file

    tools = [t for path in args.files for t in load_tool_file(path)]
    with _backend(args, write=True) as b:
        out = b.add_tools(tools)
    _emit(args, out, lambda: f"{len(out['added'])} tool(s) added, {len(out['updated'])} updated")
    return EXIT_OK


def cmd_tools_list(args: argparse.Namespace) -> int:
    with _backend(args) as b:
        out = b.list_tools()
    tools = out["tools"]

    def human() -> str:
        if not tools:
            return "no active tools"
        width = max(len(t["tool_id"]) for t in tools)
        lines = [f"{'TOOL':<{width}}  {'TYPE':<12}  DESCRIPTION"]
        lines += [
            f"{t['tool_id']:<{width}}  {t['tool_type']:<12}  {_short(t['description'], 70)}"
            for t in tools
        ]
        return "\n".join(lines)

    _emit(args, out, human)
    return EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    with _backend(args) as b:
        out = b.search(args.query, args.k, args.after, dict(args.context))

    def human() -> str:
        lines = []
        for n, hit in enumerate(out["hits"], 1):
            lines.append(
                f"{n:>2}. {hit['tool_id']}  ({hit['score']:.3f})  {_short(hit['description'], 60)}"
            )
            lines += [f"      ! {w}" for w in hit["warnings"]]
        if not out["hits"]:
            lines.append("no active tools match")
        for w in out["withheld"]:
            lines.append(f"withheld {w['tool_id']}: {w['rule']} [{w['pointer']}]")
        return "\n".join(lines)

    _emit(args, out, human)
    return EXIT_OK


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


REPORT_BATCH = 500


def cmd_report(args: argparse.Namespace) -> int:
    rejected = 0

    def flush(b: Backend, batch: list[tuple[int, Any]]) -> None:
        nonlocal rejected
        good = [(n, data) for n, data in batch if not isinstance(data, _BadLine)]
        answers = iter(b.report_many([data for _, data in good]) if good else [])
        for lineno, data in batch:
            if isinstance(data, _BadLine):
                out = {"status": "rejected", "reason": f"line {lineno}: not JSON ({data.msg})"}
            else:
                out = next(answers)
            rejected += out["status"] == "rejected"
            _emit(args, out, lambda o=out, n=lineno: _human_intake(n, o))
        sys.stdout.flush()

    with _backend(args, write=True) as b:
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


class _BadLine:
    def __init__(self, msg: str) -> None:
        self.msg = msg


def _human_intake(lineno: int, out: dict[str, Any]) -> str:
    parts = [f"line {lineno}: {out['status']}"]
    if "pointer" in out:
        parts.append(out["pointer"])
    if "reason" in out:
        parts.append(f"- {out['reason']}")
    return " ".join(parts)


def cmd_check(args: argparse.Namespace) -> int:
    with _backend(args) as b:
        out = b.check(args.plan, args.mode, dict(args.context))

    def human() -> str:
        if out["safe"]:
            return f"safe: {' > '.join(args.plan)}"
        lines = [f"BLOCKED: {' > '.join(args.plan)}"]
        for c in out["collisions"]:
            if args.mode == "prefix":
                lines.append(f"  {c['reason']}")
            else:
                lines.append(f"  {'>'.join(c['matched'])}")
                lines.append(f"    rule: {c['rule']}")
                lines.append(f"    expected failure: {c['expected_failure']}")
                lines.append(f"    why: {c['reason']}")
            lines.append(f"    audit: {c['pointer']}")
        return "\n".join(lines)

    _emit(args, out, human)
    return EXIT_OK if out["safe"] else EXIT_BLOCKED


def cmd_audit(args: argparse.Namespace) -> int:
    with _backend(args) as b:
        record = b.audit(args.pointer)
    _emit(args, record, lambda: json.dumps(record, indent=2, ensure_ascii=False, default=str))
    return EXIT_OK


def cmd_archive_digest(args: argparse.Namespace) -> int:
    with _backend(args) as b:
        out = b.digest()
    _emit(args, out, lambda: out["digest"])
    return EXIT_OK


def cmd_archive_status(args: argparse.Namespace) -> int:
    with _backend(args) as b:
        status = b.status()

    def human() -> str:
        lines = [
            f"archived chains:    {status['chains']}",
            f"active constraints: {status['active_constraints']}",
            f"evicted tools:      {status['evicted_tools']}",
            f"quarantined files:  {len(status['quarantined'])}",
        ]
        lines += [f"  {q['path']}: {q['reason']}" for q in status["quarantined"]]
        return "\n".join(lines)

    _emit(args, status, human)
    return EXIT_OK


def _progress(done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{' ' * (width - filled)}] {done}/{total} tools")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def cmd_evict(args: argparse.Namespace) -> int:
    with _backend(args, write=True) as b:
        if args.recover:
            out = b.recover()
            _emit(args, out, lambda: f"recovered {out['recovered_moves']} move(s)")
            return EXIT_OK
        progress = _progress if sys.stderr.isatty() and not args.json else None
        out = b.evict(args.dry_run, progress, args.min_chains)

    def human() -> str:
        verb = "would evict" if out["dry_run"] else "evicted"
        kept = out["kept_with_constraint"]
        lines = [f"{verb} {len(out['evicted'])} tool(s), kept {len(kept)} with constraints"]
        lines += [
            f"  - {d['tool_id']}: {d['reason']} ({len(d['chains'])} chain(s))"
            for d in out["evicted"]
        ]
        lines += [f"  + {d['tool_id']}: {d['reason']}" for d in kept]
        r = out["reclaimed"]
        lines.append(
            f"reclaimed: {r['tools']} tools, {r['schema_bytes']} schema bytes, "
            f"{r['schema_tokens']} schema tokens ({r['tokenizer']})"
        )
        lines.append(f"revocation mandates: {out['mandates']}")
        if out["recovered_moves"]:
            lines.append(f"recovered {out['recovered_moves']} interrupted move(s)")
        lines.append(f"took {out['duration_s']:.2f}s")
        return "\n".join(lines)

    _emit(args, out, human)
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    with _backend(args, write=True) as b:
        out = b.restore(args.tool_id, args.reason, args.lift_constraints)
    _emit(
        args,
        out,
        lambda: (
            f"restored {out['tool_id']} from {out['pointer']}"
            + (f"; lifted {', '.join(out['lifted'])}" if out["lifted"] else "")
        ),
    )
    return EXIT_OK


def cmd_revocations(args: argparse.Namespace) -> int:
    with _backend(args) as b:
        out = b.revocations(args.status)
    mandates = out["mandates"]

    def human() -> str:
        if not mandates:
            return "no revocation mandates"
        return "\n".join(
            f"{m['status']:<11} {m['ref']}  tools={','.join(m['tool_ids'])}  "
            f"attempts={m['attempts']}" + (f"  ({m['last_error']})" if m["last_error"] else "")
            for m in mandates
        )

    _emit(args, out, human)
    return EXIT_OK


def cmd_revocations_run(args: argparse.Namespace) -> int:
    with _backend(args, write=True) as b:
        out = b.run_revocations()
    tally = out["results"]
    _emit(
        args,
        out,
        lambda: (
            f"{out['revoker']}: "
            + (", ".join(f"{n} {status}" for status, n in sorted(tally.items())) or "nothing due")
        ),
    )
    return EXIT_OK


def cmd_constraints_list(args: argparse.Namespace) -> int:
    with _backend(args) as b:
        out = b.constraints(args.all)
    rows = out["constraints"]

    def human() -> str:
        if not rows:
            return "no constraints"
        return "\n".join(
            f"{r['status']:<7} {r['chain_id']}  {'>'.join(r['sequence'])}  {r['rule']}"
            for r in rows
        )

    _emit(args, out, human)
    return EXIT_OK


def cmd_constraints_lift(args: argparse.Namespace) -> int:
    with _backend(args, write=True) as b:
        out = b.lift(args.chain_id, args.reason, args.reinstate)
    _emit(args, out, lambda: f"{out['chain_id']}: {out['status']}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from sidecar.service import serve

    with _sidecar(args) as sc:
        if args.demo_if_empty and sc.index.count() == 0:
            from sidecar.demo import demo_tools

            sc.add_tools(demo_tools())
            print(f"loaded the demo catalog into {sc.settings.home}", file=sys.stderr)

        def announce(url: str, token_path: str) -> None:
            print(
                f"sidecar serving {url} (MCP at {url}/mcp, streamable HTTP)\n"
                f"token: {token_path} (or $SIDECAR_TOKEN)\n"
                f"try:\n"
                f'  curl -s -H "Authorization: Bearer $(cat {token_path})" \\\n'
                f"       -H 'content-type: application/json' \\\n"
                f'       -d \'{{"query": "weather forecast", "k": 3}}\' {url}/v1/search\n'
                f"  OpenAPI: {url}/docs   MCP: point a client at {url}/mcp with the same "
                f"bearer token, or run `sidecar mcp` for stdio",
                file=sys.stderr,
                flush=True,
            )

        serve(sc, host=args.host, port=args.port, max_body_bytes=args.max_body, announce=announce)
    return EXIT_OK


def cmd_mcp(args: argparse.Namespace) -> int:
    from sidecar.mcp_server import build_mcp

    with _sidecar(args) as sc:
        build_mcp(sc).run("stdio")
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        from benchmarks.run import main as bench_main
    except ImportError:
        raise UsageError(
            "the benchmarks ship with the source tree: run `sidecar bench` from a checkout "
            "installed with `pip install -e '.[bench]'` (or `make bench`)"
        ) from None
    return int(bench_main(args.bench_args))


def cmd_demo(args: argparse.Namespace) -> int:
    from sidecar.demo import run_demo

    return run_demo(home=Path(args.home) if args.home else None, as_json=args.json)


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# ---- parser ----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
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
        help="talk to a running sidecar (default: $SIDECAR_URL; token from $SIDECAR_TOKEN "
        "or the home's token file)",
    )
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="Failure memory for agent tool retrieval: an active tool index, an "
        "archive of abandoned tool chains, and constraint-aware lookup.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version="%(prog)s 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    tools = sub.add_parser("tools", help="manage the active tool index", parents=[common])
    tools_sub = tools.add_subparsers(dest="tools_command", metavar="ACTION", required=True)
    add = tools_sub.add_parser(
        "add",
        parents=[common],
        help="add or update tools from files (MCP tools/list, OpenAI function tools, or "
        "sidecar JSON lines)",
    )
    add.add_argument("files", nargs="+", metavar="FILE")
    add.set_defaults(func=cmd_tools_add)
    lst = tools_sub.add_parser("list", parents=[common], help="list the active tools")
    lst.set_defaults(func=cmd_tools_list)

    search = sub.add_parser("search", parents=[common], help="semantic tool lookup")
    search.add_argument("query")
    search.add_argument("-k", type=int, default=5, help="number of tools (default 5)")
    search.add_argument(
        "--after", type=_csv, default=[], metavar="A,B", help="tools already executed, in order"
    )
    search.add_argument(
        "--context",
        type=_context_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="runtime context for conditions, e.g. payload_bytes=7200000 (repeatable)",
    )
    search.set_defaults(func=cmd_search)

    report = sub.add_parser(
        "report", parents=[common], help="report chains (JSON lines) from FILE or - for stdin"
    )
    report.add_argument("file", metavar="FILE|-")
    report.set_defaults(func=cmd_report)

    check = sub.add_parser("check", parents=[common], help="check a plan against the archive")
    check.add_argument("plan", type=_csv, metavar="A,B,C")
    check.add_argument("--mode", choices=["sequence", "prefix"], default="sequence")
    check.add_argument(
        "--context", type=_context_pair, action="append", default=[], metavar="KEY=VALUE"
    )
    check.set_defaults(func=cmd_check)

    audit = sub.add_parser("audit", parents=[common], help="show an archived chain by pointer")
    audit.add_argument("pointer", metavar="POINTER")
    audit.set_defaults(func=cmd_audit)

    arch = sub.add_parser("archive", parents=[common], help="the abandoned chain archive")
    arch_sub = arch.add_subparsers(dest="archive_command", metavar="ACTION", required=True)
    dig = arch_sub.add_parser("digest", parents=[common], help="the archive digest (seed formula)")
    dig.set_defaults(func=cmd_archive_digest)
    st = arch_sub.add_parser("status", parents=[common], help="counts and quarantined files")
    st.set_defaults(func=cmd_archive_status)

    evict = sub.add_parser(
        "evict", parents=[common], help="evict dead-end prefix tools to cold storage"
    )
    evict.add_argument("--dry-run", action="store_true", help="decide and report; change nothing")
    evict.add_argument(
        "--recover", action="store_true", help="only finish moves a crash interrupted"
    )
    evict.add_argument(
        "--min-chains",
        type=_positive_int,
        metavar="N",
        help="distinct abandoned chains a tool must drive to be evicted, for this run "
        "(default: SIDECAR_EVICT_MIN_CHAINS, 2)",
    )
    evict.set_defaults(func=cmd_evict)

    restore = sub.add_parser(
        "restore", parents=[common], help="bring an evicted tool back from cold storage"
    )
    restore.add_argument("tool_id", metavar="TOOL_ID")
    restore.add_argument("--reason", required=True, help="what was fixed (kept for audit)")
    restore.add_argument(
        "--lift-constraints",
        action="store_true",
        help="also stop enforcing the chains that drove its eviction",
    )
    restore.set_defaults(func=cmd_restore)

    rev = sub.add_parser("revocations", parents=[common], help="credential revocation mandates")
    rev.add_argument(
        "--status",
        choices=["pending", "submitted", "revoked", "failed", "unsupported", "cancelled"],
    )
    rev.set_defaults(func=cmd_revocations)
    rev_sub = rev.add_subparsers(dest="revocations_command", metavar="ACTION")
    rev_run = rev_sub.add_parser(
        "run", parents=[common], help="apply the configured revoker to due mandates"
    )
    rev_run.set_defaults(func=cmd_revocations_run)

    cons = sub.add_parser("constraints", parents=[common], help="archived negative constraints")
    cons_sub = cons.add_subparsers(dest="constraints_command", metavar="ACTION", required=True)
    cons_list = cons_sub.add_parser("list", parents=[common], help="list constraints")
    cons_list.add_argument("--all", action="store_true", help="include lifted ones")
    cons_list.set_defaults(func=cmd_constraints_list)
    lift = cons_sub.add_parser("lift", parents=[common], help="stop enforcing a chain's constraint")
    lift.add_argument("chain_id", metavar="CHAIN_ID")
    lift.add_argument("--reason", required=True)
    lift.add_argument("--reinstate", action="store_true", help="enforce it again instead")
    lift.set_defaults(func=cmd_constraints_lift)

    serve = sub.add_parser(
        "serve", parents=[common], help="serve the HTTP API and MCP (streamable HTTP)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument(
        "--max-body", type=int, default=1_048_576, help="largest request body in bytes"
    )
    serve.add_argument(
        "--demo-if-empty", action="store_true", help="load the demo catalog into an empty home"
    )
    serve.set_defaults(func=cmd_serve)

    mcp = sub.add_parser("mcp", parents=[common], help="serve MCP over stdio")
    mcp.set_defaults(func=cmd_mcp)

    bench = sub.add_parser(
        "bench",
        help="run benchmarks: pollution, lookup, check, evict, store, startup or all "
        "(see `sidecar bench all --help`)",
        add_help=False,
    )
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    bench.set_defaults(func=cmd_bench)

    demo = sub.add_parser(
        "demo", parents=[common], help="walk through the sediment fallacy and its prevention"
    )
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # the benchmark runner parses its own arguments
        return cmd_bench(argparse.Namespace(bench_args=argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    args.home = getattr(args, "home", None)
    args.url = getattr(args, "url", None)
    args.chroma_url = getattr(args, "chroma_url", None)
    try:
        return int(args.func(args))
    except Exception as exc:  # the one place errors become exit codes
        code, kind = _classify_error(exc)
        if code == EXIT_FAILURE and kind == "internal":
            raise
        if args.json:
            print(json.dumps({"error": {"code": kind, "message": str(exc)}}), file=sys.stderr)
        else:
            print(f"sidecar: error: {exc}", file=sys.stderr)
        return code


def _classify_error(exc: Exception) -> tuple[int, str]:
    from cold_store import ColdStoreError
    from indexes import ToolIndexError
    from sidecar.errors import EmptyArchive, InvalidInput, NotFound, SidecarError
    from sidecar.lock import LockBusy

    if isinstance(exc, UsageError):
        return EXIT_INVALID, "usage"
    if isinstance(exc, LockBusy):
        return EXIT_BUSY, exc.code
    if isinstance(exc, UsageError):
        return EXIT_INVALID, "usage"
    if isinstance(exc, InvalidInput):
        return EXIT_INVALID, exc.code
    if isinstance(exc, NotFound | EmptyArchive):
        return EXIT_NOT_FOUND, exc.code
    if isinstance(exc, SidecarError):
        return EXIT_FAILURE, exc.code
    if isinstance(exc, ToolIndexError):
        return EXIT_FAILURE, "index"
    if isinstance(exc, ColdStoreError):
        return EXIT_FAILURE, "cold_store"
    return EXIT_FAILURE, "internal"


if __name__ == "__main__":
    sys.exit(main())
