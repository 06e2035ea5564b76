"""The benchmarks' harness: the progress bar draws on a terminal only, timing's
percentiles are measured samples, and waiting for a service gives up when it exits."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import progress, results, services, timing


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def run_steps(monkeypatch: pytest.MonkeyPatch, out: io.StringIO, err: io.StringIO) -> str:
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    seen = list(progress.steps("items", range(4)))
    assert seen == [0, 1, 2, 3]
    return err.getvalue()


def test_the_bar_draws_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = run_steps(monkeypatch, Terminal(), Terminal())
    assert "\r[" in drawn and "4/4 items" in drawn and drawn.endswith("\n")


@pytest.mark.parametrize("piped", ["stdout", "stderr", "both"])
def test_the_bar_is_silent_when_not_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, piped: str
) -> None:
    out = io.StringIO() if piped in ("stdout", "both") else Terminal()
    err = io.StringIO() if piped in ("stderr", "both") else Terminal()
    assert run_steps(monkeypatch, out, err) == ""


def test_a_note_takes_the_bars_line_and_the_bar_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = Terminal()
    monkeypatch.setattr(sys, "stdout", Terminal())
    monkeypatch.setattr(sys, "stderr", err)
    for n in progress.steps("items", range(2)):
        if n == 0:
            progress.progress("halfway")
    text = err.getvalue()
    note = text.index("halfway")
    assert "\x1b[K" in text[:note] and "0/2 items" in text[note:]


def test_the_bar_draws_on_a_pseudo_terminal() -> None:
    """A real terminal: the benchmark's own process with both streams on a pty."""
    main, child = pty.openpty()
    code = "from benchmarks.harness.progress import steps\nfor _ in steps('x', range(3)): pass\n"
    env = {**os.environ, "PYTHONPATH": str(results.REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], stdout=child, stderr=child, env=env)
    os.close(child)
    drawn = os.read(main, 4096).decode()
    os.close(main)
    assert proc.returncode == 0 and "3/3 x" in drawn


def test_the_bar_is_silent_under_a_pipe() -> None:
    code = "from benchmarks.harness.progress import steps\nfor _ in steps('x', range(3)): pass\n"
    env = {**os.environ, "PYTHONPATH": str(results.REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env)
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""


def test_a_percentile_is_a_measured_sample() -> None:
    samples = [float(n) for n in range(1, 101)]
    assert timing.percentile(sorted(samples), 0.99) == 100.0
    assert timing.summary(samples)["p99_ms"] in samples
    assert timing.ratio(3.0, 2.0) == 1.5 and timing.ratio(1.0, 0.0) == float("inf")


def test_interleaved_times_every_function_alike() -> None:
    calls: list[str] = []
    samples = timing.interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 4, 1
    )
    assert {k: len(v) for k, v in samples.items()} == {"a": 4, "b": 4}
    assert calls[:4] == ["a", "b", "b", "a"]  # the start rotates


def test_waiting_gives_up_when_the_service_exits(tmp_path: Path) -> None:
    log = tmp_path / "service.log"
    log.write_text("it broke\n")
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(RuntimeError, match=r"(?s)exited.*it broke"):
        services.wait_until(lambda: None, proc, 60, "the service", log)


def test_a_page_names_the_run() -> None:
    result = {
        "command": "python -m benchmarks.run x",
        "mode": "quick",
        "generated_at": "2026-01-01T00:00:00+00:00",
        "elapsed_s": 1.0,
        "machine": {"cpus": 2, "system": "Linux", "machine": "x86_64", "python": "3.11"},
        "load_average_1m": {"before": 0.1, "after": 0.2},
        "question": "what",
        "plots": ["x.png"],
    }
    text = results.page("x", result, "body")
    assert text.startswith("# Benchmark: x\n") and "Question: what." in text
    assert text.endswith("body\n![x.png](x.png)\n")
