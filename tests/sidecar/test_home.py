"""A home that does not exist: a read fails on it, and so does a caller that asks
:func:`~sidecar.app.home.require_home` before a write that must not make one; neither
makes anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.app.home import require_home
from sidecar.errors import HomeNotFound, NotFound
from sidecar.settings import Settings


def test_a_missing_home_is_refused_by_name_and_left_unmade(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    with pytest.raises(HomeNotFound) as raised:
        require_home(Settings.load(home=typo))
    assert raised.value.path == str(typo) and isinstance(raised.value, NotFound)
    assert raised.value.code == "not_found" and raised.value.exit_code == 5
    with pytest.raises(HomeNotFound, match=f"no sidecar home at {typo}"):
        Sidecar.open(embedder=HashingEmbedder(), home=typo, read_only=True)
    assert not typo.exists()
    Sidecar.open(embedder=HashingEmbedder(), home=typo).close()  # a write makes it
    require_home(Settings.load(home=typo))
