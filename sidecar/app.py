"""The sidecar library: one object that the CLI, the HTTP API and the MCP server share.

    from sidecar import Sidecar
    with Sidecar.open(home=".sidecar") as sc:
        sc.add_tools(load_tool_file("tools.jsonl"))
        sc.report({"topology": [...], "outcome": "abandoned", ...})
        sc.search("extract prices", k=5, after=["search_api", "html_parser"],
                  context={"payload_bytes": 7_200_000})
        sc.check(["search_api", "html_parser", "llm_extractor"])

Everything a shell shows is a method here returning a typed value; the shells format
and transport only.  This class wires the parts (:mod:`sidecar.registry`,
:mod:`sidecar.lookup`, :mod:`sidecar.intake`, :mod:`sidecar.eviction`,
:mod:`sidecar.revocation`) and is the one boundary where a store's own errors become
the library's (:func:`boundary`).

``Sidecar.open(..., read_only=True)`` opens a home for reading: it never writes, never
recovers, and fails on a home that does not exist.  Opened for writing (the default),
the process owns the home (see :mod:`sidecar.home`), finishes moves a crash
interrupted and compiles archived chains the state missed; when that recovery cannot
run (an unwritable cold store), reads keep working and writes that move tools fail with
:class:`~sidecar.errors.Degraded` until a retry succeeds.

Heavy parts open on first use: Chroma when the hot index is first touched, the
embedding model when text is first embedded.  ``check``, ``audit`` and ``digest`` need
neither.
"""

from __future__ import annotations

import errno
import functools
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlparse

from cold_store import (
    ColdStoreError,
    PointerError,
    RecordNotFound,
    RecordQuarantined,
    make_pointer,
    parse_pointer,
)
from cold_store.delta import DEFAULT_VACUUM_RETENTION, MIN_VACUUM_RETENTION
from indexes import ActiveIndex, Embedder, IndexMissing, ToolIndexError, query_vectors
from sidecar import archive
from sidecar.callmemory import CallMemory
from sidecar.errors import (
    Busy,
    ColdStoreUnavailable,
    Degraded,
    EmptyArchive,
    IndexUnavailable,
    InvalidInput,
    NotFound,
    SidecarError,
    StateUnavailable,
)
from sidecar.eviction import EvictionReport, Evictor, Policy, RestoreResult, ToolDecision
from sidecar.eviction import approximate_tokens as _approximate_tokens
from sidecar.home import Home
from sidecar.intake import Intake, StepPolicy
from sidecar.journal import Journal
from sidecar.lifecycle import ENFORCED, Lifecycle
from sidecar.limits import INTAKE_CHUNK, MANDATE_STATUSES, MAX_MIN_CHAINS, MAX_REASON, CheckMode
from sidecar.lookup import (
    Lookup,
    check_mode,
    context_values,
    k_value,
    query_text,
    tool_list,
)
from sidecar.memory import Step, Thresholds
from sidecar.model import (
    CallCheck,
    ChainReport,
    CheckResult,
    IntakeResult,
    LookupResult,
    StepReport,
    Tool,
    check_constraint_id,
    check_json_value,
    check_text,
    check_tool_id,
)
from sidecar.paging import DEFAULT_LIMIT, ToolPage
from sidecar.principals import LOCAL, Principals, ReportRate, Role, check_source
from sidecar.ranking import query_views
from sidecar.redact import redact, redact_text
from sidecar.registry import (
    AddToolsResult,
    Fields,
    SyncResult,
    ToolRecords,
)
from sidecar.reports import redacted_steps, steps_of, task_text
from sidecar.results import (
    ArchiveMaintenance,
    ArchiveStatus,
    AuditRecord,
    ConstraintChange,
    ConstraintView,
    Digest,
    Forgotten,
    Health,
    MaintenanceStep,
    QuarantinedView,
    Recovered,
    RevocationRun,
    condition_view,
    sequence_view,
)
from sidecar.revocation import Ledger, Mandate, Revoker, make_revoker
from sidecar.settings import Settings
from sidecar.storage import DatabaseError
from sidecar.tools import REGISTRY_MIGRATED, Tools

