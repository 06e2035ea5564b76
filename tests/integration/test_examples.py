"""The examples in ``examples/`` run as their README shows, with the real model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sidecar import Sidecar

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_the_library_agent_blocks_the_exchange_it_learned_fails(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env["SIDECAR_MODEL_CACHE"] = os.environ["SIDECAR_MODEL_CACHE"]  # the suite's own
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "library_agent.py"), "--home", str(home)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "1. added 4 tools: get_order, exchange_item, cancel_order, track_package"
    assert lines[1] == (
        "2. reported 23 sessions: 3 archived (the refused exchanges), 20 recorded (the "
        "exchanges that went through)"
    )
    check = lines.index('3. check exchange_item({"order_id": "#W5", "item": "blue shirt"}): block')
    assert (
        "has status 'pending' (3 situations, 3 sessions, 1 source, 0 successes; "
        in (lines[check + 1])
    )
    assert "the agent does not make the call" in lines[check + 3]
    pointer = lines[check + 2].split("(audit: ")[1].rstrip(")")
    looked_up = lines[check + 4]
    assert looked_up.startswith("4. look up the next step: ")
    assert "cancel_order" in looked_up and "exchange_item (may fail)" in looked_up
    # and all of it is what examples/README.md shows
    from tests.support.docs import blocks, matches

    text = (EXAMPLES / "README.md").read_text()
    part = text[text.index("## The library") : text.index("\n## ", text.index("## The library"))]
    [shown] = [block for lang, block in blocks(part) if lang == "text"]
    assert matches(shown, lines), proc.stdout
    assert lines[-1] == "5. check exchange_item on the delivered #W31: allow"
    # --home kept what it learned, and the pointer it printed leads to the record
    with Sidecar.open(home=home, read_only=True) as sc:
        record = sc.audit(pointer)
        assert "Non-delivered order cannot be exchanged" in json.dumps(record.to_dict())
        assert {t.tool_id for t in sc.list_tools()} == {
            "get_order",
            "exchange_item",
            "cancel_order",
            "track_package",
        }


def hidden(*modules: str) -> str:
    """Python code that makes ``modules`` unimportable in the process that runs it, as if
    they were not installed (a ``None`` in ``sys.modules`` stops their import)."""
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)


def test_the_replicas_agent_names_what_to_install_before_starting_anything(
    tmp_path: Path,
) -> None:
    """``make run`` installs no S3 server: the example says which package is missing and
    the command that installs it, before it starts a server."""
    script = str(EXAMPLES / "replicas_agent.py")
    probe = hidden("moto") + (
        f"import runpy\nsys.argv = [{script!r}, '--embedder', 'hashing']\n"
        f"runpy.run_path({script!r}, run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "starting" not in proc.stdout and "Traceback" not in proc.stderr
    assert "moto" in proc.stderr
    assert f"{sys.executable} -m pip install 'moto[server]>=5.1'" in proc.stderr


def test_replicas_agent_blocks_on_replica_2_what_replica_1_learned(tmp_path: Path) -> None:
    """``python -m benchmarks.cluster`` as the README's walk-through starts it, then the
    example against the two URLs it prints; SIGTERM stops everything it started."""
    import signal

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "AWS_"))}
    root = tmp_path / "cluster"
    cluster = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.cluster", "--replicas", "2",
         "--embedder", "hashing", "--root", str(root)],
        stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        assert cluster.stdout is not None
        printed: list[str] = []
        for line in cluster.stdout:
            printed.append(line.rstrip("\n"))
            if line.startswith("up;"):
                break
        (example,) = [p for p in printed if p.startswith("# the example: ")]
        token = next(p.split("=", 1)[1] for p in printed if "SIDECAR_TOKEN=" in p)
        urls = example.split("replicas_agent.py ")[1].split()
        proc = subprocess.run(
            [sys.executable, str(EXAMPLES / "replicas_agent.py"), *urls],
            capture_output=True, text=True, env={**env, "SIDECAR_TOKEN": token},
            cwd=tmp_path, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[1] == (
            "2. replica 1: reported 23 sessions: 3 archived (the refused exchanges), 20 recorded"
        )
        assert lines[2].startswith("3. replica 2 (") and lines[2].endswith("): BLOCK")
        assert "has status 'pending'" in lines[3]
        assert lines[4].startswith("   audit on replica 2: cold://chains/")
        assert lines[-2] == "4. replica 2: exchange_item on the delivered #W31: ALLOW"
        assert lines[-1] == "5. archive digest: the same on both"
    finally:
        cluster.send_signal(signal.SIGTERM)
        assert cluster.wait(timeout=120) == 0
    assert cluster.stdout is not None
    assert cluster.stdout.read().strip().endswith("stopped")
    cluster.stdout.close()
    # every replica's server.json was withdrawn by its clean stop
    assert not list(root.glob("replica-*/server.json"))
