"""Progress on long work: a one-line note per step, and a bar over many items.

Notes go to stderr (stdout is kept for results).  The bar is the CLI's own
(:func:`sidecar.shells.cli.output.bar`), drawn only when both stdout and stderr are
terminals: under a pipe or in CI a redrawn line is noise in a log.  A note printed
while a bar is shown takes the bar's line, and the bar is drawn again below it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TypeVar

T = TypeVar("T")

_shown: list[Callable[[], None]] = []
"""How to draw each bar being shown again, innermost last."""


def progress(message: str) -> None:
    """One line on stderr (stdout is kept for results)."""
    if _shown:
        sys.stderr.write("\r\x1b[K")
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
    if _shown:
        _shown[-1]()


def on_terminal() -> bool:
    return sys.stdout.isatty() and sys.stderr.isatty()


def steps(label: str, items: Iterable[T], total: int | None = None) -> Iterator[T]:
    """``items``, one by one, with a bar on stderr that advances after each (none when
    not on a terminal, or when the number of items is unknown)."""
    from sidecar.shells.cli.output import bar

    if total is None and isinstance(items, Sized):
        total = len(items)
    show = bar(label, total) if total and on_terminal() else None
    if show is None:
        yield from items
        return
    done = [0]
    _shown.append(lambda: show(done[0]))
    try:
        show(0)
        for item in items:
            yield item
            done[0] += 1
            show(done[0])
    finally:
        _shown.pop()
