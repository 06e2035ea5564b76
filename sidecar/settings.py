"""One frozen settings object, parsed once at start-up.

Every setting has a default, an environment variable (prefix ``SIDECAR_``) and a help
line in :data:`SETTINGS`; invalid values fail loudly with the variable's name.
"""

from __future__ import annotations

import os
import re
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
MissingField = Literal["block", "allow"]
MigrateMode = Literal["auto", "never"]
MIGRATE_MODES: tuple[str, ...] = ("auto", "never")
ContestScope = Literal["safe", "all"]
DEFAULT_EVICT_MIN_CHAINS = 2
"""Distinct abandoned chains a tool must drive before it is evicted, by default."""
DEFAULT_ABSTAIN_BELOW = 0.35
"""Best cosine similarity under which a lookup abstains: on the three catalogs of
``benchmarks/bench_retrieval.py`` it abstained on under 1% of in-scope queries."""
DEFAULT_CHAIN_WEIGHT = 0.3
"""Weight of the completed-chain ranking in the fusion (``sidecar.lookup.ranking``).  Heavier
weights raised multi-tool Comp@5 after a prefix more on StableToolBench
(``benchmarks/bench_retrieval.py``), but let one completed run put a poor match first
(the demo's ``text_summarizer`` for "parse the page HTML" after ``web_search``)."""
DEFAULT_COLD_CALL_DEADLINE = 120.0
"""Seconds one call of a Delta cold table into deltalake may take before it is abandoned
(kept in step with ``cold_store.delta.DEFAULT_CALL_DEADLINE_S``)."""


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
    database_url: str | None = None
    migrate: MigrateMode = "auto"
    cold_url: str | None = None
    cold_call_deadline: float = DEFAULT_COLD_CALL_DEADLINE
    revision_cache_ms: float = 0.0
    revision_lease_ms: float = 2000.0
    collection: str = "tools"
    max_warnings_per_tool: int = 3
    decisions_kept: int = 100_000
    revoker: str = "record-only"
    revocation_allow_link_local: bool = False
    evict_on_report: bool = False
    evict_batch_size: int = 500
    evict_min_chains: int = DEFAULT_EVICT_MIN_CHAINS
    retire_after: int = 3
    constraint_max_age_days: float = 0.0
    max_step_bytes: int = 65_536
    keep_outputs: bool = True
    tokens_file: Path | None = None
    trusted_sources: str = "gateway"
    report_rate: int = 600
    step_rate: int = 60_000
    new_tool_rate: int = 600
    evidence_budget: int = 256 * 1_048_576
    session_idle_s: float = 300.0
    session_max: int = 10_000
    session_max_steps: int = 256
    session_max_bytes: int = 256 * 1_048_576
    otlp_max_request_bytes: int = 20 * 1_048_576
    otlp_max_memory_bytes: int = 256 * 1_048_576
    hybrid: bool = True
    abstain_below: float = DEFAULT_ABSTAIN_BELOW
    chain_weight: float = DEFAULT_CHAIN_WEIGHT
    gateway_call_timeout: float = 30.0
    gateway_contest_rate: float = 0.1
    gateway_contest_budget: int = 1
    gateway_contest_scope: ContestScope = "safe"
    gateway_warning_text: bool = True
    gateway_warn_risk: float = 0.0
    gateway_link_window: float = 120.0
    gateway_approval: str = ""
    gateway_approval_tools: str = ""
    gateway_approval_wait: float = 0.0

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
    def cold_location(self) -> str | Path:
        """Where the cold archive is: ``cold_url``, else the home's ``cold`` folder."""
        return self.cold_url if self.cold_url is not None else self.cold_path

    @property
    def shared(self) -> bool:
        """Whether other processes on other machines may share this memory: the state
        is in PostgreSQL."""
        return self.database_url is not None

    @property
    def state_path(self) -> Path:
        return self.home / "state.sqlite"

    @property
    def tokens_path(self) -> Path:
        """The named tokens: ``tokens_file``, else the home's ``tokens.json``."""
        return self.tokens_file if self.tokens_file is not None else self.home / "tokens.json"

    @property
    def trusted(self) -> frozenset[str]:
        """Sources whose evidence alone may make a learned block (``local``, the process
        itself, always is)."""
        return frozenset({"local", *(n.strip() for n in self.trusted_sources.split(",") if n)})

    def with_(self, **changes: Any) -> Settings:
        return validate(replace(self, **changes))

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``SIDECAR_*`` variables, then explicit ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"SIDECAR_{f.name.upper()}")
            if (raw is None or raw == "") and f.name in RENAMED:
                raw = env.get(f"SIDECAR_{RENAMED[f.name].upper()}")
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return validate(cls(**values))


