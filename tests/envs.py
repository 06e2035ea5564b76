"""Tools the suite runs in virtual environments of their own, beside this one: a tool
whose pins clash with the sidecar's (LangGraph's recipe needs ``mcp`` 1.x, checkov
older ``boto3``, ``networkx`` and ``packaging``) is installed once from its requirements
file under this environment's prefix, and rebuilt when the file changes; ``make test``
builds each before the suite."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest


def requirements_env(requirements: Path, home: Path) -> Path:
    """The ``bin`` folder of the environment at ``home`` holding ``requirements``, built
    (or rebuilt, when the file changed since) here.  Skipped, saying so, only when the
    package registry cannot be reached."""
    wanted = requirements.read_bytes()
    python, stamp = home / "bin" / "python", home / ".requirements-sha256"
    digest = hashlib.sha256(wanted).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return home / "bin"
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True, timeout=300)
    install = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    done = subprocess.run(
        [*install, "-r", str(requirements)], capture_output=True, text=True, timeout=1_200
    )
    if done.returncode != 0:
        unreachable = ("NewConnectionError", "Temporary failure", "Network is unreachable")
        if any(sign in done.stderr for sign in unreachable):
            pytest.skip(f"the package registry cannot be reached to build {home}")
        raise AssertionError(done.stderr[-3000:])
    stamp.write_text(digest)
    return home / "bin"
