"""``examples/otel_agent.py`` as its README runs it: a real ``sidecar serve`` process, the
script in its own process, then ``sidecar check`` of the call the traces taught the
sidecar to block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.agents.otlp.conftest import eventually
from tests.support.live import wait_for_url

# real servers and subprocesses: the slow suite, not `make test-fast`
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = str(Path(sys.executable).with_name("sidecar"))
STEPS = [
    {
        "tool": "get_order",
        "arguments": {"order_id": "#W9"},
        "output": {"order_id": "#W9", "status": "pending", "items": ["hat"]},
    }
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "OTEL_"))}
    env |= {"SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing"}
    with (tmp_path / "server.stderr").open("wb") as stderr:
        proc = subprocess.Popen(
            [SCRIPT, "serve", "--port", "0"], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            yield wait_for_url(home, proc), env
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_the_example_agent_teaches_a_running_sidecar(
    server: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = server
    ran = subprocess.run(
        [sys.executable, "examples/otel_agent.py", "--endpoint", f"{url}/v1/traces"],
        cwd=ROOT,
        env=env,  # the token comes from the home's token file
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[:5] == [
        "10 customers with delivered orders: 10 exchanged",
        "#W1: exchange 'blue shirt': refused",
        "#W2: exchange 'red hat': exchanged",
        "#W3: exchange 'green scarf': refused",
        "#W5: exchange 'grey socks': refused",
    ]
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps(STEPS))
    check = [SCRIPT, "check", "--steps", str(steps), "--next", "exchange"]
    check += ["--args", '{"order_id": "#W9", "item": "hat"}']

    def blocked() -> bool:
        return subprocess.run(check, env=env, capture_output=True, timeout=60).returncode == 3

    eventually(blocked, timeout=60)  # each conversation is reported seconds after its root
    out = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60).stdout
    assert out.startswith('BLOCK: exchange({"order_id": "#W9", "item": "hat"})')
    assert "has status 'pending' (3 situations, 3 sessions, 1 source, 0 successes; " in out
    # a wrong token is refused, and the script says so
    refused = subprocess.run(
        [sys.executable, "examples/otel_agent.py", "--endpoint", f"{url}/v1/traces"],
        cwd=ROOT,
        env={**env, "SIDECAR_TOKEN": "not-the-token-0123456789"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1 and "not taken" in refused.stderr
    token = (Path(env["SIDECAR_HOME"]) / "token").read_text().strip()
    metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}).text
    assert 'sidecar_otlp_spans_total{outcome="accepted"} 42' in metrics
