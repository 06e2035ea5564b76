"""Fixtures for the active-index tests: a real embedded Chroma per test, and the ONNX
embedder whose files are built once per session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexes import ActiveIndex, HashingEmbedder, OnnxMiniLMEmbedder
from tests.indexes.helpers import CallRecorder


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding both ONNX variants, built once for the session (the
    tests that rebuild work on copies of it)."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    OnnxMiniLMEmbedder(cache).warm()
    return cache


@pytest.fixture(scope="session")
def onnx_minilm(onnx_cache: Path) -> OnnxMiniLMEmbedder:
    """The default fast embedder: fp32 documents, int8 queries, loaded."""
    embedder = OnnxMiniLMEmbedder(onnx_cache)
    embedder.warm()
    return embedder


@pytest.fixture(params=["embedded", "server"])
def index(
    request: pytest.FixtureRequest, tmp_path: Path, hashing: HashingEmbedder
) -> Iterator[ActiveIndex]:
    """A fresh, empty index, hashing embedder: on an embedded (persistent) Chroma, and
    on a Chroma server (``chroma run``) in its own collection.  Closed after the test:
    a server client left open keeps its connections until the interpreter exits, and
    each is then a ResourceWarning printed after the suite's summary."""
    if request.param == "embedded":
        opened = ActiveIndex.persistent(tmp_path / "chroma", hashing)
    else:
        host, port = request.getfixturevalue("chroma_server")
        opened = ActiveIndex.http(host, port, hashing, collection=f"t-{uuid.uuid4().hex}")
    yield opened
    opened.close()


@pytest.fixture
def small_batch_index(index: ActiveIndex) -> tuple[ActiveIndex, CallRecorder]:
    """The ``index`` fixture with a max batch of 3 and its Chroma calls recorded."""
    recorder = CallRecorder(index._collection)
    index._collection = recorder
    index._store.max_batch = 3
    return index, recorder
