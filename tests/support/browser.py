"""Debian's headless Chromium for the browser tests: found, or installed with apt where
that can be done, with a resolver rule under which no host but the loopback resolves."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

OFFLINE = "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
"""Chromium's resolver rule: no name resolves except the loopback (a CDN script fails)."""


def chromium() -> str:
    """The browser, installed with apt if it is missing; a skip with the reason when it
    cannot be had."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed, and apt-get cannot install it here (not root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:  # the package lists may be missing or stale
        subprocess.run(["apt-get", "update"], capture_output=True, env=env, timeout=900)
        done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    found = shutil.which("chromium")
    if not found:
        pytest.skip(f"chromium could not be installed with apt-get: {done.stderr[-300:]}")
    return found
