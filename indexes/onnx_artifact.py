"""The cached ONNX file of the sentence encoder: built once from the packaged weights,
verified at every load, rebuilt when stale or damaged.

Layout in the cache folder, per variant (``fp32`` or ``int8``)::

    all-MiniLM-L6-v2.int8.onnx     the graph (:mod:`indexes.minilm_graph`) of that variant
    all-MiniLM-L6-v2.int8.json     the manifest: recipe, the sources' stat (size, mtime,
                                   ctime, inode) and sha256, the artifact's size and sha256
    all-MiniLM-L6-v2.int8.lock     held while building, so that processes starting
                                   together build once

Both files are published atomically (a temporary name, fsync, rename, then the folder
fsynced), the artifact before its manifest.  A load trusts the artifact only when the
manifest names this recipe and variant, the sources still hash to what the manifest
records (re-hashed only when their stat moved: hashing the 90 MB of weights costs more
than loading the model), and the artifact's bytes hash to the recorded sha256.
Anything else (no manifest, other weights, another recipe, a torn or edited artifact)
rebuilds it.  Building needs ``onnx`` and ``safetensors``; loading needs neither.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Variant = Literal["fp32", "int8"]
VARIANTS: tuple[Variant, ...] = ("fp32", "int8")
log = logging.getLogger(__name__)

RECIPE = 1
"""Bump when the graph changes: every cached artifact then rebuilds on its next load
(the int8 block size and the opset are recorded beside it, see :func:`recipe`)."""
STEM = "all-MiniLM-L6-v2"
SOURCES = ("model.safetensors", "config.json", "1_Pooling/config.json")
"""What the graph is built from (the tokenizer is read from the model folder at run
time, not baked in)."""


@dataclass(frozen=True)
class Artifact:
    """A verified ONNX model, its bytes ready for onnxruntime."""

    path: Path
    variant: Variant
    sha256: str
    content: bytes
    built: bool
    """Whether this load had to build it."""


def load_artifact(cache_dir: Path, model_dir: Path, variant: Variant) -> Artifact:
    """The verified artifact of ``variant`` under ``cache_dir``, built first if missing,
    stale or damaged.  Raises ``OSError`` / ``ValueError`` when it cannot be built."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        found = _verified(cache_dir, model_dir, variant)
        if found is not None:
            return found
        with _locked(cache_dir / f"{STEM}.{variant}.lock"):
            # another process may have built it while this one waited
            found = _verified(cache_dir, model_dir, variant)
            if found is not None:
                return found
            return _build(cache_dir, model_dir, variant)
    except OSError as exc:
        # a read-only or full disk, a path that cannot be a folder: the model still
        # runs, built for this process only
        log.warning("cannot cache the ONNX model under %s (%s): built in memory", cache_dir, exc)
        return _build(cache_dir, model_dir, variant, publish=False)


def recipe() -> dict[str, int]:
    """What the artifact was built by, as the manifest records it."""
    from indexes.minilm_graph import BLOCK, OPSET

    return {"version": RECIPE, "int8_block": BLOCK, "opset": OPSET}


def artifact_path(cache_dir: Path, variant: Variant) -> Path:
    return cache_dir / f"{STEM}.{variant}.onnx"


def _manifest_path(cache_dir: Path, variant: Variant) -> Path:
    return cache_dir / f"{STEM}.{variant}.json"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _stat(path: Path) -> dict[str, int]:
    # the inode change time cannot be set back by hand: a file written again, copied
    # or replaced never keeps all four, even at the same size and mtime
    st = path.stat()
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
    }


def _sources(model_dir: Path, recorded: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Size, mtime and sha256 of each source file, the hash reused from ``recorded``
    when size and mtime are unchanged."""
    out: dict[str, dict[str, Any]] = {}
    for name in SOURCES:
        stat = _stat(model_dir / name)
        old = (recorded or {}).get(name)
        if isinstance(old, Mapping) and all(old.get(k) == v for k, v in stat.items()):
            out[name] = {**stat, "sha256": old.get("sha256")}
        else:
            out[name] = {**stat, "sha256": _sha256_file(model_dir / name)}
    return out


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _verified(cache_dir: Path, model_dir: Path, variant: Variant) -> Artifact | None:
    manifest = _read_manifest(_manifest_path(cache_dir, variant))
    if manifest is None or manifest.get("recipe") != recipe() or manifest.get("variant") != variant:
        return None
    recorded = manifest.get("sources")
    now = _sources(model_dir, recorded if isinstance(recorded, Mapping) else None)
    if not isinstance(recorded, Mapping) or any(
        now[n]["sha256"] != (recorded.get(n) or {}).get("sha256") for n in SOURCES
    ):
        return None
    expected = manifest.get("artifact") or {}
    path = artifact_path(cache_dir, variant)
    try:
        content = path.read_bytes()
    except OSError:
        return None
    sha = hashlib.sha256(content).hexdigest()
    if len(content) != expected.get("size") or sha != expected.get("sha256"):
        return None
    if any(now[n] != recorded[n] for n in SOURCES):
        # same weights, new mtimes (a reinstall): record them, so that the next load
        # does not hash the weights again
        _publish(_manifest_path(cache_dir, variant), _manifest_bytes(variant, now, content))
    return Artifact(path, variant, sha, content, built=False)


def _manifest_bytes(variant: Variant, sources: Mapping[str, Any], content: bytes) -> bytes:
    manifest = {
        "recipe": recipe(),
        "variant": variant,
        "sources": sources,
        "artifact": {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()},
    }
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def _build(cache_dir: Path, model_dir: Path, variant: Variant, publish: bool = True) -> Artifact:
    from indexes.minilm_graph import build_graph

    sources = _sources(model_dir, None)
    content = build_graph(model_dir, variant).SerializeToString()
    # the weights must not have changed while the graph was built from them
    if _sources(model_dir, sources) != sources:
        raise OSError(f"the model files under {model_dir} changed during the build")
    path = artifact_path(cache_dir, variant)
    if publish:
        _publish(path, content)
        _publish(_manifest_path(cache_dir, variant), _manifest_bytes(variant, sources, content))
    return Artifact(path, variant, hashlib.sha256(content).hexdigest(), content, built=True)


def _publish(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` atomically: a temporary name, fsync, rename, and
    the folder fsynced, so a reader sees the old file or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
