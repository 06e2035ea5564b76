"""Readiness when a shared cold store (Delta on S3) does not answer: ``verify`` then
raises :class:`~cold_store.errors.StoreUnavailable` (it must read the table's log), and
``health`` must report the cold store as the reason it is not ready instead of failing
the probe itself (``/readyz`` answered 500 ``internal`` on every replica of a cluster
whose S3 server was down)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cold_store.errors import StoreUnavailable
from indexes import HashingEmbedder
from sidecar import Sidecar


def test_a_cold_store_that_does_not_answer_makes_the_sidecar_not_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        assert sc.health().ready

        def unreachable(deep: bool = False) -> list[object]:
            raise StoreUnavailable("reading the log of s3://bucket/cold/chains: refused")

        monkeypatch.setattr(sc.cold, "verify", unreachable)
        health = sc.health()
        assert not health.ready
        assert health.checks["cold_store"].startswith("unavailable: reading the log")
