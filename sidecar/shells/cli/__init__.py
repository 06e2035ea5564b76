"""The ``sidecar`` command: a thin shell over :class:`sidecar.Sidecar`.

Each command opens the library (or the running server that owns the home, or the one
at ``--url``), calls one method and formats the answer; errors become messages and exit
codes in :func:`main` alone, from the codes the error classes declare
(:mod:`sidecar.errors`).  Nothing heavy is imported before a command needs it, so
``sidecar --help`` answers at once.

Exit codes: 0 ok; 1 internal failure; 2 invalid input or usage; 3 ``check`` found the
plan unsafe; 4 ``report`` rejected at least one line; 5 not found (also: an empty
archive has no digest, a home that does not exist); 6 busy: another eviction holds the
lock, or another process writes to the home; 7 a store is unavailable (a read-only or
full disk, Chroma down, interrupted moves that cannot finish); 8 ``serve``: the address
is in use; 9 the sidecar at ``--url`` cannot be reached or refused the token; 10 a
request was over the server's body limit (one item alone: batches are split under it);
11 ``gateway``: it cannot serve (an upstream unreachable at start); 12 the token's role
may not do this; 13 a source reported faster than its rate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from sidecar.errors import SidecarError

BLAS_THREADS = "1"
"""numpy's BLAS threads in a sidecar process.  The exact tier's one matrix-vector
product per lookup is short on one thread; on a pool of one thread per core it waits
for the other core whenever that core is busy (a client, another request, the model),
which the `serve` benchmark measures as its one-thread diagnostic."""


def main(argv: Sequence[str] | None = None) -> int:
    # before numpy loads (nothing on the way here imports it); a value set by the
    # operator wins
    os.environ.setdefault("OPENBLAS_NUM_THREADS", BLAS_THREADS)
    from sidecar.shells.cli.parser import build_parser

    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    for name, default in (("json", False), ("home", None), ("url", None), ("chroma_url", None)):
        setattr(args, name, getattr(args, name, default))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130  # Ctrl-C: stopped as asked, no traceback
    except BrokenPipeError:
        # the reader went away (`sidecar ... | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except SidecarError as exc:  # the one place errors become exit codes
        message = _shown(str(exc), args)
        if args.json:
            error = {"error": {"code": exc.code, "message": message}}
            print(json.dumps(error), file=sys.stderr)
        else:
            print(f"sidecar: error: {message}", file=sys.stderr)
        return exc.exit_code


def _shown(message: str, args: argparse.Namespace) -> str:
    """An error as printed: redacted, and with every part of the database passwords this
    command was given masked (a parser's error quotes what it choked on, which may be a
    password no pattern would know as one)."""
    from sidecar.trust.redact import scrub
    from sidecar.trust.secretshapes import url_secrets

    urls = (os.environ.get("SIDECAR_DATABASE_URL"), getattr(args, "to_database", None))
    return scrub(message, [s for url in urls for s in url_secrets(url)])


if __name__ == "__main__":
    sys.exit(main())