RENAMED: dict[str, str] = {"session_idle_s": "otlp_conversation_idle_s"}
"""Settings whose old variable is still read when the new one is not set."""

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
    "database_url": "postgresql://... of a PostgreSQL database holding the state; unset "
    "means SQLite under the home",
    "migrate": "'auto' (a process that opens the state for writing creates and upgrades "
    "its schema) or 'never' (it leaves that to `sidecar migrate`: a server waits, not "
    "ready, until the schema is at its version; other commands fail)",
    "revision_cache_ms": "shared state only, with revision_lease_ms 0: keep the revisions a "
    "lookup or check reads for up to this long, less once another replica's write is "
    "announced (0: read every request)",
    "revision_lease_ms": "shared state only: a replica answers lookups and checks from the "
    "revisions it cached while it holds a lease this long, which every write waits on until "
    "the replica has seen it (0: no lease)",
    "cold_url": "where the cold archive is: s3://bucket/prefix (Delta tables; endpoint and "
    "credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
    "AWS_REGION), delta+file:///folder or a folder; unset means the home's cold/ folder",
    "cold_call_deadline": "Delta cold archive only: seconds one call into deltalake (a log "
    "load, a commit, a read) may take before it is abandoned and the operation retried or "
    "failed (a commit abandoned so is decided as one whose outcome is unknown)",
    "collection": "name of the Chroma collection holding active tools",
    "max_warnings_per_tool": "fatal sequences named in one lookup hit's warnings, at most",
    "decisions_kept": "calls and lookups whose decisions are kept for people to read (newest)",
    "revoker": "'record-only' (mandates stay pending for operators) or 'rfc7009' (HTTP)",
    "revocation_allow_link_local": "let the revoker call link-local / metadata addresses",
    "evict_on_report": "run the eviction after each archived report (true/false)",
    "evict_batch_size": "tools moved per journaled batch during an eviction",
    "evict_min_chains": "dead-end sessions through a tool before it is evicted",
    "retire_after": "successes matching a constraint that retire it (one contests it)",
    "constraint_max_age_days": "retire constraints no failure confirmed for this long (0: off)",
    "max_step_bytes": "largest stored arguments or output of one reported step, as JSON",
    "keep_outputs": "keep reported steps' outputs in the cold record (true/false)",
    "tokens_file": "JSON file of named tokens with roles (default: the home's tokens.json); "
    "named and missing is an error",
    "trusted_sources": "comma-separated sources whose evidence alone may make a learned block",
    "report_rate": "reports a minute each untrusted source may send (0: no limit)",
    "step_rate": "steps a minute each untrusted source may report, all its reports together "
    "(0: no limit)",
    "new_tool_rate": "tool ids in no catalog a minute each untrusted source may name, each "
    "once per request (0: no limit)",
    "evidence_budget": "bytes of evidence each untrusted token may put into the state "
    "(sessions, steps, archived calls, usage rows); 429 past it until an operator forgets "
    "some (0: no limit)",
    "session_idle_s": "seconds an agent session the gateway or the trace intake observes "
    "stays open after its last call (a conversation seen in traces: for its later traces); "
    "it is reported then (SIDECAR_OTLP_CONVERSATION_IDLE_S, its old name, is still read)",
    "session_max": "agent sessions the gateway, and the trace intake, each keep open at "
    "once; the least recently active is reported and closed past it",
    "session_max_steps": "steps one observed agent session holds; a session that reaches it "
    "is reported and goes on under a new id",
    "session_max_bytes": "bytes of steps the gateway's open sessions, and the trace "
    "intake's, may each hold, estimated; the least recently active is reported and closed "
    "past it",
    "otlp_max_request_bytes": "largest OTLP/HTTP trace request, once inflated (413 past it)",
    "otlp_max_memory_bytes": "bytes the trace intake may hold in open traces, sessions and "
    "requests (503 with Retry-After past it)",
    "hybrid": "fuse BM25 and per-sentence views with the dense ranking (true/false)",
    "abstain_below": "best similarity under which a lookup answers abstained (0: never)",
    "chain_weight": "weight of tools that completed chains after the executed prefix (0: off)",
    "gateway_call_timeout": "seconds an upstream may take to answer a gateway call before "
    "the agent gets an error (0: no limit)",
    "gateway_contest_rate": "share of blocked gateway calls forwarded anyway, so that a "
    "success can contest the block (0: never)",
    "gateway_contest_budget": "blocked calls forwarded per rule per hour, at most",
    "gateway_contest_scope": "'safe' (only tools annotated read-only or non-destructive) or 'all'",
    "gateway_warning_text": "a warned gateway call's result carries the warning as text the "
    "model reads, besides _meta (true/false)",
    "gateway_warn_risk": "a gateway call the memory allows is warned when its session's "
    "risk of ending abandoned (learned from reported outcomes) is at least this; 0: never",
    "gateway_approval": "calls the gateway holds until an operator approves them: "
    "comma-separated 'destructive' (tools annotated destructiveHint: true) and 'warned' "
    "(calls the memory warns about); empty: none",
    "gateway_approval_tools": "comma-separated tool names whose every gateway call is held "
    "for approval",
    "gateway_approval_wait": "seconds a held gateway call waits for a decision before it is "
    "answered as held (0: answered at once; the agent retries)",
    "gateway_link_window": "seconds an inferred gateway session (calls linked by the values "
    "their outputs showed) may still be joined; it is reported that long after its last call",
}


