"""The README's own commands, run as a newcomer pastes them: the worked example on real
agent runs and the classic case, each in a fresh home, with no server and beside a
running ``sidecar serve`` (which the CLI then goes through); what each command prints
is compared with what the README shows, and any drift fails.

A command block (```sh) is split into commands; a command's expected output is the
``# `` comment lines after it, or, for the worked example, the plain block that follows
the command block.  In expected lines ``…`` and ``...`` stand for any text, and a line
holding only ``...`` for any number of lines.
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.docs import blocks, commands, matches, section

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DATASETS = ROOT.parent / "shared" / "datasets"
BIN = Path(sys.executable).parent


def run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env["SIDECAR_HOME"] = str(home)
    env["SIDECAR_MODEL_CACHE"] = os.environ["SIDECAR_MODEL_CACHE"]  # the suite's own
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    return env


@contextmanager
def serving(home: Path, env: dict[str, str]) -> Iterator[None]:
    """``sidecar serve`` on ``home`` (the CLI finds it through the home's server.json)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(BIN / "sidecar"), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (home / "server.json").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder like the repository's root for the README's relative paths: the
    datasets at ``../shared/datasets``, the demo catalog at ``sidecar/demo``."""
    if not DATASETS.is_dir():
        pytest.skip(f"the datasets are not at {DATASETS} (the worked example reads them)")
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "datasets").symlink_to(DATASETS)
    (work / "sidecar").symlink_to(ROOT / "sidecar")
    return work


@pytest.mark.parametrize("server", ["no server", "beside a server"])
def test_the_worked_example_runs_as_written(workdir: Path, server: str) -> None:
    sh, shown = [b for b in blocks(section("A worked example")) if b[0] in ("sh", "")][:2]
    assert sh[0] == "sh" and shown[0] == ""
    home = workdir / "home"
    env = environment(home)
    subprocess.run([str(BIN / "sidecar"), "tools", "list"], env=env, capture_output=True)
    out: list[str] = []
    with serving(home, env) if server == "beside a server" else _nothing():
        codes = []
        for command, _ in commands(sh[1]):
            done = run(command, workdir, env)
            assert "Traceback" not in done.stderr, (command, done.stderr)
            out += done.stdout.splitlines()
            codes.append(done.returncode)
    assert codes[:-1] == [0] * (len(codes) - 1), (codes, out)
    assert codes[-1] == 3  # the check blocks
    assert matches(shown[1], out), "\n".join(out)
    # each command wrote the file the next one read
    assert {p.name for p in workdir.iterdir()} >= {
        "tau2-tools.jsonl",
        "reports.jsonl",
        "steps.json",
    }


@pytest.mark.parametrize("server", ["no server", "beside a server"])
def test_the_classic_case_runs_as_written(workdir: Path, server: str) -> None:
    (sh,) = [b for b in blocks(section("The classic case")) if b[0] == "sh"]
    home = workdir / "home"
    env = environment(home)
    with serving(home, env) if server == "beside a server" else _nothing():
        for command, expected in commands(sh[1]):
            done = run(command, workdir, env)
            assert "Traceback" not in done.stderr, (command, done.stderr)
            wanted = [e for e in expected if not e.startswith("(exit")]
            shown = [e.replace(" (exit 3)", "") for e in wanted]
            assert matches(shown, done.stdout.splitlines()), (command, done.stdout, expected)
            if any("(exit 3)" in e for e in expected):
                assert done.returncode == 3, command
            else:
                assert done.returncode == 0, (command, done.stderr)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def test_the_matcher_both_ways() -> None:
    assert matches(["a", "...", "c …"], ["a", "b", "b", "c d"])
    assert not matches(["a", "c"], ["a", "b", "c"])  # no gap where none is shown
    assert matches(["1. x  (0.4…)  y"], ["1. x  (0.487)  y"])
    assert not matches(["1. x"], ["2. x"])
    assert matches(['{"a": 1,', ' "b": 2}'], ['{"a": 1, "b": 2}'])  # wrapped in the README
    cmds = commands(["echo 'a", "b' | tr -d x", "# ab", "ls \\", "  -l", "# out"])
    assert cmds == [("echo 'a\nb' | tr -d x", ["ab"]), ("ls \\\n  -l", ["out"])]


def test_the_library_snippets_run_as_written(tmp_path: Path) -> None:
    """The library's snippet prints what the README shows; beside a running server it is
    refused with a message that says what to do there, and the ``RemoteSidecar`` snippet
    that follows it runs as written and answers from the same memory."""
    snippets = blocks(section("The library"))
    (local, local_out), (remote, remote_out) = [
        (code, shown)
        for (lang, code), (_, shown) in itertools.pairwise(snippets)
        if lang == "python"
    ]
    (tmp_path / "local.py").write_text("\n".join(local))
    (tmp_path / "remote.py").write_text("\n".join(remote))
    env = environment(tmp_path / ".sidecar")
    env.pop("SIDECAR_HOME")  # the snippets name their home: ./.sidecar
    python = str(BIN / "python")
    done = run(f"{python} local.py", tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert matches(local_out, done.stdout.splitlines()), done.stdout
    with serving(tmp_path / ".sidecar", {**env, "SIDECAR_HOME": str(tmp_path / ".sidecar")}):
        refused = run(f"{python} local.py", tmp_path, env)
        assert refused.returncode != 0 and "Busy" in refused.stderr
        assert "RemoteSidecar(" in refused.stderr and "server.json" not in refused.stderr
        done = run(f"{python} remote.py", tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert matches(remote_out, done.stdout.splitlines()), done.stdout


def test_the_gateways_exit_code_is_the_one_the_table_gives() -> None:
    from sidecar.errors import EXIT_GATEWAY

    said = re.findall(r"the gateway exits (\d+)", section("No code: the MCP gateway"))
    table = re.findall(r"(\d+) `gateway`: it cannot serve", section("The CLI"))
    assert said == table == [str(EXIT_GATEWAY)]
