"""The gateway example runs as documented: ``python examples/gateway_agent.py`` starts a
real gateway in front of the example shop and its scripted agent is refused the call
that failed twice before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_scripted_agent_is_refused_the_call_that_failed_before(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SIDECAR_EMBEDDER": "hashing",  # the example's logic, not the model, is under test
        "SIDECAR_MODEL_CACHE": str(tmp_path / "models"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "gateway_agent.py"),
            "--home",
            str(tmp_path / "h"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "warm-up: 10 of 10 exchanges of delivered orders done" in out
    assert out.strip().endswith("runs: failed, failed, refused, done")
    assert "exchange -> refused by the gateway, not sent to the shop:" in out
    assert "Refused: exchange was not run, because calls like this one failed before." in out
    assert "Non-delivered order cannot be exchanged" in out
    assert "Traceback" not in done.stderr
