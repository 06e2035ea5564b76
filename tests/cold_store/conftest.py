"""Fixtures for the cold store tests: stores in tmp_path that are always closed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cold_store import ColdStore

OpenStore = Callable[[], ColdStore]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "cold"


@pytest.fixture
def open_store(root: Path) -> Iterator[OpenStore]:
    """Opens a ColdStore on ``root`` (again and again); every one is closed at teardown."""
    opened: list[ColdStore] = []

    def factory() -> ColdStore:
        store = ColdStore(root)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> ColdStore:
    return open_store()