def _parse(name: str, raw: str) -> Any:
    if name in (
        "constraint_max_age_days",
        "revision_cache_ms",
        "revision_lease_ms",
        "abstain_below",
        "chain_weight",
        "cold_call_deadline",
        "gateway_call_timeout",
        "gateway_contest_rate",
        "gateway_warn_risk",
        "gateway_link_window",
        "gateway_approval_wait",
        "session_idle_s",
    ):
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"SIDECAR_{name.upper()} must be a number, got {raw!r}") from None
    if name in {
        "reproduce_threshold",
        "max_warnings_per_tool",
        "decisions_kept",
        "evict_batch_size",
        "evict_min_chains",
        "retire_after",
        "max_step_bytes",
        "query_cache",
        "exact_limit",
        "report_rate",
        "step_rate",
        "new_tool_rate",
        "evidence_budget",
        "gateway_contest_budget",
        "otlp_max_request_bytes",
        "otlp_max_memory_bytes",
        "session_max",
        "session_max_steps",
        "session_max_bytes",
    }:
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"SIDECAR_{name.upper()} must be an integer, got {raw!r}") from None
    if name in ("home", "model_cache", "tokens_file"):
        return Path(raw)
    if name in (
        "evict_on_report",
        "keep_outputs",
        "revocation_allow_link_local",
        "hybrid",
        "gateway_warning_text",
    ):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"SIDECAR_{name.upper()} must be true or false, got {raw!r}")
    return raw


def validate(s: Settings) -> Settings:
    """``s`` checked, concern by concern (the first invalid setting is named), with its
    paths made :class:`~pathlib.Path`."""
    _check_lookups(s)
    _check_memory(s)
    _check_intake(s)
    _check_stores(s)
    _check_gateway(s)
    model_cache = None if s.model_cache is None else Path(s.model_cache)
    tokens = None if s.tokens_file is None else Path(s.tokens_file)
    if tokens is not None and not tokens.is_file():
        # named but absent: serving without the tokens the operator meant is refused,
        # not done silently with the operator's token alone
        raise ConfigError(f"tokens_file: {tokens} is not a file (SIDECAR_TOKENS_FILE names it)")
    return replace(s, home=Path(s.home), model_cache=model_cache, tokens_file=tokens)


