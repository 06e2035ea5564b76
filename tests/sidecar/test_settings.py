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


def test_the_revision_lease_is_on_by_default_and_can_be_turned_off() -> None:
    assert Settings.load(env={}).revision_lease_ms == 2000.0
    assert Settings.load(env={"SIDECAR_REVISION_LEASE_MS": "0"}).revision_lease_ms == 0
    assert Settings.load(env={"SIDECAR_REVISION_LEASE_MS": "750.5"}).revision_lease_ms == 750.5
    with pytest.raises(ConfigError, match="SIDECAR_REVISION_LEASE_MS must be a number"):
        Settings.load(env={"SIDECAR_REVISION_LEASE_MS": "soon"})


def test_a_process_migrates_unless_told_never() -> None:
    assert Settings.load(env={}).migrate == "auto"
    assert Settings.load(env={"SIDECAR_MIGRATE": "never"}).migrate == "never"


def test_the_cold_call_deadline_has_the_cold_stores_default_and_bounds() -> None:
    from cold_store.delta import DEFAULT_CALL_DEADLINE_S

    assert Settings.load(env={}).cold_call_deadline == DEFAULT_CALL_DEADLINE_S
    assert Settings.load(env={"SIDECAR_COLD_CALL_DEADLINE": "45"}).cold_call_deadline == 45.0
    with pytest.raises(ConfigError, match="SIDECAR_COLD_CALL_DEADLINE must be a number"):
        Settings.load(env={"SIDECAR_COLD_CALL_DEADLINE": "soon"})


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
        ("SIDECAR_MIGRATE", "sometimes", "migrate must be 'auto' or 'never'"),
        ("SIDECAR_CHROMA_URL", "localhost:8000", "chroma_url"),
        ("SIDECAR_REVOKER", "email", "revoker"),
        ("SIDECAR_COLLECTION", "ab", "collection"),
        ("SIDECAR_STEP_RATE", "-1", "step_rate must be an integer >= 0"),
        ("SIDECAR_NEW_TOOL_RATE", "many", "SIDECAR_NEW_TOOL_RATE must be an integer"),
        ("SIDECAR_EVIDENCE_BUDGET", "-5", "evidence_budget must be an integer >= 0"),
    ],
)
def test_bad_values_fail_loudly(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.load(env={variable: value})


@pytest.mark.parametrize("value", [0, True, 1.5])
def test_with_validates(value: object) -> None:
    with pytest.raises(ConfigError, match="evict_min_chains"):
        Settings.load(env={}).with_(evict_min_chains=value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"query_cache": -1}, "query_cache must be an integer >= 0, got -1"),
        ({"exact_limit": True}, "exact_limit must be an integer >= 0, got True"),
        ({"abstain_below": 1.5}, "abstain_below must be a number from 0 to 1, got 1.5"),
        ({"chain_weight": 101}, "chain_weight must be a number from 0 to 100, got 101"),
        ({"hybrid": 1}, "hybrid must be true or false, got 1"),
        ({"retire_after": 0}, "retire_after must be an integer >= 1, got 0"),
        ({"constraint_max_age_days": -1}, "constraint_max_age_days must be a number >= 0"),
        ({"report_rate": -1}, "report_rate must be an integer >= 0, got -1"),
        ({"step_rate": 1.5}, "step_rate must be an integer >= 0, got 1.5"),
        ({"new_tool_rate": True}, "new_tool_rate must be an integer >= 0, got True"),
        ({"evidence_budget": -1}, "evidence_budget must be an integer >= 0, got -1"),
        ({"max_step_bytes": 0}, "max_step_bytes must be an integer >= 1, got 0"),
        ({"session_idle_s": 0}, "session_idle_s must be a number > 0"),
        ({"session_max_steps": 0}, "session_max_steps must be an integer >= 1"),
        ({"otlp_max_request_bytes": 1023}, "otlp_max_request_bytes must be an integer >= 1024"),
        (
            {"otlp_max_request_bytes": 4096, "otlp_max_memory_bytes": 2048},
            "otlp_max_memory_bytes must be at least otlp_max_request_bytes",
        ),
        ({"trusted_sources": "gateway,no spaces"}, "trusted_sources: 'no spaces' is not a"),
        ({"revision_cache_ms": 60_001}, "revision_cache_ms must be a number from 0 to 60000"),
        ({"revision_lease_ms": 299}, "revision_lease_ms must be 0 or a number from 300 to 30000"),
        ({"revision_lease_ms": 30_001}, "revision_lease_ms must be 0 or a number from 300"),
        ({"revision_lease_ms": True}, "revision_lease_ms must be 0 or a number from 300"),
        (
            {"database_url": "mysql://user:pw@host/db"},
            "database_url must be a URL starting with postgresql:// (or postgres://), got "
            "'mysql'://...",
        ),
        ({"cold_url": "ftp://host/archive"}, "cold_url: "),
        ({"cold_call_deadline": 0}, "cold_call_deadline must be a number of seconds from 1"),
        ({"cold_call_deadline": 3601}, "cold_call_deadline must be a number of seconds from 1"),
        ({"gateway_call_timeout": -1}, "gateway_call_timeout must be a number >= 0, got -1"),
        ({"gateway_contest_rate": 2}, "gateway_contest_rate must be from 0 to 1, got 2"),
        ({"gateway_contest_budget": 0.5}, "gateway_contest_budget must be an integer >= 0"),
        ({"gateway_link_window": 0}, "gateway_link_window must be a number > 0, got 0"),
        ({"gateway_contest_scope": "some"}, "gateway_contest_scope must be 'safe' or 'all'"),
        ({"tokens_file": "/nonexistent/tokens.json"}, "tokens_file: /nonexistent/tokens.json"),
    ],
)
def test_every_check_names_its_setting(changes: dict[str, object], message: str) -> None:
    """Each concern's check is reached, with the message it has always given."""
    import re

    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings.load(env={}).with_(**changes)


def test_a_database_url_that_is_not_one_is_never_echoed() -> None:
    with pytest.raises(ConfigError, match="something else") as caught:
        Settings.load(env={}).with_(database_url="host=db password=hunter2")
    assert "hunter2" not in str(caught.value)


def test_every_setting_is_a_row_of_the_settings_table() -> None:
    from dataclasses import fields

    table = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `SIDECAR_")}
    assert {f"SIDECAR_{f.name.upper()}" for f in fields(Settings)} <= rows
