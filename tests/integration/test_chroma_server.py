"""The sidecar on a Chroma server (``chroma_url``): two sidecar processes' worth of
library objects share the server and one home (cold store, state)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.app.lock import LockBusy
from tests.sidecar.helpers import abandoned


def test_sidecar_on_a_chroma_server(tmp_path: Path, chroma_server: tuple[str, int]) -> None:
    host, port = chroma_server
    settings = {
        "home": tmp_path / "home",
        "chroma_url": f"http://{host}:{port}",
        "collection": f"sc-{uuid.uuid4().hex}",
        "evict_min_chains": 1,
    }
    with (
        Sidecar.open(embedder=HashingEmbedder(), **settings) as one,
        Sidecar.open(embedder=HashingEmbedder(), **settings) as two,
    ):
        one.add_tools([Tool("a", "fetch pages"), Tool("b", "parse pages"), Tool("c", "extract")])
        assert {t.tool_id for t in two.list_tools()} == {"a", "b", "c"}
        chain = two.report(abandoned(["a", "b", "c"], "HTTP 400"))
        assert not one.check(["a", "b", "c"]).safe  # the other process's archive
        with one._home.evict_lock(), pytest.raises(LockBusy):
            two.evict()  # the eviction lock spans processes sharing the home
        report = two.evict()
        assert {d.tool_id for d in report.evicted} == {"a", "b"}
        assert [h.tool_id for h in one.search("pages", k=3).hits] == ["c"]
        assert one.audit(report.pointers["a"])["chain_ids"] == [chain.chain_id]
    assert not (tmp_path / "home" / "chroma").exists()  # nothing embedded was opened