def _not_number(value: Any) -> bool:
    """Whether ``value`` is not an int or a float (a bool, though an int, is not one)."""
    return isinstance(value, bool) or not isinstance(value, int | float)


def _not_integer(value: Any) -> bool:
    """Whether ``value`` is not an int (a bool, though an int, is not one)."""
    return isinstance(value, bool) or not isinstance(value, int)


def _check_lookups(s: Settings) -> None:
    """The embedder, the caches and the ranking of lookups."""
    if s.embedder not in EMBEDDERS:
        raise ConfigError(f"embedder must be one of {', '.join(EMBEDDERS)}, got {s.embedder!r}")
    for name in ("query_cache", "exact_limit"):
        value = getattr(s, name)
        if _not_integer(value) or value < 0:
            raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    below = s.abstain_below
    if _not_number(below) or not 0 <= below <= 1:
        raise ConfigError(f"abstain_below must be a number from 0 to 1, got {below!r}")
    weight = s.chain_weight
    if _not_number(weight) or not 0 <= weight <= 100:
        raise ConfigError(f"chain_weight must be a number from 0 to 100, got {weight!r}")
    if not isinstance(s.hybrid, bool):
        raise ConfigError(f"hybrid must be true or false, got {s.hybrid!r}")
    if not isinstance(s.max_warnings_per_tool, int) or s.max_warnings_per_tool < 0:
        raise ConfigError("max_warnings_per_tool must be >= 0")
    if not isinstance(s.decisions_kept, int) or s.decisions_kept < 1:
        raise ConfigError("decisions_kept must be >= 1")
    if not s.collection or len(s.collection) < 3:
        raise ConfigError("collection must be at least 3 characters")


def _check_memory(s: Settings) -> None:
    """What is archived and enforced, and how constraints, evictions and revocations
    run (with the test-only crash points)."""
    if s.missing_field not in ("block", "allow"):
        raise ConfigError(f"missing_field must be 'block' or 'allow', got {s.missing_field!r}")
    if not isinstance(s.reproduce_threshold, int) or s.reproduce_threshold < 1:
        raise ConfigError(f"reproduce_threshold must be >= 1, got {s.reproduce_threshold!r}")
    if not isinstance(s.evict_batch_size, int) or s.evict_batch_size < 1:
        raise ConfigError("evict_batch_size must be >= 1")
    if _not_integer(s.evict_min_chains) or s.evict_min_chains < 1:
        raise ConfigError(f"evict_min_chains must be >= 1, got {s.evict_min_chains!r}")
    if _not_integer(s.retire_after) or s.retire_after < 1:
        raise ConfigError(f"retire_after must be an integer >= 1, got {s.retire_after!r}")
    age = s.constraint_max_age_days
    if _not_number(age) or not 0 <= age < 1e6:
        raise ConfigError(f"constraint_max_age_days must be a number >= 0, got {age!r}")
    if s.revoker not in ("record-only", "rfc7009"):
        raise ConfigError(f"revoker must be 'record-only' or 'rfc7009', got {s.revoker!r}")


def _check_intake(s: Settings) -> None:
    """The limits on what reports and traces bring in, and whose evidence is trusted."""
    for name in ("report_rate", "step_rate", "new_tool_rate", "evidence_budget"):
        value = getattr(s, name)
        if _not_integer(value) or value < 0:
            raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    if _not_integer(s.max_step_bytes) or s.max_step_bytes < 1:
        raise ConfigError(f"max_step_bytes must be an integer >= 1, got {s.max_step_bytes!r}")
    idle = s.session_idle_s
    if _not_number(idle) or not 0 < idle < 1e7:
        raise ConfigError(f"session_idle_s must be a number > 0, got {idle!r}")
    for name in ("session_max", "session_max_steps", "session_max_bytes"):
        value = getattr(s, name)
        if _not_integer(value) or value < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    for name in ("otlp_max_request_bytes", "otlp_max_memory_bytes"):
        value = getattr(s, name)
        if _not_integer(value) or value < 1024:
            raise ConfigError(f"{name} must be an integer >= 1024, got {value!r}")
    if s.otlp_max_memory_bytes < s.otlp_max_request_bytes:
        raise ConfigError("otlp_max_memory_bytes must be at least otlp_max_request_bytes")
    for name in (n.strip() for n in s.trusted_sources.split(",")):
        if name and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}", name):
            raise ConfigError(f"trusted_sources: {name!r} is not a source name")


