"""The sidecar library: one object that the CLI, the HTTP API and the MCP server share.

    from sidecar import Sidecar
    with Sidecar.open(home=".sidecar") as sc:
        sc.add_tools(load_tool_file("tools.jsonl"))
        sc.report({"topology": [...], "outcome": "abandoned", ...})
        sc.search("extract prices", k=5, after=["search_api", "html_parser"],
                  context={"payload_bytes": 7_200_000})
        sc.check(["search_api", "html_parser", "llm_extractor"])

:class:`Sidecar` is a switchboard: it wires the parts together and exposes them —
``sc.tools`` (the active tools), ``sc.lookup``, ``sc.intake``, ``sc.rules`` (both rule
kinds, their status and the checks), ``sc.eviction``, ``sc.journal``, ``sc.ledger``
(revocations), ``sc.archive`` (audit, digest, status, maintenance), ``sc.recovery``,
``sc.state`` (the repositories) — and its methods, the ones every shell calls, are thin
delegates that check their arguments (:mod:`sidecar.validate`) and are the one boundary
where a store's own errors become the library's (:func:`boundary`).

``Sidecar.open(..., read_only=True)`` opens a home for reading: it never writes, never
recovers, and fails on a home that does not exist.  Opened for writing (the default),
the process owns the home (see :mod:`sidecar.app.home`), finishes moves a crash
interrupted and compiles archived chains the state missed; when that recovery cannot
run (an unwritable cold store), reads keep working and writes that move tools fail with
:class:`~sidecar.errors.Degraded` until a retry succeeds.

Heavy parts open on first use: Chroma when the hot index is first touched, the
embedding model when text is first embedded.  ``check``, ``audit`` and ``digest`` need
neither.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from indexes import ActiveIndex, Embedder
from sidecar import validate
from sidecar.app.home import Home
from sidecar.app.hot import HotIndex
from sidecar.archive.audit import Archive
from sidecar.archive.publish import Publisher
from sidecar.boundary import boundary
from sidecar.errors import (
    InvalidInput,
)
from sidecar.eviction import (
    EvictionReport,
    Evictor,
    Journal,
    Ledger,
    Mandate,
    Policy,
    RestoreResult,
    Revoker,
    ToolDecision,
    make_revoker,
)
from sidecar.eviction.on_report import after_batches
from sidecar.eviction.recovery import Recovery, health
from sidecar.intake import Intake, StepPolicy
from sidecar.intake.parse import redacted_steps, steps_of, task_text
from sidecar.limits import INTAKE_CHUNK, MANDATE_STATUSES, CheckMode
from sidecar.lookup import Lookup
from sidecar.memory import Step, Thresholds, reads_only
from sidecar.model import (
    CallCheck,
    ChainReport,
    CheckResult,
    IntakeResult,
    LookupResult,
    StepReport,
    Tool,
)
from sidecar.results import (
    ArchiveMaintenance,
    ArchiveStatus,
    AuditRecord,
    ConstraintView,
    Digest,
    Forgotten,
    Health,
    Recovered,
    RevocationRun,
    SessionPage,
)
from sidecar.review.activity import ActivityDesk, session_id_of
from sidecar.review.appeals import Appeals
from sidecar.review.approvals import Approvals
from sidecar.review.decisions import DecisionLog
from sidecar.review.desk import ReviewDesk
from sidecar.review.judging import RuleDesk
from sidecar.rules import Lifecycle, Rules
from sidecar.rules.wording import viewer_of
from sidecar.settings import Settings
from sidecar.tools import AddToolsResult, Fields, SyncResult, ToolRecords, Tools
from sidecar.tools.history import ToolHistories
from sidecar.tools.paging import DEFAULT_LIMIT, ToolPage
from sidecar.trust.forgetting import forget, preview
from sidecar.trust.principals import LOCAL, Principals, Role, check_source
from sidecar.trust.quota import Quota, QuotaView
from sidecar.trust.redact import redact, redact_text

log = logging.getLogger(__name__)


class Sidecar(ReviewDesk, RuleDesk, ActivityDesk, ToolHistories):
    """The hot index, the cold archive and the rules, behind one API."""

    def __init__(
        self, settings: Settings, embedder: Embedder | None = None, read_only: bool = False
    ) -> None:
        self.settings = settings
        self.read_only = read_only
        self._home = Home(settings, writable=not read_only)
        self.state = self._home.state
        self.cold = self._home.cold
        self.principals = Principals.load(settings.tokens_path, None)
        self.trusted = settings.trusted | self.principals.trusted()
        self.records = ToolRecords(self.state)
        self.rules = Rules(
            self.state,
            Lifecycle(settings.retire_after, settings.constraint_max_age_days),
            Thresholds(trusted=self.trusted),
            settings.missing_field,
            settings.max_warnings_per_tool,
        )
        self.journal = Journal(self.state)
        self.ledger = Ledger(self.state)
        self.hot = HotIndex(settings, read_only, embedder, self._opened)
        self.lookup = Lookup(self.state, self.rules, Fields(self.records), settings, self.trusted)
        self.tools = Tools(
            self.records, self.state, self.hot.get, self._home.hot_write, self._cold_tools
        )
        # acknowledged cold records reach the archive one way, whoever wrote them
        self.publisher = Publisher(self.state, self.cold, self.cold.backend != "parquet")
        self.intake = _intake(
            settings, self._home, self.records, self.rules, self.hot, self.publisher
        )
        self.eviction = _evictor(
            settings, self._home, self.hot, self.records, self.rules, self.publisher
        )
        self.recovery = Recovery(self.journal, self.eviction, read_only)
        self.archive = Archive(
            self.cold, self.state, self.journal, self.rules, self.records, self.recovery
        )
        self.quota = Quota.of(
            settings, self.trusted, self.state.budgets, self.tools.cataloged, self.rules.named
        )
        self._approvals, self._appeals = Approvals(self.state), Appeals(self.state)
        self.decisions = DecisionLog(self.state, settings.decisions_kept)
        self.recovered_on_open = 0
        if not read_only:
            self.recovered_on_open = self.maintain()

    @classmethod
    def open(
        cls, embedder: Embedder | None = None, read_only: bool = False, **overrides: Any
    ) -> Sidecar:
        """Open with settings from the environment, then ``overrides`` (e.g. ``home=``)."""
        return cls(Settings.load(**overrides), embedder, read_only)

    def __enter__(self) -> Sidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.decisions.close()
        self.publisher.close()
        self.hot.close()
        self._home.close()

    # ---- parts -----------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        return self.hot.embedder

    @property
    def index(self) -> ActiveIndex:
        """The hot index, opened on first use."""
        return self.hot.get()

    @property
    def degraded(self) -> str | None:
        return self.recovery.degraded

    def _opened(self, index: ActiveIndex) -> None:
        if self.read_only:
            self.tools.check_complete(index)
        else:
            self.tools.sync_records(index)

    def _cold_tools(self) -> frozenset[str]:
        return self.lookup.cold_tools(self.state.revisions.revisions()[1])

    # ---- ownership and recovery -------------------------------------------------------
    @boundary
    def maintain(self) -> int:
        """Finish moves a crash (or an unwritable store) interrupted, and publish the
        acknowledged records that wait for the archive; returns how many moves finished."""
        if not self.read_only:
            self.intake.reconcile()
        return self.recovery.maintain()

    def announce_server(self, url: str) -> None:
        self._home.announce_server(url)

    def withdraw_server(self) -> None:
        self._home.withdraw_server()

    @boundary
    def warm_up(self, documents: bool = True) -> int:
        """Open the hot index and load the model now, not on the first request;
        returns the number of active tools.  ``documents=False``: only what a lookup
        needs (the document graph, which adding tools runs, loads on first use)."""
        return self.hot.warm_up(documents)

    @boundary
    def health(self) -> Health:
        """Readiness: the hot index answers, the cold store and state are writable, no
        interrupted move is stuck."""
        parts = (self.hot.get, self.records.count, self.cold, self.settings.home)
        return health(*parts, self.recovery, self.publisher.error)

    # ---- tools --------------------------------------------------------------------
    @boundary
    def add_tools(
        self, tools: Sequence[Tool], progress: Callable[[int], None] | None = None
    ) -> AddToolsResult:
        """Upsert tools into the hot index (credentials go to the state)."""
        self.recovery.writable()
        return self.tools.add(tools, progress)

    @boundary
    def sync_tools(self, source: str, tools: Sequence[Tool]) -> SyncResult:
        """Make the hot index hold exactly ``source``'s current tools (an upstream MCP
        server's ``tools/list``): new ones added, changed ones re-embedded, ones it no
        longer lists gone from the hot index.  An evicted tool it still lists stays out
        (it comes back only by ``restore``)."""
        self.recovery.writable()
        return self.tools.sync(source, tools)

    def hidden_tools(self) -> set[str]:
        """Tools never to be listed or called: evicted, or with their move begun."""
        return set(self._cold_tools())

    @boundary
    def list_tools(self) -> list[Tool]:
        return self.tools.active()

    @boundary
    def list_tools_page(
        self, cursor: str | None = None, limit: int = DEFAULT_LIMIT, agent: bool = False
    ) -> ToolPage:
        """One page of :meth:`list_tools`, in id order; its ``next_cursor`` gives the
        next.  ``agent``: only what a lookup could show an agent (no tool evicted or
        withheld from every lookup, no credentials: see :mod:`sidecar.tools.paging`)."""
        hidden = self._cold_tools() | (self.lookup.withheld_at_start() if agent else set())
        return self.tools.page(cursor, limit, hidden, "agent" if agent else "operator")

    @boundary
    def get_tools(self, tool_ids: Iterable[str]) -> dict[str, Tool]:
        return self.tools.get(tool_ids)

    # ---- lookup -------------------------------------------------------------------
    @boundary
    def search(
        self,
        query: str,
        k: int = 5,
        after: Sequence[str] = (),
        context: Mapping[str, Any] | None = None,
        steps: Sequence[Step | Mapping[str, Any]] | None = None,
        task_input: str | None = None,
        viewer: str | None = None,
        session_id: str | None = None,
    ) -> LookupResult:
        """Top-k active tools for ``query``, never one that would complete a fatal
        sequence after the executed prefix ``after`` under ``context``; its warnings
        worded for ``viewer`` (an agent token; ``None``: an operator).  ``session_id``:
        the session it is for; the tools offered are then kept in the decision log,
        filed under the viewer's session (:meth:`session_activity`).

        ``steps`` (the session so far: tool, arguments, output, error) stand for
        ``after`` when it is not given, and add warnings to the hits whose learned
        failure conditions the session already holds what they need for.

        The answer is ``abstained`` when even the best hit is below the
        ``abstain_below`` similarity: no active tool fits, the hits are only the best
        candidates."""
        text = validate.query_text(query)
        done = redacted_steps(steps_of(steps))  # as the memory learned them
        executed = (
            validate.tool_list(after, "after") if after or not done else tuple(s.tool for s in done)
        )
        ctx, k = validate.context_values(context), validate.k_value(k)
        task, who = task_text(task_input), viewer_of(validate.viewer(viewer))
        sid, index = session_id_of(session_id), self.index
        with self.state.revisions.pinned():
            found = self.lookup.search_text(
                index, text, k, executed, ctx, done, task and redact_text(task), who
            )
        self.decisions.lookup(who.name, sid, text, [h.tool_id for h in found.hits])
        return found

    @boundary
    def search_vector(
        self,
        vector: Sequence[float],
        k: int = 5,
        after: Sequence[str] = (),
        context: Mapping[str, Any] | None = None,
    ) -> LookupResult:
        """:meth:`search` for a caller that embeds its own query (same model and
        dimension as the index): the dense ranking alone (BM25 and the completed
        chains need the query's text)."""
        import numpy as np

        executed = validate.tool_list(after, "after")
        ctx, k = validate.context_values(context), validate.k_value(k)
        return self.lookup.search(self.index, np.asarray(vector), k, executed, ctx)

    @boundary
    def check(
        self,
        plan: Sequence[str],
        mode: CheckMode = "sequence",
        context: Mapping[str, Any] | None = None,
        viewer: str | None = None,
    ) -> CheckResult:
        """Whether ``plan`` holds a fatal sequence; ``viewer`` as for :meth:`search`."""
        tools, how = validate.tool_list(plan, "plan"), validate.check_mode(mode)
        ctx, who = validate.context_values(context), viewer_of(validate.viewer(viewer))
        # the revisions' read travels while the plan is checked (see judged)
        return self.state.revisions.judged(lambda: self.rules.check(tools, how, ctx, who))

    @boundary
    def check_call(
        self,
        steps: Sequence[Step | Mapping[str, Any]],
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        task_input: str | None = None,
        context: Mapping[str, Any] | None = None,
        viewer: str | None = None,
        session_id: str | None = None,
    ) -> CallCheck:
        """Before a call: ``allow``, ``warn`` or ``block`` ``tool(arguments)`` after the
        session's ``steps``, with every reason, worded for ``viewer`` (as for
        :meth:`search`); the verdict kept in the decision log when it names its
        ``session_id`` (as for :meth:`search`)."""
        name = validate.check_tool_id(tool, "next.tool")
        args = validate.call_arguments(arguments)
        # compared with what the memory learned, redacted as it was: no secret of the
        # call is matched raw or quoted back in a reason
        task = task_text(task_input)
        ctx, who = validate.context_values(context), viewer_of(validate.viewer(viewer))
        seen = (redacted_steps(steps_of(steps)), name, redact(args), task and redact_text(task))
        sid = session_id_of(session_id)
        # the tool's type is read inside the judged request, from the same revisions
        verdict = self.state.revisions.judged(
            lambda: self.rules.check_call(*seen, ctx, who, reads_only(self.lookup.tool_type(name)))
        )
        self.decisions.call(who.name, sid, name, args, verdict)
        return verdict

    def matcher_size(self) -> int:
        """Active constraints compiled into the matcher."""
        return len(self.rules.matcher())

    # ---- intake -------------------------------------------------------------------
    @boundary
    def report(
        self,
        report: ChainReport | StepReport | Mapping[str, Any],
        source: str = LOCAL,
        role: Role = "operator",
    ) -> IntakeResult:
        """Run one report through the decision boundary (never raises for a bad
        report: it comes back ``rejected`` with the reason).  ``source``: who reports
        (evidence counts per source; a shell passes its caller's name); hand-written
        conditions need the ``operator`` role."""
        return self.report_many([report], source=source, role=role)[0]

    @boundary
    def report_many(
        self,
        reports: Iterable[ChainReport | StepReport | Mapping[str, Any]],
        chunk: int = INTAKE_CHUNK,
        progress: Callable[[int], None] | None = None,
        source: str = LOCAL,
        role: Role = "operator",
    ) -> list[IntakeResult]:
        """:meth:`report` for many reports, archiving each chunk as one cold file; a
        chunk that fails changes nothing.  ``progress`` hears the reports done so far
        after each chunk.  An untrusted source spends its token's quota (reports, steps
        and tool ids in no catalog a minute, bytes of evidence: :mod:`sidecar.trust.quota`;
        :class:`~sidecar.errors.RateLimited` past it), and teaches nothing of tools in
        no catalog."""
        self.recovery.writable()
        items = list(reports)
        taught = self.quota.admit(source, items).uncataloged  # the source's name checked too
        batches = self.intake.batches(items, chunk, source, role == "operator", taught)
        evict = self.evict if self.settings.evict_on_report else None
        return after_batches(batches, evict, progress)

    def quotas(self) -> QuotaView:
        """What untrusted tokens spent of their quotas, for ``/metrics``."""
        return self.quota.view()

    @boundary
    def forget(self, source: str, since: float | None = None, dry_run: bool = False) -> Forgotten:
        """Remove what ``source`` reported (since ``since``, a Unix time, when given)
        and derive again what rested on it: the conditions it taught, the sessions it
        counted toward sightings, dead ends and contradictions, and the evictions whose
        evidence came from it (see :func:`sidecar.trust.forgetting.forget`).  ``dry_run``:
        the same figures, from a copy of the state, with nothing changed (a preview)."""
        check_source(source)
        when = validate.since(since)
        if dry_run:
            return preview(source, when, self.settings, self.state.database, type(self))
        self.recovery.writable()
        return forget(source, when, self.rules, self.intake, self.eviction, self.recovery)

    def trusted_sources(self) -> frozenset[str]:
        return self.trusted

    # ---- eviction -----------------------------------------------------------------
    @boundary
    def decide(self, min_chains: int | None = None) -> list[ToolDecision]:
        """What an eviction would do now, per prefix tool, with the chains behind it
        (``min_chains`` overrides the ``evict_min_chains`` setting)."""
        return self.eviction.decide(validate.min_chains(min_chains))

    @boundary
    def evict(
        self,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        min_chains: int | None = None,
    ) -> EvictionReport:
        """Run the decision and the moves (raises :class:`~sidecar.errors.Busy` if one
        is running).  ``min_chains`` overrides the ``evict_min_chains`` setting."""
        need = validate.min_chains(min_chains)
        if dry_run:
            self.recovery.writable()
            return self.eviction.run(dry_run=True, progress=progress, min_chains=need)
        self.recovery.moves_ready()
        return self.recovery.moving(
            lambda: self.eviction.run(dry_run=False, progress=progress, min_chains=need)
        )

    def eviction_running(self) -> bool:
        return self.eviction.running()

    @boundary
    def recover(self) -> Recovered:
        """Finish moves a crash interrupted, and rebuild the active tools the hot index
        lost (from the state's records)."""
        self.recovery.writable()
        _ = self.index  # opening it rebuilds active tools the hot index lost
        done = self.recovered_on_open + self.eviction.recover()
        self.recovered_on_open = 0
        self.recovery.degraded = None
        return Recovered(done)

    @boundary
    def restore(self, tool_id: str, reason: str, lift_constraints: bool = False) -> RestoreResult:
        """Bring an evicted tool back from cold storage into the hot index."""
        validate.check_tool_id(tool_id)
        why = validate.reason(reason, "a restore needs a reason (what was fixed)")
        self.recovery.moves_ready()

        def lift(chains: Sequence[str]) -> list[str]:
            return self.rules.lift_sequences(chains, f"restore: {why}") if lift_constraints else []

        return self.eviction.restore(tool_id, why, lift)

    # ---- rules ----------------------------------------------------------------------
    @boundary
    def constraints(
        self, include_lifted: bool = False, viewer: str | None = None
    ) -> list[ConstraintView]:
        """The rules, each with its status, support, contradictions and when it was first
        and last confirmed (retired and lifted ones only with ``include_lifted``); an
        agent ``viewer`` sees other sources' rules as verdicts."""
        return self.rules.views(include_lifted, viewer_of(validate.viewer(viewer)))

    @boundary
    def constraint(self, constraint_id: str, viewer: str | None = None) -> ConstraintView:
        """One rule, whatever its status, as :meth:`constraints` shows it."""
        return self.rules.view(constraint_id, viewer_of(validate.viewer(viewer)))

    @boundary
    def sessions_page(self, cursor: str | None = None, limit: int = 50) -> SessionPage:
        """One page of the sessions the sidecar learned from (its call memory's, and those
        that met an archived chain), in key order; ``next_cursor`` gives the next."""
        return self.rules.sessions_page(cursor, max(1, min(int(limit), 1000)))

    # ---- revocations ----------------------------------------------------------------
    @boundary
    def mandates(self, status: str | None = None) -> list[Mandate]:
        """Revocation mandates, all or those with ``status``."""
        if status is not None and status not in MANDATE_STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(MANDATE_STATUSES)}")
        return self.ledger.mandates(status)

    def mandate_counts(self) -> dict[str, int]:
        return self.ledger.counts()

    @boundary
    def run_revocations(self, revoker: Revoker | None = None) -> RevocationRun:
        self.recovery.writable()
        used = revoker or make_revoker(
            self.settings.revoker, self.settings.revocation_allow_link_local
        )
        return RevocationRun(used.name, self.ledger.run(used))

    # ---- the archive ------------------------------------------------------------------
    @boundary
    def audit(self, pointer: str, viewer: str | None = None) -> AuditRecord:
        """The full cold record behind a pointer; an agent ``viewer`` reads its own."""
        return self.archive.audit(pointer, viewer_of(validate.viewer(viewer)))

    @boundary
    def digest(self) -> Digest:
        return self.archive.digest()

    @boundary
    def maintain_archive(self, retention_hours: float | None = None) -> ArchiveMaintenance:
        """Compact, checkpoint and vacuum the cold tables (see
        :meth:`sidecar.archive.audit.Archive.maintain`)."""
        self.recovery.writable()
        self.publisher.publish()  # what is acknowledged is compacted with the rest
        return self.archive.maintain(retention_hours)

    @boundary
    def status(self, verify: bool = False) -> ArchiveStatus:
        """Counts, quarantined and damaged files, and health."""
        return self.archive.status(verify)


def _intake(
    settings: Settings,
    home: Home,
    records: ToolRecords,
    rules: Rules,
    hot: HotIndex,
    publisher: Publisher,
) -> Intake:
    return Intake(
        home.state,
        home.cold,
        records,
        rules,
        settings.reproduce_threshold,
        StepPolicy(settings.max_step_bytes, settings.keep_outputs),
        publisher,
        index=hot.get if settings.hybrid else None,
    )


def _evictor(
    settings: Settings,
    home: Home,
    hot: HotIndex,
    records: ToolRecords,
    rules: Rules,
    publisher: Publisher,
) -> Evictor:
    return Evictor(
        index=hot.get,
        records=records,
        state=home.state,
        rules=rules,
        journal=Journal(home.state),
        cold_tools=home.cold.tools,
        lock=home.evict_lock,
        hot_write=home.hot_write,
        policy=Policy(settings.evict_min_chains, settings.evict_batch_size),
        count_tokens=hot.token_counter,
        publisher=publisher,
    )


__all__ = ["Sidecar", "boundary"]
