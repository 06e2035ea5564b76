"""The sidecar library: one object that the CLI, the HTTP API and the MCP server share.

    from sidecar import Sidecar
    with Sidecar.open(home=".sidecar") as sc:
        sc.add_tools(load_tool_file("tools.jsonl"))
        sc.report({"topology": [...], "outcome": "abandoned", ...})
        sc.search("extract prices", k=5, after=["search_api", "html_parser"],
                  context={"payload_bytes": 7_200_000})
        sc.check(["search_api", "html_parser", "llm_extractor"])

Heavy parts open on first use: Chroma when the hot index is first touched, the
embedding model when text is first embedded.  ``check``, ``audit`` and ``digest`` need
neither.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from cold_store import (
    ColdStore,
    ColdStoreError,
    PointerError,
    QuarantinedFile,
    RecordNotFound,
    make_pointer,
)
from indexes import ID_KEY, ActiveIndex, Embedder, IndexRecord, ToolIndexError
from sidecar import archive
from sidecar.catalog import check_credential
from sidecar.classify import classify
from sidecar.constraints import ConstraintMatcher
from sidecar.errors import EmptyArchive, InvalidInput, NotFound
from sidecar.eviction import EvictionReport, Evictor, ToolDecision
from sidecar.journal import Journal
from sidecar.lock import LockBusy
from sidecar.model import (
    ChainReport,
    CheckMode,
    CheckResult,
    ConstraintSpec,
    CredentialRef,
    Failure,
    IntakeResult,
    LookupHit,
    LookupResult,
    Tool,
    Withheld,
    check_tool_id,
)
from sidecar.redact import redact, redact_schema, redact_text
from sidecar.reports import parse_condition, parse_report, validate_abandoned
from sidecar.revocation import Ledger, Revoker, make_revoker
from sidecar.settings import Settings
from sidecar.state import StateStore

MAX_K = 100
MAX_QUERY = 2_048
HIT_FIELDS = ("description", "tool_type")
"""The metadata a lookup hit shows; a lookup reads nothing else from the hot index."""
MAX_PLAN = 256


@dataclass(frozen=True)
class RestoreResult:
    tool_id: str
    pointer: str
    lifted: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"tool_id": self.tool_id, "pointer": self.pointer, "lifted": list(self.lifted)}


@dataclass(frozen=True)
class AddToolsResult:
    added: tuple[str, ...]
    updated: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"added": list(self.added), "updated": list(self.updated)}


def embedding_text(tool: Tool) -> str:
    """What is embedded for a tool: its name in words, its description, its parameters."""
    words = tool.tool_id.replace("_", " ").replace("-", " ").replace(".", " ")
    params = tool.input_schema.get("properties")
    names = ", ".join(list(params)[:20]) if isinstance(params, Mapping) else ""
    text = f"{words}: {tool.description}"
    return f"{text} (parameters: {names})" if names else text


def make_embedder(name: str) -> Embedder:
    from indexes import HashingEmbedder, MiniLMEmbedder

    return HashingEmbedder() if name == "hashing" else MiniLMEmbedder()


class Sidecar:
    """The hot index, the cold archive and the compiled constraints, behind one API."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        settings.home.mkdir(parents=True, exist_ok=True)
        self._state = StateStore(settings.state_path)
        self._cold = ColdStore(settings.cold_path)
        self._embedder = embedder
        self._index: ActiveIndex | None = None
        self._matcher: ConstraintMatcher | None = None
        self._matcher_rev = -1
        self._tools_rev = -1
        self.journal = Journal(self._state)
        self.ledger = Ledger(self._state)
        self.reconcile()
        self.recovered_on_open = 0
        if self.journal.unfinished():
            # a crashed eviction: finish it now unless another process is doing so
            with contextlib.suppress(LockBusy):
                self.recovered_on_open = self.recover()

    @classmethod
    def open(cls, embedder: Embedder | None = None, **overrides: Any) -> Sidecar:
        """Open with settings from the environment, then ``overrides`` (e.g. ``home=``)."""
        return cls(Settings.load(**overrides), embedder)

    def __enter__(self) -> Sidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._state.close()
        self._cold.close()

    # ---- components ---------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = make_embedder(self.settings.embedder)
        return self._embedder

    @property
    def index(self) -> ActiveIndex:
        if self._index is None:
            s = self.settings
            if s.chroma_url:
                url = urlparse(s.chroma_url)
                self._index = ActiveIndex.http(
                    url.hostname or "127.0.0.1",
                    url.port or (443 if url.scheme == "https" else 8000),
                    self.embedder,
                    s.collection,
                    ssl=url.scheme == "https",
                )
            else:
                self._index = ActiveIndex.persistent(s.chroma_path, self.embedder, s.collection)
        return self._index

    @property
    def cold(self) -> ColdStore:
        return self._cold

    @property
    def state(self) -> StateStore:
        return self._state

    def matcher(self, rev: int | None = None) -> ConstraintMatcher:
        """The compiled constraints, rebuilt only when the archive changed (``rev``: the
        constraints revision, when the caller has just read it)."""
        rev = self._state.revision() if rev is None else rev
        if self._matcher is None or rev != self._matcher_rev:
            self._matcher = ConstraintMatcher(
                self._state.active_constraints(),
                missing_field=self.settings.missing_field,
                warning_sample=self.settings.max_warnings_per_tool,
            )
            self._matcher_rev = rev
        return self._matcher

    def reconcile(self) -> list[str]:
        """Compile every archived chain the constraint table misses (a crash between
        the cold append and the constraint insert); returns their ids."""
        chains = self._cold.chains
        if chains.count() == self._state.constraint_count():
            return []
        known = self._state.constraint_ids()
        repaired: list[str] = []
        for cid in chains.all_keys():
            if cid in known:
                continue
            try:
                row = chains.get(cid)
            except ColdStoreError:
                continue  # quarantined: reported by quarantined(), nothing to compile
            self._compile([row])
            repaired.append(cid)
        return repaired

    def _compile(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Add archived rows to the constraint table (in one transaction)."""
        items = []
        for row in rows:
            condition = json.loads(row["condition_json"])
            topology = tuple(row["topology"])
            when = tuple(parse_condition(c, i, topology) for i, c in enumerate(condition["when"]))
            items.append(
                (
                    row["chain_id"],
                    topology,
                    row["rule"],
                    row["terminal_signature"],
                    when,
                    bool(row["gapped"]),
                    make_pointer("chains", row["chain_id"]),
                    row["archived_at"].timestamp(),
                )
            )
        self._state.add_constraints(items)

    # ---- tools --------------------------------------------------------------------
    def add_tools(self, tools: Sequence[Tool]) -> AddToolsResult:
        """Upsert tools into the hot index (credentials go to the state store)."""
        unique = [_redacted_tool(t) for t in {t.tool_id: t for t in tools}.values()]
        if not unique:
            return AddToolsResult((), ())
        evicted = self.journal.evicted()
        moving = self.journal.in_flight_tools()
        refused = sorted(t.tool_id for t in unique if t.tool_id in evicted or t.tool_id in moving)
        if refused:
            where = ", ".join(
                f"{t} ({evicted[t].pointer if t in evicted else 'eviction in progress'})"
                for t in refused
            )
            raise InvalidInput(
                f"evicted tool(s) cannot be re-added: {where}; bring one back with "
                "`sidecar restore TOOL_ID --reason ...`"
            )
        existing = self.index.existing(t.tool_id for t in unique)
        records = [
            IndexRecord(
                t.tool_id,
                embedding_text(t),
                {
                    "description": t.description,
                    "tool_type": t.tool_type,
                    "input_schema": json.dumps(dict(t.input_schema), sort_keys=True),
                    "pinned": t.pinned,
                    "source_format": t.source_format,
                },
            )
            for t in unique
        ]
        # bumped before and after: a process killed mid-write still tells other
        # processes on this home to re-read what it may have changed
        self._state.bump_tools_revision()
        try:
            self.index.upsert(records)
        finally:
            self._state.bump_tools_revision()
        for t in unique:
            self._state.set_credentials(t.tool_id, t.credentials)
        ids = [t.tool_id for t in unique]
        return AddToolsResult(
            tuple(i for i in ids if i not in existing), tuple(i for i in ids if i in existing)
        )

    def _tool_from_record(self, rec: IndexRecord, creds: Sequence[Any] = ()) -> Tool:
        meta = rec.metadata
        return Tool(
            tool_id=rec.id,
            description=str(meta.get("description", "")),
            tool_type=str(meta.get("tool_type", "unspecified")),
            input_schema=json.loads(str(meta.get("input_schema", "{}"))),
            credentials=tuple(creds),
            pinned=bool(meta.get("pinned", False)),
            source_format=str(meta.get("source_format", "sidecar")),
        )

    def list_tools(self) -> list[Tool]:
        records = sorted(self.index.scan(), key=lambda r: r.id)
        creds = self._state.credentials(r.id for r in records)
        return [self._tool_from_record(r, creds.get(r.id, ())) for r in records]

    def get_tools(self, tool_ids: Iterable[str]) -> dict[str, Tool]:
        records = self.index.get(tool_ids)
        creds = self._state.credentials(records)
        return {i: self._tool_from_record(r, creds.get(i, ())) for i, r in records.items()}

    # ---- lookup -------------------------------------------------------------------
    def search(
        self,
        query: str,
        k: int = 5,
        after: Sequence[str] = (),
        context: Mapping[str, Any] | None = None,
    ) -> LookupResult:
        """Top-k active tools for ``query``, never one that would complete a fatal
        sequence after the executed prefix ``after`` under ``context``."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query must be a non-empty string")
        if len(query) > MAX_QUERY:
            raise InvalidInput(f"query is longer than {MAX_QUERY} characters")
        executed, ctx = _lookup_args(k, after, context)
        return self._lookup(self.index.embed_query(query), k, executed, ctx)

    def search_vector(
        self,
        vector: Sequence[float],
        k: int = 5,
        after: Sequence[str] = (),
        context: Mapping[str, Any] | None = None,
    ) -> LookupResult:
        """:meth:`search` for a caller that embeds its own query (same model and
        dimension as the index)."""
        executed, ctx = _lookup_args(k, after, context)
        return self._lookup(vector, k, executed, ctx)

    def _lookup(
        self, vector: Any, k: int, executed: tuple[str, ...], ctx: dict[str, Any]
    ) -> LookupResult:
        constraints_rev, tools_rev = self._state.revisions()
        if tools_rev != self._tools_rev:
            # another process (or this one) wrote to the hot index: re-read hit fields
            self.index.forget_fields()
            self._tools_rev = tools_rev
        matcher = self.matcher(constraints_rev)
        blocked, conditional = matcher.next_steps(executed, ctx)
        # a tool whose eviction has begun is never served, even before its hot delete
        exclude = blocked.keys() | self.journal.in_flight_tools()
        hits, displaced = self.index.search_fields(vector, k, exclude, HIT_FIELDS)
        withheld = [
            Withheld(h.id, c.rule, c.pointer, c.chain_id, why)
            for h in displaced
            if h.id in blocked
            for c, why in blocked[h.id]
        ]
        limit = self.settings.max_warnings_per_tool
        out = [
            LookupHit(
                tool_id=h.id,
                score=h.score,
                description=str(h.metadata.get("description", "")),
                warnings=tuple(
                    (conditional.get(h.id, []) + matcher.warnings(executed, h.id, limit))[:limit]
                ),
                tool_type=str(h.metadata.get("tool_type", "unspecified")),
            )
            for h in hits
        ]
        return LookupResult(tuple(out), tuple(withheld))

    def check(
        self,
        plan: Sequence[str],
        mode: CheckMode = "sequence",
        context: Mapping[str, Any] | None = None,
    ) -> CheckResult:
        if mode not in ("sequence", "prefix"):
            raise InvalidInput(f"mode must be 'sequence' or 'prefix', got {mode!r}")
        return self.matcher().check(_plan(plan, "plan"), _context(context), mode)

    # ---- intake -------------------------------------------------------------------
    def report(self, report: ChainReport | Mapping[str, Any]) -> IntakeResult:
        """Run one chain report through the decision boundary (never raises for a bad
        report: it comes back ``rejected`` with the reason)."""
        return self.report_many([report])[0]

    def report_many(
        self, reports: Iterable[ChainReport | Mapping[str, Any]], chunk: int = 1000
    ) -> list[IntakeResult]:
        """:meth:`report` for many reports, archiving each chunk as one cold file."""
        results: list[IntakeResult] = []
        batch: list[ChainReport | Mapping[str, Any]] = []
        for item in reports:
            batch.append(item)
            if len(batch) == chunk:
                results += self._intake(batch)
                batch = []
        if batch:
            results += self._intake(batch)
        return results

    def _intake(self, reports: Sequence[ChainReport | Mapping[str, Any]]) -> list[IntakeResult]:
        results: list[IntakeResult | None] = [None] * len(reports)
        # (position, redacted report, classification note, chain id, sightings)
        accepted: list[tuple[int, ChainReport, str, str, int]] = []
        archived_now: set[str] = set()
        threshold = self.settings.reproduce_threshold
        for i, raw in enumerate(reports):
            try:
                parsed = raw if isinstance(raw, ChainReport) else parse_report(raw)
                if parsed.outcome == "completed":
                    runs = self._state.record_completed(parsed.topology)
                    results[i] = IntakeResult(
                        "recorded",
                        reason=f"completed chain recorded as usage evidence ({runs} run(s))",
                    )
                    continue
                validate_abandoned(parsed)
            except InvalidInput as exc:
                results[i] = IntakeResult("rejected", reason=str(exc))
                continue
            report = _redacted(parsed)
            assert report.failure is not None
            verdict = classify(report.failure.signature, report.failure.kind, report.failure.error)
            if verdict.kind == "transient":
                results[i] = IntakeResult(
                    "not_archived",
                    reason=f"transient failure, not archived; the tools stay active "
                    f"({verdict.reason})",
                )
                continue
            cid = archive.chain_id(report)
            seen = self._state.sight(report.topology, report.failure.signature)
            if cid in archived_now or self._cold.chains.contains(cid):
                results[i] = IntakeResult(
                    "archived",
                    cid,
                    make_pointer("chains", cid),
                    "already archived (replayed report)",
                )
                continue
            if verdict.kind == "unknown" and seen < threshold:
                results[i] = IntakeResult(
                    "not_archived",
                    reason=f"unknown failure kind ({verdict.reason}); seen {seen} of the "
                    f"{threshold} times that make it reproduced",
                )
                continue
            note = (
                verdict.reason
                if verdict.kind == "deterministic"
                else f"reproduced {seen} times ({verdict.reason})"
            )
            accepted.append((i, report, f"rule {verdict.rule}: {note}", cid, seen))
            archived_now.add(cid)
        if accepted:
            self._archive(accepted, results)
        self.reconcile()  # a replay may find a chain whose constraint a crash lost
        return [r for r in results if r is not None]

    def _archive(
        self,
        accepted: Sequence[tuple[int, ChainReport, str, str, int]],
        results: list[IntakeResult | None],
    ) -> None:
        tools = {t for _, report, _, _, _ in accepted for t in report.topology}
        snapshots, types = self._snapshots(tools)
        credentials = self._state.credentials(tools)
        now = datetime.now(UTC)
        rows = [
            archive.cold_row(
                cid=cid,
                report=report,
                kind="deterministic",
                classification=note,
                tool_types=[types.get(t, "unknown") for t in report.topology],
                snapshots={t: snapshots.get(t) for t in report.topology},
                credentials={t: credentials.get(t, []) for t in report.topology},
                occurrences=seen,
                now=now,
            )
            for _, report, note, cid, seen in accepted
        ]
        self._cold.chains.append(rows)
        self._compile(rows)
        suffix = ""
        if self.settings.evict_on_report:
            try:
                evicted = self.evict().evicted
                suffix = f"; evicted {', '.join(d.tool_id for d in evicted) or 'nothing'}"
            except LockBusy:
                suffix = "; eviction skipped: another eviction is running"
        for i, _report, note, cid, _ in accepted:
            deterministic = note.split(": ", 1)[1]
            results[i] = IntakeResult(
                "archived",
                cid,
                make_pointer("chains", cid),
                f"deterministic: {deterministic}{suffix}",
            )

    def _snapshots(self, tool_ids: Iterable[str]) -> tuple[dict[str, Any], dict[str, str]]:
        """Redacted hot records (``None`` for tools not in the index) and tool types."""
        wanted = sorted(set(tool_ids))
        try:
            tools = self.get_tools(wanted)
        except ToolIndexError as exc:
            note = f"hot index unavailable: {exc}"
            return {t: {"_error": note} for t in wanted}, {}
        snaps: dict[str, Any] = {}
        for tool_id in wanted:
            tool = tools.get(tool_id)
            if tool is not None:
                snap = _redacted_tool(tool).to_dict()
                snap.pop("credentials")
                snaps[tool_id] = snap
            else:
                snaps[tool_id] = None  # not registered in the hot index
        return snaps, {t: tool.tool_type for t, tool in tools.items()}

    # ---- eviction -----------------------------------------------------------------
    def evictor(self) -> Evictor:
        return Evictor(
            self, crash_at=self.settings.crash_at, batch_size=self.settings.evict_batch_size
        )

    def decide(self, min_chains: int | None = None) -> list[ToolDecision]:
        """What an eviction would do now, per prefix tool, with the chains behind it
        (``min_chains`` overrides the ``evict_min_chains`` setting)."""
        return self.evictor().decide(_min_chains(min_chains))

    def evict(
        self,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        min_chains: int | None = None,
    ) -> EvictionReport:
        """Run the decision and the moves (raises :class:`LockBusy` if one is running).

        ``min_chains`` overrides the ``evict_min_chains`` setting for this run."""
        return self.evictor().run(
            dry_run=dry_run, progress=progress, min_chains=_min_chains(min_chains)
        )

    def recover(self) -> int:
        """Finish moves a crash interrupted; returns how many."""
        return self.evictor().recover()

    def restore(self, tool_id: str, reason: str, lift_constraints: bool = False) -> RestoreResult:
        """Bring an evicted tool back from cold storage into the hot index."""
        check_tool_id(tool_id)
        if not reason.strip():
            raise InvalidInput("a restore needs a reason (what was fixed)")
        with self.evictor().lock:
            evicted = self.journal.evicted().get(tool_id)
            if evicted is None:
                raise NotFound(f"{tool_id!r} is not an evicted tool")
            row = self._cold.tools.get(evicted.move_id)
            metadata = json.loads(row["metadata_json"])
            metadata.pop(ID_KEY, None)
            self._state.bump_tools_revision()
            try:
                self.index.upsert([IndexRecord(tool_id, row["document"], metadata)])
            finally:
                self._state.bump_tools_revision()
            creds = [
                CredentialRef(c["ref"], tuple(c.get("scopes", ())), c.get("provider"),
                              c.get("revocation_endpoint"))
                for c in json.loads(row["credentials_json"])
            ]  # fmt: skip
            lifted = []
            if lift_constraints:
                for cid in row["chain_ids"]:
                    if self._state.set_constraint_status(cid, "lifted", f"restore: {reason}"):
                        lifted.append(cid)
            self.journal.record_restore(evicted, reason, lifted, creds)
        return RestoreResult(tool_id, evicted.pointer, tuple(lifted))

    def lift(self, chain_id: str, reason: str) -> None:
        """Stop enforcing an archived chain's constraint (the record stays for audit)."""
        if not reason.strip():
            raise InvalidInput("lifting a constraint needs a reason")
        if not self._state.set_constraint_status(chain_id, "lifted", reason):
            raise NotFound(f"no archived chain {chain_id!r}")

    def reinstate(self, chain_id: str, reason: str) -> None:
        if not self._state.set_constraint_status(chain_id, "active", reason):
            raise NotFound(f"no archived chain {chain_id!r}")

    def run_revocations(self, revoker: Revoker | None = None) -> dict[str, int]:
        return self.ledger.run(revoker or make_revoker(self.settings.revoker))

    # ---- audit --------------------------------------------------------------------
    def audit(self, pointer: str) -> dict[str, Any]:
        """The full cold record behind a chain or tool pointer, JSON columns decoded."""
        try:
            row = self._cold.resolve(pointer)
        except PointerError as exc:
            raise InvalidInput(str(exc)) from None
        except RecordNotFound as exc:
            raise NotFound(f"nothing archived at {pointer}") from exc
        view = archive.audit_view(row, pointer)
        if pointer.startswith("cold://tools/"):
            view["restores"] = self.journal.restores(view["tool_id"])
        return view

    def digest(self) -> str:
        entries = [
            archive.digest_entry(r["topology"], r["terminal_signature"])
            for r in self._cold.chains.scan(["topology", "terminal_signature"])
        ]
        if not entries:
            raise EmptyArchive()
        return archive.archive_digest(entries)

    def quarantined(self) -> list[QuarantinedFile]:
        return self._cold.quarantined()


