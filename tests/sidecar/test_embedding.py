"""The sidecar's embedding path: which embedder a setting names, the query cache in
front of it, and the exact tier kept in step with writes from this process and others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import indexes
from indexes import CachedEmbedder, HashingEmbedder, MiniLMEmbedder, OnnxMiniLMEmbedder
from sidecar import Sidecar
from sidecar.app.hot import make_embedder
from sidecar.errors import ConfigError
from sidecar.model import Tool
from sidecar.settings import DEFAULT_EXACT_LIMIT, Settings
from tests.faults.faults import unwritable_folder


def tool(tool_id: str, description: str) -> Tool:
    return Tool(tool_id=tool_id, description=description)


TOOLS = [
    tool("weather_current", "Current weather conditions for a city."),
    tool("currency_converter", "Convert an amount between two currencies."),
    tool("email_send", "Send an email message to a recipient."),
]


# ---- settings -------------------------------------------------------------------------
def test_embedder_names_and_their_settings() -> None:
    for name in ("minilm", "minilm-onnx", "minilm-torch", "hashing"):
        assert Settings.load(env={"SIDECAR_EMBEDDER": name}).embedder == name
    s = Settings.load(env={"SIDECAR_QUERY_CACHE": "0", "SIDECAR_EXACT_LIMIT": "0"})
    assert (s.query_cache, s.exact_limit) == (0, 0)
    assert Settings.load(env={}).exact_limit == DEFAULT_EXACT_LIMIT == indexes.EXACT_LIMIT


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SIDECAR_EMBEDDER", "minilm-gpu"),
        ("SIDECAR_QUERY_CACHE", "-1"),
        ("SIDECAR_EXACT_LIMIT", "lots"),
        ("SIDECAR_EXACT_LIMIT", "-5"),
    ],
)
def test_bad_embedding_settings_fail_loudly(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match="(?i)" + variable.removeprefix("SIDECAR_")):
        Settings.load(env={variable: value})


def test_the_model_cache_is_per_user_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/me")
    assert Settings.load(env={}).model_cache_path == Path("/var/cache/me/sidecar/models")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert Settings.load(env={}).model_cache_path == Path.home() / ".cache/sidecar/models"
    s = Settings.load(env={"SIDECAR_MODEL_CACHE": "/srv/models"})
    assert s.model_cache_path == Path("/srv/models")


# ---- which embedder --------------------------------------------------------------------
def test_the_default_is_the_onnx_model_behind_a_query_cache(tmp_path: Path) -> None:
    s = Settings.load(env={}, model_cache=tmp_path / "models")
    embedder = make_embedder(s)
    assert isinstance(embedder, CachedEmbedder)
    assert isinstance(embedder.inner, OnnxMiniLMEmbedder)
    # same name as the torch model: one index, whichever built it
    assert embedder.name == MiniLMEmbedder().name
    assert not (tmp_path / "models").exists()  # nothing is built before first use


def test_torch_stays_the_reference_and_the_cache_can_be_off() -> None:
    torch = make_embedder(Settings.load(env={"SIDECAR_EMBEDDER": "minilm-torch"}))
    assert isinstance(torch, CachedEmbedder) and isinstance(torch.inner, MiniLMEmbedder)
    plain = make_embedder(
        Settings.load(env={"SIDECAR_EMBEDDER": "hashing", "SIDECAR_QUERY_CACHE": "0"})
    )
    assert isinstance(plain, HashingEmbedder)


@pytest.mark.model
def test_a_home_built_by_torch_is_searched_by_the_default_path(
    tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    home = tmp_path / "home"
    with Sidecar.open(embedder=minilm, home=home) as sc:
        sc.add_tools(TOOLS)
    with Sidecar.open(home=home) as sc:  # the default: ONNX, cached queries
        assert isinstance(sc.embedder, CachedEmbedder)
        assert sc.search("will it rain in Lisbon today", k=1).hits[0].tool_id == "weather_current"
        assert sc.search("  Will it RAIN in lisbon today ", k=1).hits[0].tool_id == (
            "weather_current"
        )
        assert len(sc.embedder) == 1  # the second query was the first, normalised


# ---- the exact tier follows every write ------------------------------------------------
class CountingLoads:
    """Counts the exact tier's loads from Chroma."""

    def __init__(self, index: Any) -> None:
        self.loads = 0
        original = index._load_vectors

        def load(limit: int) -> Any:
            self.loads += 1
            return original(limit)

        index._load_vectors = load


