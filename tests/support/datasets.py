"""Small dataset files in the shapes the benchmarks read."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.tau2 import FLAT


def tau2_file(folder: Path) -> None:
    """A retail file of eight runs: two tasks fail on a stale e-mail."""
    lines = []
    for n in range(8):
        fails = n < 2
        call = {"requestor": "assistant", "name": "find_user_id_by_email",
                "args": {"email": "old9@x.com" if fails else f"u{n}@x.com"},
                "output": "Error: User not found" if fails else f"user_{n}",
                "error": fails, "msg_idx": 1}  # fmt: skip
        lines.append({"domain": "retail", "task_id": str(n), "sim_id": f"s{n}",
                      "agent_model": "m", "reward": 0.0 if fails else 1.0,
                      "calls": [call]})  # fmt: skip
    (folder / FLAT).parent.mkdir(parents=True)
    (folder / FLAT).write_text("".join(json.dumps(x) + "\n" for x in lines))
