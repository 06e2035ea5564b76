"""A sampling profiler for a ``sidecar serve`` process, with no tool to install.

``python -m benchmarks.stack_sampler OUT.json serve --port ...`` runs the sidecar's CLI
with the given arguments (``{pid}`` in ``OUT.json`` becomes the process id, so that
several servers started alike write files of their own) while a thread of its own
reads every other thread's stack (``sys._current_frames``) every :data:`INTERVAL_S`; at
exit (a clean stop: SIGTERM) it writes what it counted to ``OUT.json``.  cProfile sees
one thread; a server answers on an event loop and a pool of worker threads, so a
sampler of every thread is what tells where a request's wall time goes, waiting
included (a thread blocked in a PostgreSQL statement is sampled inside that statement).

Each sample of a thread is filed under its innermost frame in the project's own code
(``sidecar``, ``cold_store``, ``indexes``: file, line, function), or under its innermost
frame at all when no project code is on its stack; ``inclusive`` counts every project
function on the stack once per sample (the share of samples a function was running or
waiting under); ``by_entry`` files each sample in project code under its outermost and
innermost project frames (which route or loop, waiting where).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType

INTERVAL_S = 0.005
PROJECT = ("/sidecar/", "/cold_store/", "/indexes/")
"""Path parts that make a frame the project's own code."""


def _where(frame: FrameType) -> str:
    code = frame.f_code
    parts = Path(code.co_filename).parts
    short = "/".join(parts[-2:])
    return f"{short}:{frame.f_lineno} {code.co_name}"


def _own(frame: FrameType) -> bool:
    return any(p in frame.f_code.co_filename for p in PROJECT)


class Sampler:
    """Counts every thread's stack but its own, every ``interval`` seconds."""

    def __init__(self, interval: float = INTERVAL_S) -> None:
        self.interval = interval
        self.samples = 0
        self.innermost: Counter[str] = Counter()
        self.inclusive: Counter[str] = Counter()
        self.by_entry: Counter[str] = Counter()
        """``outermost project function > innermost project frame``: what each kind of
        work (a request's route, the publisher's loop) spends its samples in."""
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    self._count(frame)
            self.samples += 1

    def _count(self, frame: FrameType) -> None:
        inner: str | None = None
        outer = ""
        seen: set[str] = set()
        top = frame
        walk: FrameType | None = frame
        while walk is not None:
            if _own(walk):
                if inner is None:
                    inner = _where(walk)
                code = walk.f_code
                outer = f"{'/'.join(Path(code.co_filename).parts[-2:])} {code.co_name}"
                seen.add(outer)
            walk = walk.f_back
        self.innermost[inner or f"(outside) {_where(top)}"] += 1
        self.inclusive.update(seen)
        if inner is not None:
            self.by_entry[f"{outer} > {inner}"] += 1

    def dump(self, out: Path) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)  # its last sample counted before the write
        out.write_text(
            json.dumps(
                {
                    "interval_s": self.interval,
                    "samples": self.samples,
                    "wall_s": round(time.monotonic() - self.started, 2),
                    "innermost": dict(self.innermost.most_common(200)),
                    "inclusive": dict(self.inclusive.most_common(200)),
                    "by_entry": dict(self.by_entry.most_common(300)),
                },
                indent=1,
            )
        )


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    out = Path(args.pop(0).replace("{pid}", str(os.getpid())))
    sampler = Sampler()
    sampler.start()
    atexit.register(sampler.dump, out)
    from sidecar.shells.cli import main as cli

    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