def ids(sc: Sidecar, query: str, k: int = 5) -> list[str]:
    return [h.tool_id for h in sc.search(query, k=k).hits]


def test_own_writes_update_the_tier_without_reloading_it(home: Path) -> None:
    with Sidecar.open(home=home, embedder=HashingEmbedder()) as sc:
        sc.add_tools(TOOLS)
        assert sc.index.exact_limit == DEFAULT_EXACT_LIMIT
        counter = CountingLoads(sc.index)
        assert "email_send" in ids(sc, "send an email")
        assert counter.loads == 1
        sc.add_tools([tool("sms_send", "Send a text message to a phone number.")])
        assert "sms_send" in ids(sc, "Send a text message to a phone number.")
        assert counter.loads == 1


def test_another_process_write_reloads_the_tier(home: Path) -> None:
    """A reader keeps its tier until the owner writes: then it reads the vectors again
    rather than serve a stale ranking (a new tool missing, an old one ranked)."""
    with Sidecar.open(home=home, embedder=HashingEmbedder()) as owner:
        owner.add_tools(TOOLS)
        reader = Sidecar.open(home=home, embedder=HashingEmbedder(), read_only=True)
        try:
            counter = CountingLoads(reader.index)
            query = "Translate text between two languages."
            assert "translator" not in ids(reader, query)
            assert counter.loads == 1
            ids(reader, query)
            assert counter.loads == 1  # nothing changed: the tier is kept
            owner.add_tools([tool("translator", query)])
            assert ids(reader, query)[0] == "translator"
            assert counter.loads == 2
        finally:
            reader.close()


def test_the_exact_tier_ranks_no_worse_than_chroma(home: Path) -> None:
    """Exact ranking is the true top k: score for score, never below the approximate
    index's (the hashing embedder makes many ties, so ids may differ among equals)."""
    catalog = [
        tool(f"tool_{i:03d}", f"Operation number {i} on records of kind {i % 7}.")
        for i in range(120)
    ]
    queries = ["records of kind 3", "operation number 42", "kind 6 records"]
    # the dense ranking alone: the fused one is not ordered by similarity
    with Sidecar.open(home=home, embedder=HashingEmbedder(), hybrid=False) as sc:
        sc.add_tools(catalog)
        exact = [[h.score for h in sc.search(q, k=10).hits] for q in queries]
        sc.index.exact_limit = 0
        chroma = [[h.score for h in sc.search(q, k=10).hits] for q in queries]
    for mine, theirs in zip(exact, chroma, strict=True):
        assert mine == sorted(mine, reverse=True) and len(mine) == 10
        assert all(a >= b - 1e-5 for a, b in zip(mine, theirs, strict=True))


def test_written_elsewhere_tells_own_revisions_from_others(home: Path) -> None:
    with Sidecar.open(home=home, embedder=HashingEmbedder()) as a:
        revisions = a.state.revisions
        before = revisions.revisions()[1]
        for _ in range(2):
            with a.state.tx() as tx:
                revisions.bump_tools(tx)
        now = revisions.revisions()[1]
        assert not revisions.written_elsewhere(before, now)
        with Sidecar.open(home=home.parent / "other", embedder=HashingEmbedder()) as b:
            assert b.state.revisions.writer != revisions.writer
        # another writer's revision on the same database
        with a.state.tx() as db:
            db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='tools_rev'")
        assert revisions.written_elsewhere(now, now + 1)
        assert revisions.written_elsewhere(-1, now)  # nothing seen yet: reload


@pytest.mark.slow
def test_an_unwritable_model_cache_still_embeds(tmp_path: Path) -> None:
    """A read-only or full disk where the ONNX build would be cached: the model is
    built for the process instead, and nothing is written."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with unwritable_folder(cache):
        embedder = OnnxMiniLMEmbedder(cache / "models")
        vector = embedder.embed_query("send an email")
        assert vector.shape == (384,) and np.isfinite(vector).all()
    assert list(cache.iterdir()) == []
