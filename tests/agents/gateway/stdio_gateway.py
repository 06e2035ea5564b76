"""The gateway over stdio in its own process, as an MCP client would start it: in front
of the shop server (or of the Python script named by the second argument), with the
in-memory backend writing each session report as a JSON line to the file named by the
first argument."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.gateway import Step, Upstream, build_gateway
from tests.agents.gateway.conftest import shop_stdio


class RecordingBackend(StandaloneBackend):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def report_session(
        self,
        session_id: str,
        steps: list[Step],
        outcome: Any,
        task_input: str | None,
        source: str = "",
        context_known: bool = True,
    ) -> None:
        super().report_session(session_id, steps, outcome, task_input, source, context_known)
        line = {"outcome": outcome, "steps": [asdict(s) for s in steps], "task": task_input}
        with self.path.open("a") as handle:
            handle.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    script = sys.argv[2:3]
    upstream = Upstream("shop", command=(sys.executable, *script)) if script else shop_stdio()
    build_gateway(RecordingBackend(Path(sys.argv[1])), [upstream]).run_stdio()
