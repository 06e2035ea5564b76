"""The cached ONNX files: built once, verified at every load, rebuilt when stale or
damaged, published atomically.  Builds from the real packaged weights (the fp32 variant,
the quicker one to build, unless a test is about the other)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from indexes.onnx_artifact import (
    SOURCES,
    STEM,
    Artifact,
    artifact_path,
    load_artifact,
    recipe,
)
from indexes.onnx_embedder import _model_dir

pytestmark = pytest.mark.model


@pytest.fixture
def cache(tmp_path: Path, onnx_cache: Path) -> Path:
    """A private copy of the session's built cache."""
    target = tmp_path / "cache"
    shutil.copytree(onnx_cache, target)
    return target


def manifest(cache: Path, variant: str = "fp32") -> dict:  # type: ignore[type-arg]
    data: dict = json.loads((cache / f"{STEM}.{variant}.json").read_text())  # type: ignore[type-arg]
    return data


def test_a_built_cache_loads_without_building(cache: Path) -> None:
    for variant in ("fp32", "int8"):
        got = load_artifact(cache, _model_dir(), variant)  # type: ignore[arg-type]
        assert isinstance(got, Artifact)
        assert not got.built
        assert got.sha256 == hashlib.sha256(got.content).hexdigest()
        assert got.sha256 == manifest(cache, variant)["artifact"]["sha256"]
        assert got.path == artifact_path(cache, variant)  # type: ignore[arg-type]


def test_the_manifest_records_the_sources_and_the_recipe(cache: Path) -> None:
    data = manifest(cache)
    assert data["recipe"] == recipe() and data["variant"] == "fp32"
    assert data["recipe"]["int8_block"] == 16
    for name in SOURCES:
        source = _model_dir() / name
        assert data["sources"][name]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
        assert data["sources"][name]["size"] == source.stat().st_size


def test_the_build_is_deterministic(tmp_path: Path, onnx_cache: Path) -> None:
    fresh = load_artifact(tmp_path / "fresh", _model_dir(), "fp32")
    assert fresh.built
    assert fresh.sha256 == manifest(onnx_cache)["artifact"]["sha256"]
    # published atomically: no temporary file is left behind
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == [
        f"{STEM}.fp32.json",
        f"{STEM}.fp32.lock",
        f"{STEM}.fp32.onnx",
    ]


def test_a_torn_artifact_is_rebuilt(cache: Path) -> None:
    path = artifact_path(cache, "fp32")
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    got = load_artifact(cache, _model_dir(), "fp32")
    assert got.built and got.content == good
    assert path.read_bytes() == good


def test_a_flipped_byte_is_rebuilt(cache: Path) -> None:
    path = artifact_path(cache, "fp32")
    good = bytearray(path.read_bytes())
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF  # same size, inside the weights
    path.write_bytes(bytes(bad))
    got = load_artifact(cache, _model_dir(), "fp32")
    assert got.built and got.content == bytes(good)


@pytest.mark.parametrize(
    "damage",
    ["missing", "not json", "other recipe", "other source", "no artifact"],
)
def test_a_stale_or_missing_manifest_rebuilds(cache: Path, damage: str) -> None:
    path = cache / f"{STEM}.fp32.json"
    data = manifest(cache)
    if damage == "missing":
        path.unlink()
    elif damage == "not json":
        path.write_text("{")
    elif damage == "other recipe":
        path.write_text(json.dumps({**data, "recipe": {**recipe(), "int8_block": 32}}))
    elif damage == "other source":
        # the weights the artifact was built from are not the installed ones
        data["sources"]["model.safetensors"] |= {"sha256": "0" * 64, "mtime_ns": 0}
        path.write_text(json.dumps(data))
    else:
        artifact_path(cache, "fp32").unlink()
    got = load_artifact(cache, _model_dir(), "fp32")
    assert got.built
    assert manifest(cache)["artifact"]["sha256"] == got.sha256


def test_changed_weights_rebuild(tmp_path: Path, cache: Path) -> None:
    """A model folder whose weights differ (same names) gets its own graph."""
    model = tmp_path / "model"
    shutil.copytree(_model_dir(), model)
    first = load_artifact(cache, model, "fp32")
    assert not first.built  # same bytes as the packaged model: the cache holds
    config = json.loads((model / "config.json").read_text())
    config["layer_norm_eps"] = 1e-6
    (model / "config.json").write_text(json.dumps(config))
    second = load_artifact(cache, model, "fp32")
    assert second.built and second.sha256 != first.sha256


def test_touched_weights_are_hashed_once_then_trusted(tmp_path: Path, cache: Path) -> None:
    """New file times with the same bytes (a reinstall) keep the artifact and record
    the new stat, so that the following loads do not hash the weights again."""
    model = tmp_path / "model"
    shutil.copytree(_model_dir(), model)
    weights = model / "model.safetensors"
    os.utime(weights, ns=(1_000_000_000, 1_000_000_000))
    got = load_artifact(cache, model, "fp32")
    assert not got.built
    recorded = manifest(cache)["sources"]["model.safetensors"]
    assert recorded["mtime_ns"] == 1_000_000_000
    assert recorded["inode"] == weights.stat().st_ino


def test_replaced_weights_of_the_same_size_and_mtime_are_hashed(
    tmp_path: Path, cache: Path
) -> None:
    """A file replaced by other bytes with its size and mtime put back is still caught
    (its inode change time moved)."""
    model = tmp_path / "model"
    shutil.copytree(_model_dir(), model)
    load_artifact(cache, model, "fp32")
    config = model / "config.json"
    before = config.stat()
    text = config.read_text()
    config.write_text(text.replace('"layer_norm_eps": 1e-12', '"layer_norm_eps": 1e-11'))
    assert config.stat().st_size == before.st_size
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert load_artifact(cache, model, "fp32").built


def test_an_unknown_variant_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_artifact(tmp_path, _model_dir(), "fp16")  # type: ignore[arg-type]


def test_concurrent_first_loads_build_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    results: list[Artifact] = []
    threads = [
        threading.Thread(target=lambda: results.append(load_artifact(cache, _model_dir(), "fp32")))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    assert sum(r.built for r in results) == 1
    assert len({r.sha256 for r in results}) == 1
