"""The CLI, dying at a named point: ``SIDECAR_CRASH_AT=POINT python -m benchmarks.crashing
ARGS...`` runs ``sidecar ARGS...`` and SIGKILLs the process once it passes ``POINT`` (a
step of an eviction move, or ``after_intake_staged``: see :mod:`sidecar.faults`).

The crash tests and the replica tests start their processes through it; the library
only names the points.  Without ``SIDECAR_CRASH_AT`` it is the plain CLI.
"""

from __future__ import annotations

import os
import signal
import sys

from sidecar.faults import CRASH_POINTS, INTAKE_CRASH_POINTS, on_points
from sidecar.shells.cli import main as cli

VARIABLE = "SIDECAR_CRASH_AT"


def main(argv: list[str]) -> int:
    point = os.environ.pop(VARIABLE, "")
    if point:
        if point not in (*CRASH_POINTS, *INTAKE_CRASH_POINTS):
            names = ", ".join((*CRASH_POINTS, *INTAKE_CRASH_POINTS))
            print(f"{VARIABLE} must be one of {names}, got {point!r}", file=sys.stderr)
            return 2

        def die(passed: str) -> None:
            if passed == point:
                os.kill(os.getpid(), signal.SIGKILL)

        on_points(die)
    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