def _redacted_tool(tool: Tool) -> Tool:
    for i, cred in enumerate(tool.credentials):
        check_credential(cred, f"tool {tool.tool_id!r} credentials[{i}]")
    return replace(
        tool,
        description=redact_text(tool.description),
        input_schema=redact_schema(dict(tool.input_schema)),
    )


def _redacted(report: ChainReport) -> ChainReport:
    assert report.failure is not None and report.constraint is not None
    failure = Failure(
        redact(report.failure.signature), report.failure.kind, redact(dict(report.failure.error))
    )
    when = tuple(
        replace(c, value=redact_text(c.value)) if isinstance(c.value, str) else c
        for c in report.constraint.when
    )
    constraint = ConstraintSpec(redact(report.constraint.rule), when, report.constraint.gapped)
    return replace(
        report,
        failure=failure,
        constraint=constraint,
        logs=tuple(redact(list(report.logs))),
        session_id=redact_text(report.session_id) if report.session_id else report.session_id,
    )


def _min_chains(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidInput(f"min_chains must be an integer >= 1, got {value!r}")
    return value


def _lookup_args(
    k: int, after: Sequence[str], context: Mapping[str, Any] | None
) -> tuple[tuple[str, ...], dict[str, Any]]:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an integer from 1 to {MAX_K}")
    return _plan(after, "after"), _context(context)


def _plan(tools: Sequence[str], where: str) -> tuple[str, ...]:
    if isinstance(tools, str) or not isinstance(tools, Sequence):
        raise InvalidInput(f"{where} must be a list of tool ids")
    if len(tools) > MAX_PLAN:
        raise InvalidInput(f"{where} has {len(tools)} tools; at most {MAX_PLAN}")
    return tuple(check_tool_id(t, f"{where}[{i}]") for i, t in enumerate(tools))


def _context(context: Mapping[str, Any] | None) -> dict[str, Any]:
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise InvalidInput("context must be an object of field -> value")
    for key, value in context.items():
        if not isinstance(key, str) or not key:
            raise InvalidInput("context keys must be non-empty strings")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InvalidInput(f"context[{key!r}] must be a string, number, boolean or null")
    return dict(context)
