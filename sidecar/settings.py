"""One frozen settings object, parsed once at start-up.

Every setting has a default, an environment variable (prefix ``SIDECAR_``) and a help
line in :data:`SETTINGS`; invalid values fail loudly with the variable's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from sidecar.errors import ConfigError

EmbedderName = Literal["minilm", "minilm-onnx", "minilm-torch", "hashing"]
EMBEDDERS: tuple[str, ...] = ("minilm", "minilm-onnx", "minilm-torch", "hashing")
DEFAULT_EXACT_LIMIT = 15_000
"""Tools up to which lookups rank in the process (the crossover measured by
``benchmarks/bench_embed.py``; kept in step with ``indexes.EXACT_LIMIT``)."""
CRASH_POINTS = ("after_intent", "after_cold", "after_mandates", "after_hot_delete", "after_done")
"""The steps of an eviction move after which a test may kill the process."""
MissingField = Literal["block", "allow"]
DEFAULT_EVICT_MIN_CHAINS = 2
"""Distinct abandoned chains a tool must drive before it is evicted, by default."""


@dataclass(frozen=True)
class Settings:
    home: Path = Path(".sidecar")
    embedder: EmbedderName = "minilm"
    model_cache: Path | None = None
    query_cache: int = 4096
    exact_limit: int = DEFAULT_EXACT_LIMIT
    reproduce_threshold: int = 2
    missing_field: MissingField = "block"
    chroma_url: str | None = None
    collection: str = "tools"
    max_warnings_per_tool: int = 3
    revoker: str = "record-only"
    revocation_allow_link_local: bool = False
    evict_on_report: bool = False
    evict_batch_size: int = 500
    evict_min_chains: int = DEFAULT_EVICT_MIN_CHAINS
    retire_after: int = 3
    constraint_max_age_days: float = 0.0
    max_step_bytes: int = 65_536
    keep_outputs: bool = True
    otlp_conversation_idle_s: float = 300.0
    otlp_max_request_bytes: int = 20 * 1_048_576
    otlp_max_memory_bytes: int = 256 * 1_048_576
    crash_at: str | None = None

    @property
    def model_cache_path(self) -> Path:
        """Where the ONNX build of the model is kept: shared by every home of the user,
        so it is built once per machine, not once per home."""
        if self.model_cache is not None:
            return self.model_cache
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "sidecar" / "models"

    @property
    def chroma_path(self) -> Path:
        return self.home / "chroma"

    @property
    def cold_path(self) -> Path:
        return self.home / "cold"

    @property
    def state_path(self) -> Path:
        return self.home / "state.sqlite"

    def with_(self, **changes: Any) -> Settings:
        return validate(replace(self, **changes))

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``SIDECAR_*`` variables, then explicit ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"SIDECAR_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return validate(cls(**values))


SETTINGS: dict[str, str] = {
    "home": "folder holding the hot index, the cold archive and the state database",
    "embedder": "'minilm' (all-MiniLM-L6-v2 under onnxruntime, the default; also "
    "'minilm-onnx'), 'minilm-torch' (the same model under torch, the reference) or "
    "'hashing' (tests only)",
    "model_cache": "folder for the ONNX build of the model (default ~/.cache/sidecar/models)",
    "query_cache": "query vectors kept in memory, most recent first (0: off)",
    "exact_limit": "hot-index size up to which lookups rank in the process (0: always Chroma)",
    "reproduce_threshold": "times an unknown-kind failure must be seen before it is archived",
    "missing_field": "'block' (fail closed) or 'allow' when a condition's field is missing",
    "chroma_url": "http://host:port of a Chroma server; unset means the embedded store",
    "collection": "name of the Chroma collection holding active tools",
    "max_warnings_per_tool": "fatal sequences named in one lookup hit's warnings, at most",
    "revoker": "'record-only' (mandates stay pending for operators) or 'rfc7009' (HTTP)",
    "revocation_allow_link_local": "let the revoker call link-local / metadata addresses",
    "evict_on_report": "run the eviction after each archived report (true/false)",
    "evict_batch_size": "tools moved per journaled batch during an eviction",
    "evict_min_chains": "dead-end sessions through a tool before it is evicted",
    "retire_after": "successes matching a constraint that retire it (one contests it)",
    "constraint_max_age_days": "retire constraints no failure confirmed for this long (0: off)",
    "max_step_bytes": "largest stored arguments or output of one reported step, as JSON",
    "keep_outputs": "keep reported steps' outputs in the cold record (true/false)",
    "otlp_conversation_idle_s": "seconds a conversation seen in traces stays open for its "
    "later traces (each of its traces is reported when it closes)",
    "otlp_max_request_bytes": "largest OTLP/HTTP trace request, once inflated (413 past it)",
    "otlp_max_memory_bytes": "bytes the trace intake may hold in open traces, sessions and "
    "requests (503 with Retry-After past it)",
    "crash_at": "testing only: SIGKILL the process at this named eviction crash point",
}


def _parse(name: str, raw: str) -> Any:
    if name in ("constraint_max_age_days", "otlp_conversation_idle_s"):
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"SIDECAR_{name.upper()} must be a number, got {raw!r}") from None
    if name in {
        "reproduce_threshold",
        "max_warnings_per_tool",
        "evict_batch_size",
        "evict_min_chains",
        "retire_after",
        "max_step_bytes",
        "query_cache",
        "exact_limit",
        "otlp_max_request_bytes",
        "otlp_max_memory_bytes",
    }:
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"SIDECAR_{name.upper()} must be an integer, got {raw!r}") from None
    if name in ("home", "model_cache"):
        return Path(raw)
    if name in ("evict_on_report", "keep_outputs", "revocation_allow_link_local"):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"SIDECAR_{name.upper()} must be true or false, got {raw!r}")
    return raw


def validate(s: Settings) -> Settings:
    if s.embedder not in EMBEDDERS:
        raise ConfigError(f"embedder must be one of {', '.join(EMBEDDERS)}, got {s.embedder!r}")
    for name in ("query_cache", "exact_limit"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    if s.missing_field not in ("block", "allow"):
        raise ConfigError(f"missing_field must be 'block' or 'allow', got {s.missing_field!r}")
    if not isinstance(s.reproduce_threshold, int) or s.reproduce_threshold < 1:
        raise ConfigError(f"reproduce_threshold must be >= 1, got {s.reproduce_threshold!r}")
    if not isinstance(s.evict_batch_size, int) or s.evict_batch_size < 1:
        raise ConfigError("evict_batch_size must be >= 1")
    if (
        isinstance(s.evict_min_chains, bool)
        or not isinstance(s.evict_min_chains, int)
        or s.evict_min_chains < 1
    ):
        raise ConfigError(f"evict_min_chains must be >= 1, got {s.evict_min_chains!r}")
    for name in ("retire_after", "max_step_bytes"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    idle = s.otlp_conversation_idle_s
    if isinstance(idle, bool) or not isinstance(idle, int | float) or not 0 < idle < 1e7:
        raise ConfigError(f"otlp_conversation_idle_s must be a number > 0, got {idle!r}")
    for name in ("otlp_max_request_bytes", "otlp_max_memory_bytes"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
            raise ConfigError(f"{name} must be an integer >= 1024, got {value!r}")
    if s.otlp_max_memory_bytes < s.otlp_max_request_bytes:
        raise ConfigError("otlp_max_memory_bytes must be at least otlp_max_request_bytes")
    age = s.constraint_max_age_days
    if isinstance(age, bool) or not isinstance(age, int | float) or not 0 <= age < 1e6:
        raise ConfigError(f"constraint_max_age_days must be a number >= 0, got {age!r}")
    if not isinstance(s.max_warnings_per_tool, int) or s.max_warnings_per_tool < 0:
        raise ConfigError("max_warnings_per_tool must be >= 0")
    if s.chroma_url is not None and not s.chroma_url.startswith(("http://", "https://")):
        raise ConfigError(f"chroma_url must start with http:// or https://, got {s.chroma_url!r}")
    if s.revoker not in ("record-only", "rfc7009"):
        raise ConfigError(f"revoker must be 'record-only' or 'rfc7009', got {s.revoker!r}")
    if s.crash_at is not None and s.crash_at not in CRASH_POINTS:
        raise ConfigError(f"crash_at must be one of {', '.join(CRASH_POINTS)}")
    if not s.collection or len(s.collection) < 3:
        raise ConfigError("collection must be at least 3 characters")
    model_cache = None if s.model_cache is None else Path(s.model_cache)
    return replace(s, home=Path(s.home), model_cache=model_cache)
