"""Fixtures for the active-index tests: a real embedded Chroma per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexes import ActiveIndex, HashingEmbedder
from tests.indexes.helpers import CallRecorder


@pytest.fixture
def index(tmp_path: Path, hashing: HashingEmbedder) -> ActiveIndex:
    """A fresh, empty index on an embedded (persistent) Chroma, hashing embedder."""
    return ActiveIndex.persistent(tmp_path / "chroma", hashing)


@pytest.fixture
def small_batch_index(index: ActiveIndex) -> tuple[ActiveIndex, CallRecorder]:
    """The ``index`` fixture with a max batch of 3 and its Chroma calls recorded."""
    recorder = CallRecorder(index._collection)
    index._collection = recorder
    index._max_batch = 3
    return index, recorder