log = logging.getLogger("sidecar")
P = ParamSpec("P")
R = TypeVar("R")


def boundary(fn: Callable[P, R]) -> Callable[P, R]:
    """The one place where the stores' errors become the library's: Chroma and the
    model (:class:`IndexUnavailable`), the Parquet archive (:class:`NotFound`,
    :class:`InvalidInput`, :class:`ColdStoreUnavailable`) and SQLite or the disk
    (:class:`StateUnavailable`; the state's backends raise it themselves, and the cold
    store's key index is SQLite too)."""

    @functools.wraps(fn)
    def mapped(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SidecarError:
            raise
        except ToolIndexError as exc:
            raise IndexUnavailable(str(exc)) from exc
        except RecordNotFound as exc:
            raise NotFound(str(exc)) from exc
        except PointerError as exc:
            raise InvalidInput(str(exc)) from exc
        except (RecordQuarantined, ColdStoreError) as exc:
            raise ColdStoreUnavailable(str(exc)) from exc
        except sqlite3.Error as exc:
            raise StateUnavailable(f"the state database cannot serve this: {exc}") from exc
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT):
                raise StateUnavailable(f"the home cannot be written: {exc.strerror}") from exc
            raise

    return mapped


def make_embedder(settings: Settings) -> Embedder:
    """The embedder ``settings`` name: all-MiniLM-L6-v2 under onnxruntime by default
    (documents through the fp32 graph, whose vectors are the torch model's, so homes
    built by either share one index; queries through the int8 graph), or under torch,
    the reference; queries go through a cache of recent vectors."""
    from indexes import CachedEmbedder, HashingEmbedder, MiniLMEmbedder, OnnxMiniLMEmbedder

    name = settings.embedder
    inner: Embedder
    if name == "hashing":
        inner = HashingEmbedder()
    elif name == "minilm-torch":
        inner = MiniLMEmbedder()
    else:
        inner = OnnxMiniLMEmbedder(settings.model_cache_path)
    return CachedEmbedder(inner, settings.query_cache) if settings.query_cache else inner


