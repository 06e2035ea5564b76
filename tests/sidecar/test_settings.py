"""Settings: defaults, ``SIDECAR_*`` parsing, and loud failures on bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.errors import ConfigError
from sidecar.settings import SETTINGS, Settings


def test_defaults() -> None:
    s = Settings.load(env={})
    assert s.home == Path(".sidecar")
    assert (s.embedder, s.reproduce_threshold, s.missing_field) == ("minilm", 2, "block")
    assert (s.evict_min_chains, s.evict_batch_size, s.evict_on_report) == (2, 500, False)
    assert s.chroma_url is None and s.revoker == "record-only"


def test_every_setting_has_a_help_line() -> None:
    assert set(SETTINGS) == set(Settings.__dataclass_fields__)


def test_environment_then_overrides() -> None:
    env = {
        "SIDECAR_HOME": "/tmp/x",
        "SIDECAR_EVICT_MIN_CHAINS": "3",
        "SIDECAR_EVICT_ON_REPORT": "yes",
        "SIDECAR_REPRODUCE_THRESHOLD": "4",
        "SIDECAR_CHROMA_URL": "",  # empty means unset
    }
    s = Settings.load(env=env, evict_min_chains=5)
    assert s.home == Path("/tmp/x")
    assert (s.evict_min_chains, s.evict_on_report, s.reproduce_threshold) == (5, True, 4)
    assert s.chroma_url is None


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SIDECAR_EVICT_MIN_CHAINS", "0", "evict_min_chains must be >= 1"),
        ("SIDECAR_EVICT_MIN_CHAINS", "two", "SIDECAR_EVICT_MIN_CHAINS must be an integer"),
        ("SIDECAR_EVICT_BATCH_SIZE", "0", "evict_batch_size"),
        ("SIDECAR_REPRODUCE_THRESHOLD", "-1", "reproduce_threshold"),
        ("SIDECAR_MAX_WARNINGS_PER_TOOL", "-1", "max_warnings_per_tool"),
        ("SIDECAR_EVICT_ON_REPORT", "maybe", "SIDECAR_EVICT_ON_REPORT must be true or false"),
        ("SIDECAR_EMBEDDER", "bert", "embedder"),
        ("SIDECAR_MISSING_FIELD", "ignore", "missing_field"),
        ("SIDECAR_CHROMA_URL", "localhost:8000", "chroma_url"),
        ("SIDECAR_REVOKER", "email", "revoker"),
        ("SIDECAR_CRASH_AT", "somewhere", "crash_at"),
        ("SIDECAR_COLLECTION", "ab", "collection"),
    ],
)
def test_bad_values_fail_loudly(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.load(env={variable: value})


@pytest.mark.parametrize("value", [0, True, 1.5])
def test_with_validates(value: object) -> None:
    with pytest.raises(ConfigError, match="evict_min_chains"):
        Settings.load(env={}).with_(evict_min_chains=value)
