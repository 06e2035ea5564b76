"""How the CLI shows things: JSON for machines, text for people, progress on a terminal."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from sidecar.wire import dump


def emit(args: argparse.Namespace, payload: Any, human: Callable[[], str]) -> None:
    if args.json:
        print(json.dumps(dump(payload), ensure_ascii=False, default=str))
    else:
        print(human())


def short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def when(at: float | None) -> str:
    """A Unix time as UTC text (empty for none)."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at)) if at else ""


def bar(label: str, total: int) -> Callable[[int], None] | None:
    """A progress bar on stderr for ``total`` items, only when stderr is a terminal."""
    if not sys.stderr.isatty() or total <= 0:
        return None

    def show(done: int) -> None:
        width = 30
        filled = width * min(done, total) // total
        sys.stderr.write(f"\r[{'#' * filled}{' ' * (width - filled)}] {done}/{total} {label}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def status(message: str) -> None:
    """A one-line note on stderr about what a long step is doing."""
    print(message, file=sys.stderr, flush=True)