class Sidecar:
    """The hot index, the cold archive and the compiled constraints, behind one API."""

    def __init__(
        self, settings: Settings, embedder: Embedder | None = None, read_only: bool = False
    ) -> None:
        self.settings = settings
        self.read_only = read_only
        self._home = Home(settings, writable=not read_only)
        self._state = self._home.state
        self._cold = self._home.cold
        self._embedder = embedder
        self._index: ActiveIndex | None = None
        self._index_lock = threading.Lock()
        self._records = ToolRecords(self._state)
        self._journal = Journal(self._state)
        self._ledger = Ledger(self._state)
        self._fields = Fields(self._records)
        lifecycle = Lifecycle(settings.retire_after, settings.constraint_max_age_days)
        self._lifecycle = lifecycle
        self._principals = Principals.load(settings.tokens_path, None)
        self._trusted = settings.trusted | self._principals.trusted()
        self._rate = ReportRate(settings.report_rate)
        self._calls = CallMemory(self._state, lifecycle, Thresholds(trusted=self._trusted))
        self._lookup = Lookup(
            self._state, self._journal, self._fields, settings, self._calls, lifecycle
        )
        self._intake = Intake(
            self._state,
            self._cold,
            self._records,
            settings.reproduce_threshold,
            self._calls,
            settings.retire_after,
            StepPolicy(settings.max_step_bytes, settings.keep_outputs),
            after_archive=self._evict_after_report if settings.evict_on_report else None,
            crash_at=settings.crash_at,
        )
        self._tools = Tools(
            self._records,
            self._state,
            self._journal,
            lambda: self.index,
            self._home.hot_write,
            self._cold_tools,
        )
        self._evictor = Evictor(
            index=lambda: self.index,
            records=self._records,
            state=self._state,
            lifecycle=lifecycle,
            journal=self._journal,
            cold_tools=self._cold.tools,
            lock=self._home.evict_lock,
            hot_write=self._home.hot_write,
            policy=Policy(settings.evict_min_chains, settings.evict_batch_size, settings.crash_at),
            count_tokens=self._token_counter,
        )
        self.degraded: str | None = None
        self.recovered_on_open = 0
        if not read_only:
            self._intake.reconcile()
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
        with self._index_lock:
            index, self._index = self._index, None
        if index is not None:
            index.close()
        self._home.close()

    # ---- components ---------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = make_embedder(self.settings)
        return self._embedder

    @property
    def index(self) -> ActiveIndex:
        """The hot index, opened on first use (and, for the owner of an old home, its
        records filled in from it once)."""
        with self._index_lock:
            if self._index is None:
                index = self._open_index()
                if self.read_only:
                    self._check_complete(index)
                else:
                    self._tools.sync_records(index)
                self._index = index
            return self._index

    def _open_index(self) -> ActiveIndex:
        s = self.settings
        if s.chroma_url:
            url = urlparse(s.chroma_url)
            return ActiveIndex.http(
                url.hostname or "127.0.0.1",
                url.port or (443 if url.scheme == "https" else 8000),
                self.embedder,
                s.collection,
                ssl=url.scheme == "https",
                exact_limit=s.exact_limit,
                lexical=s.hybrid,
            )
        try:
            # a reader never creates a store: an empty one would be served as if no tool
            # were active
            return ActiveIndex.persistent(
                s.chroma_path,
                self.embedder,
                s.collection,
                create=not self.read_only,
                exact_limit=s.exact_limit,
                lexical=s.hybrid,
            )
        except IndexMissing as exc:
            raise IndexUnavailable(f"the hot index {s.chroma_path} is missing: {_REBUILD}") from exc
        except ToolIndexError as exc:
            if not self.read_only:
                raise
            raise IndexUnavailable(
                f"the hot index {s.chroma_path} cannot be opened here ({exc}): the embedded "
                "Chroma store writes as it opens, so lookups need a writable disk with space "
                "(or a server on the home, --url); checks, audits and listings still work"
            ) from exc

    def _check_complete(self, index: ActiveIndex) -> None:
        """A reader cannot rebuild the hot index: one that lost active tools (a deleted
        or emptied ``chroma/`` folder) is refused rather than served incomplete."""
        if self._state.meta(REGISTRY_MIGRATED) is None:
            return  # an old home: the index is its only record of the tools
        ids = self._records.ids()
        missing = len(ids - index.existing(ids)) if ids else 0
        if missing:
            raise IndexUnavailable(
                f"the hot index lacks {missing} of the {len(ids)} active tool(s): {_REBUILD}"
            )

    def _token_counter(self) -> tuple[str, Callable[[str], int]]:
        counter = getattr(self.embedder, "tokenizer_count", None)
        if counter is not None:
            return f"{self.embedder.name} tokenizer", counter
        return "approximate (words and punctuation)", _approximate_tokens

    # ---- ownership and recovery -------------------------------------------------------
    @boundary
    def maintain(self) -> int:
        """Finish moves a crash (or an unwritable store) interrupted, if this process
        owns the home; returns how many finished.  On failure the sidecar stays up,
        degraded: reads work, moves wait for the next try."""
        if self.read_only or not self._journal.unfinished():
            self.degraded = None
            return 0
        try:
            done = self._evictor.recover()
        except Busy:
            return 0  # another eviction is finishing them
        except (SidecarError, ColdStoreError, ToolIndexError, sqlite3.Error, OSError) as exc:
            self.degraded = f"interrupted moves cannot finish: {_plain(exc)}"
            log.warning("%s", self.degraded)
            return 0
        self.degraded = None
        return done

    def _stranded(self, exc: BaseException) -> int:
        """After a move failed mid-way: how many moves it left unfinished.  With any
        left, the sidecar is degraded (the server retries them until they finish)."""
        try:
            left = len(self._journal.unfinished())
        except (DatabaseError, sqlite3.Error):
            return 0
        if left:
            self.degraded = f"interrupted moves cannot finish: {_plain(exc)}"
            log.warning("%s", self.degraded)
        return left

    def _writable(self) -> None:
        if self.read_only:
            raise InvalidInput("this sidecar was opened read-only")

    def _moves_ready(self) -> None:
        """Before any write that moves tools: retry interrupted moves; refuse while they
        cannot finish."""
        self._writable()
        self.maintain()
        if self.degraded:
            raise Degraded(
                f"{self.degraded}; lookups and checks keep working, writes that move tools "
                "wait until the store is writable again"
            )

    def announce_server(self, url: str) -> None:
        self._home.announce_server(url)

    def withdraw_server(self) -> None:
        self._home.withdraw_server()

    @boundary
    def warm_up(self) -> int:
        """Open the hot index and load the model now, not on the first request;
        returns the number of active tools."""
        count = self.index.count()
        warm = getattr(self.embedder, "warm", None)
        if callable(warm):
            warm()
        else:
            self.embedder.embed(["warm up"])
        return count

    # ---- tools --------------------------------------------------------------------
    @boundary
    def add_tools(
        self, tools: Sequence[Tool], progress: Callable[[int], None] | None = None
    ) -> AddToolsResult:
        """Upsert tools into the hot index (credentials go to the state store)."""
        self._writable()
        return self._tools.add(tools, progress)

    @boundary
    def sync_tools(self, source: str, tools: Sequence[Tool]) -> SyncResult:
        """Make the hot index hold exactly ``source``'s current tools (an upstream MCP
        server's ``tools/list``): new ones added, changed ones re-embedded, ones it no
        longer lists gone from the hot index.  An evicted tool it still lists stays out
        (it comes back only by ``restore``)."""
        self._writable()
        return self._tools.sync(source, tools)

    def hidden_tools(self) -> set[str]:
        """Tools never to be listed or called: evicted, or with their move begun."""
        return set(self._cold_tools())

    def _cold_tools(self) -> frozenset[str]:
        return self._lookup.cold_tools(self._state.revisions()[1])

    @boundary
    def list_tools(self) -> list[Tool]:
        return self._tools.active()

    @boundary
    def list_tools_page(
        self, cursor: str | None = None, limit: int = DEFAULT_LIMIT, agent: bool = False
    ) -> ToolPage:
        """One page of :meth:`list_tools`, in id order; its ``next_cursor`` gives the
        next.  ``agent``: only what a lookup could show an agent (no tool evicted or
        withheld from every lookup, no credentials: see :mod:`sidecar.paging`)."""
        hidden = self._cold_tools() | (self._lookup.withheld_at_start() if agent else set())
        return self._tools.page(cursor, limit, hidden, "agent" if agent else "operator")

    @boundary
    def get_tools(self, tool_ids: Iterable[str]) -> dict[str, Tool]:
        return self._tools.get(tool_ids)

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
    ) -> LookupResult:
        """Top-k active tools for ``query``, never one that would complete a fatal
        sequence after the executed prefix ``after`` under ``context``.

        ``steps`` (the session so far: tool, arguments, output, error) stand for
        ``after`` when it is not given, and add warnings to the hits whose learned
        failure conditions the session already holds what they need for.

        The answer is ``abstained`` when even the best hit is below the
        ``abstain_below`` similarity: no active tool fits, the hits are only the best
        candidates."""
        text = query_text(query)
        done = redacted_steps(steps_of(steps))  # as the memory learned them
        executed = tool_list(after, "after") if after or not done else tuple(s.tool for s in done)
        ctx, k = context_values(context), k_value(k)
        index = self.index
        if self.settings.hybrid:
            vector = query_vectors(index.embedder, query_views(text))
        else:
            vector = index.embed_query(text)
        hybrid_text = text if self.settings.hybrid else None
        task = task_text(task_input)
        return self._lookup.search(
            index, vector, k, executed, ctx, done, task and redact_text(task), hybrid_text
        )

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

        executed, ctx = tool_list(after, "after"), context_values(context)
        k = k_value(k)
        return self._lookup.search(self.index, np.asarray(vector), k, executed, ctx)

    @boundary
    def check(
        self,
        plan: Sequence[str],
        mode: CheckMode = "sequence",
        context: Mapping[str, Any] | None = None,
    ) -> CheckResult:
        return self._lookup.check(
            tool_list(plan, "plan"), check_mode(mode), context_values(context)
        )

    @boundary
    def check_call(
        self,
        steps: Sequence[Step | Mapping[str, Any]],
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        task_input: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> CallCheck:
        """Before a call: ``allow``, ``warn`` or ``block`` ``tool(arguments)`` after the
        session's ``steps``, with every reason (the learned condition or the fatal
        sequence that holds, its evidence and its pointer)."""
        done = steps_of(steps)
        name = check_tool_id(tool, "next.tool")
        args = dict(arguments or {})
        if not isinstance(arguments or {}, Mapping):
            raise InvalidInput("next.arguments must be an object")
        check_json_value(args, "next.arguments")
        # compared with what the memory learned, redacted as it was: no secret of the
        # call is matched raw or quoted back in a reason
        task = task_text(task_input)
        return self._lookup.check_call(
            redacted_steps(done),
            name,
            redact(args),
            task and redact_text(task),
            context_values(context),
        )

    def matcher_size(self) -> int:
        """Active constraints compiled into the matcher."""
        return len(self._lookup.matcher())

    # ---- intake -------------------------------------------------------------------
    @boundary
    def report(
        self,
        report: ChainReport | StepReport | Mapping[str, Any],
        source: str = LOCAL,
        role: Role = "operator",
    ) -> IntakeResult:
        """Run one chain report through the decision boundary (never raises for a bad
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
        after each chunk.  An untrusted source may send at most ``report_rate`` reports
        a minute (:class:`~sidecar.errors.RateLimited`)."""
        self._writable()
        check_source(source)
        items = list(reports)
        if source not in self._trusted:
            self._rate.take(source, len(items))
        operator = role == "operator"
        if progress is None:
            return self._intake.report_many(items, chunk, source, operator)
        out: list[IntakeResult] = []
        for start in range(0, len(items), max(1, chunk)):
            part = items[start : start + max(1, chunk)]
            out += self._intake.report_many(part, chunk, source, operator)
            progress(len(out))
        return out

    @boundary
    def forget(self, source: str, since: float | None = None) -> Forgotten:
        """Remove what ``source`` reported (since ``since``, a Unix time, when given)
        and derive again what rested on it: the conditions it taught, the sessions it
        counted toward sightings, dead ends and contradictions."""
        self._writable()
        check_source(source)
        if since is not None and (isinstance(since, bool) or not isinstance(since, int | float)):
            raise InvalidInput("since must be a Unix time in seconds")
        memory = self._calls.forget(source, since)
        sequences = self._intake.forget(source, since)
        return Forgotten(
            source=source,
            sessions=len(memory.sessions | sequences.sessions),
            conditions=memory.conditions,
            constraints=sequences.constraints,
            tools=memory.tools,
        )

    def trusted_sources(self) -> frozenset[str]:
        return self._trusted

    def _evict_after_report(self) -> str:
        try:
            evicted = self.evict().evicted
        except SidecarError as exc:
            return f"; eviction skipped: {exc}"
        return f"; evicted {', '.join(d.tool_id for d in evicted) or 'nothing'}"

    # ---- eviction -----------------------------------------------------------------
    @boundary
    def decide(self, min_chains: int | None = None) -> list[ToolDecision]:
        """What an eviction would do now, per prefix tool, with the chains behind it
        (``min_chains`` overrides the ``evict_min_chains`` setting)."""
        return self._evictor.decide(_min_chains(min_chains))

    @boundary
    def evict(
        self,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        min_chains: int | None = None,
    ) -> EvictionReport:
        """Run the decision and the moves (raises :class:`~sidecar.errors.Busy` if one
        is running).  ``min_chains`` overrides the ``evict_min_chains`` setting."""
        need = _min_chains(min_chains)
        if dry_run:
            self._writable()
            return self._evictor.run(dry_run=True, progress=progress, min_chains=need)
        self._moves_ready()
        try:
            return self._evictor.run(dry_run=False, progress=progress, min_chains=need)
        except Busy:
            raise
        except (SidecarError, ColdStoreError, ToolIndexError, sqlite3.Error, OSError) as exc:
            left = self._stranded(exc)
            if not left:
                raise
            raise Degraded(
                f"the eviction stopped with {left} move(s) unfinished "
                f"({redact_text(str(exc))}); "
                "lookups and checks keep working and never serve those tools, and the moves "
                "finish once the store is writable again"
            ) from exc

    def eviction_running(self) -> bool:
        return self._evictor.running()

    @boundary
    def recover(self) -> Recovered:
        """Finish moves a crash interrupted, and rebuild the active tools the hot index
        lost (from the state's records)."""
        self._writable()
        _ = self.index  # opening it rebuilds active tools the hot index lost
        done = self.recovered_on_open + self._evictor.recover()
        self.recovered_on_open = 0
        self.degraded = None
        return Recovered(done)

    @boundary
    def restore(self, tool_id: str, reason: str, lift_constraints: bool = False) -> RestoreResult:
        """Bring an evicted tool back from cold storage into the hot index."""
        check_tool_id(tool_id)
        why = _reason(reason, "a restore needs a reason (what was fixed)")
        self._moves_ready()

        def lift(chains: Sequence[str]) -> list[str]:
            if not lift_constraints:
                return []
            return [
                c
                for c in chains
                if self._state.set_constraint_status(c, "lifted", f"restore: {why}")
            ]

        return self._evictor.restore(tool_id, why, lift)

    # ---- constraints ----------------------------------------------------------------
    @boundary
    def constraints(self, include_lifted: bool = False) -> list[ConstraintView]:
        """The constraints: fatal sequences and learned call conditions, each with its
        status, support, contradictions and when it was first and last confirmed.
        Retired and lifted ones are listed only with ``include_lifted``."""
        now = time.time()
        sessions = self._state.chain_session_times()
        out: list[ConstraintView] = []
        for c in self._state.chains():
            status = self._lifecycle.status(
                c.lifted, c.contradictions, c.baseline, c.last_seen, now
            )
            if status not in ENFORCED and not include_lifted:
                continue
            out.append(sequence_view(c, status, len(sessions.get(c.chain_id, ())) or 1))
        for st in sorted(self._calls.states().values(), key=lambda x: x.valid_from):
            if st.status not in ENFORCED and not include_lifted:
                continue
            out.append(condition_view(st))
        return out

    @boundary
    def constraint(self, constraint_id: str) -> ConstraintView:
        """One constraint, whatever its status (a chain id or a call condition id)."""
        check_constraint_id(constraint_id)
        found = [v for v in self.constraints(include_lifted=True) if v.chain_id == constraint_id]
        if not found:
            raise NotFound(f"no constraint {constraint_id!r}")
        return found[0]

    @boundary
    def lift(self, chain_id: str, reason: str) -> ConstraintChange:
        """Stop enforcing a constraint: an archived chain's (32 hex digits) or a learned
        call condition's (16); the record stays for audit."""
        return self._set_status(chain_id, reason, lifted=True)

    @boundary
    def reinstate(self, chain_id: str, reason: str) -> ConstraintChange:
        """Enforce a lifted or retired constraint again; only contradictions met from
        now on count against it."""
        return self._set_status(chain_id, reason, lifted=False)

    def _set_status(self, constraint_id: str, reason: str, lifted: bool) -> ConstraintChange:
        self._writable()
        check_constraint_id(constraint_id)
        verb = "lifting" if lifted else "reinstating"
        why = _reason(reason, f"{verb} a constraint needs a reason")
        status = "lifted" if lifted else "active"
        if len(constraint_id) == 32:
            found = self._state.set_constraint_status(constraint_id, status, why)
        else:
            found = self._calls.set_status(constraint_id, lifted)
            if found:
                self._state.log_constraint_event(constraint_id, status, why)
        if not found:
            raise NotFound(f"no constraint {constraint_id!r}")
        return ConstraintChange(constraint_id, status)

    # ---- revocations ----------------------------------------------------------------
    @boundary
    def mandates(self, status: str | None = None) -> list[Mandate]:
        """Revocation mandates, all or those with ``status``."""
        if status is not None and status not in MANDATE_STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(MANDATE_STATUSES)}")
        return self._ledger.mandates(status)

    def mandate_counts(self) -> dict[str, int]:
        return self._ledger.counts()

    @boundary
    def run_revocations(self, revoker: Revoker | None = None) -> RevocationRun:
        self._writable()
        used = revoker or make_revoker(
            self.settings.revoker, self.settings.revocation_allow_link_local
        )
        return RevocationRun(used.name, self._ledger.run(used))

    # ---- audit and status -------------------------------------------------------------
    @boundary
    def audit(self, pointer: str) -> AuditRecord:
        """The full cold record behind a chain or tool pointer, JSON columns decoded.
        ``cold://tools/<tool_id>`` names an evicted tool's latest record."""
        table, key = parse_pointer(pointer)
        if table == "tools":
            return self._audit_tool(key, pointer)
        try:
            row = self._cold.resolve(pointer)
        except RecordNotFound as exc:
            raise NotFound(f"nothing archived at {pointer}") from exc
        return AuditRecord(archive.audit_view(row, pointer))

    def _audit_tool(self, key: str, pointer: str) -> AuditRecord:
        """An evicted tool's record, by its move's id or by the tool's id (evicted now, or
        since restored), with its restores and the name variants added since.  When its
        cold file was lost (quarantined), or its move has not reached the cold store yet,
        the journal's intent stands in: it captured the whole hot record before anything
        moved."""
        move: str | None = key
        if not self._cold.tools.contains(key) and self._journal.snapshot(key) is None:
            evicted = self._journal.evicted().get(key)
            move = evicted.move_id if evicted is not None else self._journal.latest_move(key)
        if move is None:
            raise NotFound(f"nothing archived at {pointer}")
        shown = make_pointer("tools", move)
        try:
            view = archive.audit_view(self._cold.tools.get(move), shown)
        except (RecordNotFound, RecordQuarantined) as exc:
            intent = self._journal.snapshot(move)
            if intent is None:
                if isinstance(exc, RecordNotFound):
                    raise NotFound(f"nothing archived at {pointer}") from exc
                raise
            view = archive.intent_view(intent, move, shown, str(exc))
        view["restores"] = self._journal.restores(view["tool_id"])
        view["variants_added"] = self._state.events(move, "variant_added")
        return AuditRecord(view)

    @boundary
    def digest(self) -> Digest:
        entries = [
            archive.digest_entry(r["topology"], r["terminal_signature"])
            for r in self._cold.chains.scan(["topology", "terminal_signature"])
        ]
        if not entries:
            raise EmptyArchive()
        return Digest(archive.archive_digest(entries), len(entries), self._unreadable_chains())

    def _unreadable_chains(self) -> int:
        return max(0, self._state.constraint_count() - self._cold.chains.count())

    @boundary
    def maintain_archive(self, retention_hours: float | None = None) -> ArchiveMaintenance:
        """Compact, checkpoint and vacuum the cold tables, one process at a time across
        every replica (an advisory lock; a second run gets ``Busy``).  Vacuum deletes
        only files no commit names that are older than ``retention_hours`` (default a
        week, never under an hour), so a writer between writing a data file and
        committing it, or a reader still holding a compacted-away file, never loses it."""
        self._writable()
        retention = DEFAULT_VACUUM_RETENTION
        if retention_hours is not None:
            if isinstance(retention_hours, bool) or not isinstance(retention_hours, int | float):
                raise InvalidInput("retention_hours must be a number")
            retention = timedelta(hours=retention_hours)
            if retention < MIN_VACUUM_RETENTION:
                raise InvalidInput(
                    f"retention_hours must be at least {MIN_VACUUM_RETENTION.seconds // 3600}: "
                    "a writer may still commit a younger file"
                )
        steps: list[MaintenanceStep] = []
        with self._state.db.advisory_lock("archive", "archive maintenance"):
            for name, run in (
                ("compact", self._cold.compact),
                ("checkpoint", self._cold.checkpoint),
                ("vacuum", lambda: self._cold.vacuum(retention)),
            ):
                steps += [
                    MaintenanceStep(m.table, name, m.files_added, m.files_removed, m.version)
                    for m in run()
                ]
        return ArchiveMaintenance(
            self._cold.backend, tuple(steps), retention.total_seconds() / 3600
        )

    @boundary
    def status(self, verify: bool = False) -> ArchiveStatus:
        """Counts, quarantined and damaged files, and health.  Every cold file's footer
        is read first, so that a torn file is counted as unreadable now rather than when
        one of its records is next read; every file's size is checked against what was
        published, and with ``verify`` its checksum too."""
        self._cold.check_footers()
        return ArchiveStatus(
            chains=self._cold.chains.count(),
            active_constraints=self.matcher_size(),
            evicted_tools=len(self._journal.evicted()),
            quarantined=tuple(
                QuarantinedView(q.name, str(q.path), q.reason) for q in self._cold.quarantined()
            ),
            unreadable_chains=self._unreadable_chains(),
            active_tools=self._records.count(),
            unfinished_moves=len(self._journal.unfinished()),
            degraded=self.degraded,
            damaged=tuple(
                QuarantinedView(q.name, str(q.path), q.reason) for q in self._cold.verify(verify)
            ),
            call_conditions=self._calls.enforced_count(),
        )

    def health(self) -> Health:
        """Readiness: the hot index answers, the cold store and state are writable, no
        interrupted move is stuck."""
        checks: dict[str, str] = {}
        try:
            index = self.index
            count = index.count()
            expected = self._records.count()
            if index.files_lost():
                checks["hot_index"] = (
                    "its files were deleted under this process: restart it to rebuild the "
                    "index from the state's records"
                )
            else:
                checks["hot_index"] = (
                    "ok" if count >= expected else f"{expected - count} active tool(s) missing"
                )
        except (ToolIndexError, SidecarError) as exc:
            checks["hot_index"] = f"unavailable: {redact_text(str(exc))}"
        checks["cold_store"] = self._cold.health()
        try:
            damaged = self._cold.verify()
        except ColdStoreError as exc:
            # a shared store (S3) that does not answer: not ready, and say why, rather
            # than fail the readiness probe itself with an internal error
            damaged = []
            checks["cold_store"] = f"unavailable: {_plain(exc)}"
        if checks["cold_store"] == "ok" and damaged:
            checks["cold_store"] = f"{len(damaged)} file(s) not as published: {damaged[0].reason}"
        checks["state"] = _writable_dirs(self.settings.home)
        if self.degraded and not self._journal.unfinished():
            self.degraded = None  # another replica finished the moves this one could not
        if self.degraded:
            checks["journal"] = self.degraded
        elif self._journal.unfinished() and not self._evictor.running():
            checks["journal"] = f"{len(self._journal.unfinished())} unfinished move(s)"
        else:
            checks["journal"] = "ok"
        return Health(all(v == "ok" for v in checks.values()), checks)


_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _plain(exc: BaseException) -> str:
    """An error's text, redacted and without terminal escape codes (the object store's
    client colours its messages)."""
    return redact_text(_ESCAPES.sub("", str(exc)))


_REBUILD = (
    "the owner of the home rebuilds it from the state's records when it next opens the "
    "index (start the server, or run `sidecar evict --recover`)"
)


def _writable_dirs(*paths: Any) -> str:
    """``ok`` when a byte can be written to a new file in each folder (a cold table's
    own folder too: a store can fail below its root), else which one cannot and why."""
    import tempfile

    for path in paths:
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".ready-") as probe:
                probe.write(b"x")
                probe.flush()  # a full disk refuses the byte, not the empty file
        except OSError as exc:
            return f"not writable: {exc.strerror} ({path})"
    return "ok"


def _reason(reason: object, missing: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput(missing)
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"a reason is at most {MAX_REASON} characters")
    return redact_text(check_text(reason, "reason"))


def _min_chains(value: Any) -> int | None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MIN_CHAINS
    ):
        raise InvalidInput(f"min_chains must be an integer >= 1, got {value!r}")
    return value


__all__ = ["Sidecar", "boundary", "make_embedder"]