def _check_stores(s: Settings) -> None:
    """Where the index, the state and the archive are, and how long reads are cached."""
    if s.chroma_url is not None and not s.chroma_url.startswith(("http://", "https://")):
        raise ConfigError(f"chroma_url must start with http:// or https://, got {s.chroma_url!r}")
    if s.database_url is not None and not s.database_url.startswith(
        ("postgresql://", "postgres://")
    ):
        raise ConfigError(
            "database_url must be a URL starting with postgresql:// (or postgres://), got "
            + _shown_database_url(s.database_url)
        )
    if s.migrate not in MIGRATE_MODES:
        raise ConfigError(f"migrate must be 'auto' or 'never', got {s.migrate!r}")
    if s.cold_url is not None:
        from cold_store.errors import BadLocation
        from cold_store.store import parse_location

        try:
            parse_location(s.cold_url)
        except BadLocation as exc:
            raise ConfigError(f"cold_url: {exc}") from None
    deadline = s.cold_call_deadline
    if _not_number(deadline) or not 1 <= deadline <= 3600:
        raise ConfigError(
            f"cold_call_deadline must be a number of seconds from 1 to 3600, got {deadline!r}"
        )
    cache = s.revision_cache_ms
    if _not_number(cache) or not 0 <= cache <= 60_000:
        raise ConfigError(f"revision_cache_ms must be a number from 0 to 60000, got {cache!r}")
    lease = s.revision_lease_ms
    if _not_number(lease) or not (lease == 0 or 300 <= lease <= 30_000):
        raise ConfigError(
            f"revision_lease_ms must be 0 or a number from 300 to 30000, got {lease!r}"
        )


def _shown_database_url(url: str) -> str:
    """What an error may say of a database URL that is not one: its scheme at most, since
    a libpq ``host=... password=...`` string has no ``://`` to cut at."""
    scheme = url.split("://")[0] if "://" in url else None
    if scheme and scheme.isalnum():
        return f"{scheme!r}://..."
    return (
        "something else (a libpq 'key=value' string is written as a URL: "
        "postgresql://user:password@host:port/database)"
    )


def _check_gateway(s: Settings) -> None:
    """The gateway's call timeout, contests of blocks and session linking."""
    timeout = s.gateway_call_timeout
    if _not_number(timeout) or not 0 <= timeout < 1e6:
        raise ConfigError(f"gateway_call_timeout must be a number >= 0, got {timeout!r}")
    rate = s.gateway_contest_rate
    if _not_number(rate) or not 0 <= rate <= 1:
        raise ConfigError(f"gateway_contest_rate must be from 0 to 1, got {rate!r}")
    risk = s.gateway_warn_risk
    if _not_number(risk) or not 0 <= risk <= 1:
        raise ConfigError(f"gateway_warn_risk must be from 0 to 1, got {risk!r}")
    budget = s.gateway_contest_budget
    if _not_integer(budget) or budget < 0:
        raise ConfigError(f"gateway_contest_budget must be an integer >= 0, got {budget!r}")
    words = {w.strip() for w in s.gateway_approval.split(",") if w.strip()}
    if not words <= {"destructive", "warned"}:
        raise ConfigError(
            f"gateway_approval takes 'destructive' and 'warned', got {s.gateway_approval!r}"
        )
    wait = s.gateway_approval_wait
    if _not_number(wait) or not 0 <= wait <= 3_600:
        raise ConfigError(f"gateway_approval_wait must be from 0 to 3600 seconds, got {wait!r}")
    window = s.gateway_link_window
    if _not_number(window) or not 0 < window < 1e6:
        raise ConfigError(f"gateway_link_window must be a number > 0, got {window!r}")
    if s.gateway_contest_scope not in ("safe", "all"):
        raise ConfigError(
            f"gateway_contest_scope must be 'safe' or 'all', got {s.gateway_contest_scope!r}"
        )
