"""What the commands read: steps files and report lines, JSON in UTF-8.  A file that is
not UTF-8, not JSON or not of the expected shape is a usage error (exit 2) that says
where, never a traceback."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.errors import UsageError

REPORT_BATCH = 500
"""Report lines handed to the library (or the server's client) per call."""


@dataclass(frozen=True)
class StepsFile:
    """A session as ``--steps FILE`` gives it: its steps, what the agent was asked, and
    the call about to be made (``next``), each when the file has it."""

    steps: list[Any] | None = None
    task_input: str | None = None
    next: tuple[str, dict[str, Any]] | None = None


def read_text(source: str) -> str:
    """A file's text (``-``: stdin), or a usage error that says what is wrong with it."""
    try:
        if source == "-":
            raw = getattr(sys.stdin, "buffer", None)
            return sys.stdin.read() if raw is None else utf8(raw.read(), source)
        return utf8(Path(source).read_bytes(), source)
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from None


def utf8(data: bytes, source: str, line: int | None = None) -> str:
    try:
        return data.decode("utf-8-sig" if line in (None, 1) else "utf-8")
    except UnicodeDecodeError as exc:
        where = f"line {line}, byte {exc.start + 1}" if line else f"byte {exc.start + 1}"
        raise UsageError(
            f"{source}: not UTF-8 text ({where} is 0x{data[exc.start]:02x}); the sidecar "
            "reads JSON in UTF-8"
        ) from None


def read_steps(source: str | None) -> StepsFile:
    """A session from a JSON file: a list of steps, or an object with ``steps`` and
    maybe ``task_input`` and ``next`` (what ``python -m benchmarks.tau2 steps`` writes,
    and what ``POST /v1/check`` takes), or ``-`` for stdin."""
    if source is None:
        return StepsFile()
    text = read_text(source)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON ({exc.msg})") from None
    if isinstance(data, list):
        return StepsFile(data)
    if not isinstance(data, dict) or "steps" not in data:
        raise UsageError(f"{source}: expected a list of steps or an object with `steps`")
    task = data.get("task_input")
    return StepsFile(data["steps"], task if isinstance(task, str) else None, _next(data, source))


def _next(data: dict[str, Any], source: str) -> tuple[str, dict[str, Any]] | None:
    nxt = data.get("next")
    if nxt is None:
        return None
    tool = nxt.get("tool") if isinstance(nxt, dict) else None
    arguments = nxt.get("arguments", {}) if isinstance(nxt, dict) else None
    if not isinstance(tool, str) or not isinstance(arguments, dict):
        raise UsageError(f'{source}: `next` must be {{"tool": NAME, "arguments": {{...}}}}')
    return tool, arguments


class BadLine:
    """A report line that is not JSON, and why."""

    def __init__(self, msg: str) -> None:
        self.msg = msg


def report_lines(source: str) -> tuple[int | None, Iterator[tuple[int, str]]]:
    """How many report lines ``source`` holds, and the lines with their numbers.  A file
    is decoded whole before its first line is handed out, so one that is not UTF-8 is
    refused (exit 2) before anything is reported.  Standard input (``-``) is read as it
    comes, batch by batch (a producer may write sessions as they end): its count is not
    known, and a line that is not UTF-8 stops it there."""
    if source == "-":
        return None, _stdin_lines()
    path = Path(source)
    try:
        with path.open("rb") as handle:
            total = sum(1 for n, line in enumerate(handle, 1) if utf8(line, source, n).strip())
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from None

    def lines() -> Iterator[tuple[int, str]]:
        with path.open("rb") as handle:
            for n, line in enumerate(handle, 1):
                text = utf8(line, source, n)
                if text.strip():
                    yield n, text

    return total, lines()


def _stdin_lines() -> Iterator[tuple[int, str]]:
    raw = getattr(sys.stdin, "buffer", None)
    if raw is None:  # a text stream put in its place
        lines = ((n, line) for n, line in enumerate(sys.stdin, 1))
    else:
        lines = ((n, utf8(line, "stdin", n)) for n, line in enumerate(raw, 1))
    for n, text in lines:
        if text.strip():
            yield n, text


def batches(lines: Iterator[tuple[int, str]]) -> Iterator[list[tuple[int, Any]]]:
    batch: list[tuple[int, Any]] = []
    for lineno, line in lines:
        try:
            batch.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            batch.append((lineno, BadLine(exc.msg)))
        if len(batch) == REPORT_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
