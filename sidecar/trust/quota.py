"""What one untrusted token may put into the sidecar: reports, steps and tool ids in no
catalog a minute, and bytes of evidence in the state.

A source whose token is trusted (``local``, operators, tokens marked trusted, the names
of ``SIDECAR_TRUSTED_SOURCES``) has no limit.  Every other token, whatever the route it
reports by (its own reports, ``gateway:<name>``, ``otlp:<name>``), spends one quota:

- **rates** (:class:`RateLimit`): ``SIDECAR_REPORT_RATE`` reports, ``SIDECAR_STEP_RATE``
  steps and ``SIDECAR_NEW_TOOL_RATE`` tool ids in no catalog a minute (each such id once
  per request), token buckets refilled continuously; a request over any of them is
  refused whole (429, :class:`~sidecar.errors.RateLimited`, with the setting's name);
- **tools in no catalog**: a tool is *known* when the catalog holds it (active or
  evicted) or trusted evidence named it (a fatal sequence in force, the call memory);
  the token's steps on other tools are context only (they ground the calls after them
  and teach nothing of their own tool: no statistics, no conditions, no sightings, no
  usage), and its chain reports naming one are rejected.  So made-up tool ids grow no
  per-tool state: only a counter per token (``sidecar_uncataloged_steps_total``);
- **evidence budget**: ``SIDECAR_EVIDENCE_BUDGET`` bytes of evidence in the state (the
  sessions the memory learned as its log keeps them, the records of archived calls,
  usage and counter rows: :mod:`sidecar.storage.budgets`, counted as each batch stores
  them); once the token
  has spent it, its reports are refused (429, :class:`~sidecar.errors.BudgetExhausted`)
  until an operator forgets some of its evidence or raises the budget.  The check comes
  before a request, so the request that crosses the budget is taken whole.

Why made-up tools are kept as context rather than refused: a real agent often calls a
tool the operator never put in the catalog (a framework's own ``final_answer``), and
refusing its whole session would lose what it says of the catalog's tools; the rate on
tool ids in no catalog still refuses a request that names them by the thousand.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.errors import BudgetExhausted, RateLimited
from sidecar.model import ChainReport, StepReport
from sidecar.settings import Settings
from sidecar.storage.budgets import BudgetRepository
from sidecar.trust.principals import check_source
from sidecar.trust.sources import reached_by_forget, token_of
from sidecar.validate import TOOL_ID_PATTERN

REPORTS, STEPS, NEW_TOOLS, BUDGET = "reports", "steps", "new_tool_ids", "evidence_budget"
LIMITS = (REPORTS, STEPS, NEW_TOOLS, BUDGET)
"""The limits, as ``sidecar_reports_refused_total`` labels them."""
Known = Callable[[set[str]], set[str]]
"""Which of some tool ids are known in one sense (see :class:`Quota`)."""
_RATES = {
    REPORTS: ("SIDECAR_REPORT_RATE", "send {n} reports a minute"),
    STEPS: ("SIDECAR_STEP_RATE", "send {n} steps a minute"),
    NEW_TOOLS: ("SIDECAR_NEW_TOOL_RATE", "name {n} tool ids in no catalog a minute"),
}


class RateLimit:
    """Token buckets per source, one per limit, refilled continuously: at most
    ``per_minute[limit]`` a minute (0: no limit).  A request takes from every bucket or
    from none."""

    def __init__(self, per_minute: Mapping[str, int]) -> None:
        self.per_minute = dict(per_minute)
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}

    def take(self, source: str, wanted: Mapping[str, int], now: float | None = None) -> None:
        """Take ``wanted[limit]`` from each of ``source``'s buckets, or raise
        :class:`~sidecar.errors.RateLimited` (naming the first limit short) and take
        nothing."""
        at = time.monotonic() if now is None else now
        with self._lock:
            levels: dict[str, float] = {}
            for limit, n in wanted.items():
                cap = self.per_minute.get(limit, 0)
                if cap <= 0 or n <= 0:
                    continue
                level, last = self._buckets.get((source, limit), (float(cap), at))
                levels[limit] = min(float(cap), level + (at - last) * cap / 60.0)
            for limit, level in levels.items():
                self._buckets[(source, limit)] = (level, at)
            for limit, level in levels.items():
                if wanted[limit] > level:
                    raise _refusal(source, limit, self.per_minute[limit], wanted[limit], level)
            for limit, level in levels.items():
                self._buckets[(source, limit)] = (level - wanted[limit], at)


def _refusal(source: str, limit: str, cap: int, n: int, level: float) -> RateLimited:
    setting, what = _RATES.get(limit, (limit, "send {n} a minute"))
    wait = (n - level) * 60.0 / cap
    whole = f"; this request alone holds {n}: send fewer at a time" if n > cap else ""
    return RateLimited(
        f"source {source!r} may {what.format(n=cap)} ({setting}){whole}; retry in {wait:.1f} s",
        retry_after=wait,
        limit=limit,
    )


@dataclass(frozen=True)
class Admission:
    """What a request of a source may teach: ``uncataloged`` are the tools it names that
    no catalog holds and it may not teach of (none for a trusted source)."""

    uncataloged: frozenset[str] = frozenset()


@dataclass(frozen=True)
class QuotaView:
    """The quotas as ``/metrics`` shows them."""

    budget_bytes: int
    evidence_bytes: dict[str, int]
    """Per token, the bytes of evidence its sources stored."""
    refused: dict[str, int]
    """Requests refused since the process started, per limit."""
    uncataloged_steps: dict[str, int]
    """Per token, steps on tools in no catalog taken as context only since the process
    started."""


class Quota:
    def __init__(
        self,
        rates: Mapping[str, int],
        budget: int,
        trusted: frozenset[str],
        budgets: BudgetRepository,
        cataloged: Known,
        named: Known,
    ) -> None:
        """``rates``: per limit (:data:`REPORTS`, :data:`STEPS`, :data:`NEW_TOOLS`), how
        many a minute; ``budget``: bytes of evidence per token (0: no limit);
        ``cataloged``: which of some tool ids the catalog holds (active or evicted);
        ``named``: which of them trusted evidence named (a fatal sequence in force, the
        call memory)."""
        self.rate = RateLimit(rates)
        self.budget = budget
        self._trusted = trusted
        self._budgets = budgets
        self._cataloged = cataloged
        self._named = named
        self._lock = threading.Lock()
        self._refused: Counter[str] = Counter()
        self._uncataloged: Counter[str] = Counter()

    @classmethod
    def of(
        cls,
        settings: Settings,
        trusted: frozenset[str],
        budgets: BudgetRepository,
        cataloged: Known,
        named: Known,
    ) -> Quota:
        """The quota the settings give each untrusted token."""
        rates = {
            REPORTS: settings.report_rate,
            STEPS: settings.step_rate,
            NEW_TOOLS: settings.new_tool_rate,
        }
        return cls(rates, settings.evidence_budget, trusted, budgets, cataloged, named)

    def admit(self, source: str, reports: Sequence[Any]) -> Admission:
        """Whether ``source`` (a valid source name, else
        :class:`~sidecar.errors.InvalidInput`) may report ``reports`` now (else
        :class:`~sidecar.errors.RateLimited` or :class:`~sidecar.errors.BudgetExhausted`),
        and what it may teach of."""
        token = token_of(check_source(source))
        if token in self._trusted:
            return Admission()
        try:
            self._check_budget(token)
            steps = [tools_of(r) for r in reports]
            named = {t for tools in steps for t in tools if TOOL_ID_PATTERN.fullmatch(t)}
            unknown = self._unknown(named)
            wanted = {REPORTS: len(reports), STEPS: sum(map(len, steps)), NEW_TOOLS: len(unknown)}
            self.rate.take(token, wanted)
        except RateLimited as exc:
            with self._lock:
                self._refused[exc.limit] += 1
            raise
        if unknown:
            with self._lock:
                self._uncataloged[token] += sum(t in unknown for tools in steps for t in tools)
        return Admission(frozenset(unknown))

    def _unknown(self, ids: set[str]) -> set[str]:
        rest = ids - self._cataloged(ids) if ids else ids
        return rest - self._named(rest) if rest else rest

    def _check_budget(self, token: str) -> None:
        if self.budget <= 0:
            return
        spent = self._budgets.spent(reached_by_forget(token))
        if spent >= self.budget:
            raise BudgetExhausted(
                f"source {token!r} has put {spent:,} bytes of evidence into the state, its "
                f"evidence budget of {self.budget:,} (SIDECAR_EVIDENCE_BUDGET): an operator "
                f"may forget some of it (sidecar forget --source {token}) or raise the budget"
            )

    def view(self) -> QuotaView:
        spent: Counter[str] = Counter()
        for source, n in self._budgets.by_source().items():
            spent[token_of(source)] += n
        with self._lock:
            return QuotaView(self.budget, dict(spent), dict(self._refused), dict(self._uncataloged))


def tools_of(report: Any) -> list[str]:
    """The tool ids a report names, step by step (its topology for a chain), read
    without checking the rest of it (the intake does)."""
    if isinstance(report, StepReport):
        return [s.tool for s in report.steps]
    if isinstance(report, ChainReport):
        return list(report.topology)
    if not isinstance(report, Mapping):
        return []
    raw = report.get("steps") if "steps" in report else report.get("topology")
    if not isinstance(raw, list):
        return []
    names: Iterable[Any] = (s.get("tool") if isinstance(s, Mapping) else s for s in raw)
    return [n for n in names if isinstance(n, str)]


__all__ = [
    "BUDGET",
    "LIMITS",
    "NEW_TOOLS",
    "REPORTS",
    "STEPS",
    "Admission",
    "Quota",
    "QuotaView",
    "RateLimit",
]
