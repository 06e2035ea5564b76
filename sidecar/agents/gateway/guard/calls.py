"""The guarded ``tools/call``: checked against the memory in the state of the session it
belongs to, then refused, forwarded as a sample, or forwarded; what came back becomes a
step of that session.

``check_views`` first: the call under every name the tool has had
(:mod:`sidecar.agents.gateway.proxy.catalog`) after the steps as each link reads the session,
one verdict the memory decides; the gateway's own policy comes after it.  ``block``: an
``isError`` result naming the rule, its evidence and its pointer, not forwarded (but for
a bounded sample,
:mod:`sidecar.agents.gateway.guard.contest`); ``warn``: forwarded, the reasons in the result
(:mod:`sidecar.agents.gateway.guard.answers`); ``allow``: forwarded.  A call the upstream does not
answer within ``call_timeout_s`` is answered with an ``isError`` result saying so (and
cancelled upstream).  Each forwarded call becomes a bounded, redacted step of its
session (:mod:`sidecar.agents.evidence`): a small result's after the call has
returned (:mod:`sidecar.agents.gateway.guard.learning`), a large one's before, on a worker
thread, so that it never holds up another session.

The check stays on the path and is kept cheap: the session's steps under every name the
tool has had are kept as the session grows (:mod:`sidecar.agents.gateway.guard.session_views`), not
renamed again on every call.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sidecar.agents.evidence import result_size, step_from_error, step_from_result
from sidecar.agents.gateway.guard import answers
from sidecar.agents.gateway.guard.approval import ApprovalPolicy, held
from sidecar.agents.gateway.guard.backend import GatewayBackend, GuardReason, GuardVerdict, Step
from sidecar.agents.gateway.guard.contest import Contest
from sidecar.agents.gateway.guard.learning import Learning
from sidecar.agents.gateway.guard.linking import Link, handle_of
from sidecar.agents.gateway.guard.session_views import SessionViews
from sidecar.agents.gateway.guard.sessions import LinkedSessionBook
from sidecar.agents.gateway.guard.workers import GatewayStats, Reporter, Workers
from sidecar.agents.gateway.proxy.catalog import Catalog, Route
from sidecar.agents.gateway.proxy.relay import Relay
from sidecar.agents.gateway.proxy.upstream import CallTimedOut, UpstreamLink, is_link_failure
from sidecar.rules.verdict import RISK_RULE, risk_warning

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.types import CallToolResult

VIEWS = 1_000
"""Sessions whose renamed views are kept at most (each holds up to ``max_steps`` steps)."""
INLINE_EVIDENCE_CHARS = 2_048
"""Results up to this size become evidence on the event loop (a fraction of a
millisecond); larger ones on a worker thread."""


@dataclass(frozen=True)
class CallSettings:
    max_chars: int
    call_timeout_s: float | None
    warning_text: bool = True
    """A warned call's result carries the warning as text too (not only in ``_meta``)."""
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    appeal: str | None = None
    """The gateway's tool that files an appeal against a block, named in each refusal
    (``None``: the backend keeps no appeals)."""
    warn_risk: float | None = None
    """An allowed call is warned when its session's risk of ending abandoned is at least
    this (``None``: never; :func:`sidecar.rules.verdict.risk_warning`)."""


class CallPath:
    """The guarded call, over the parts of the gateway it uses."""

    def __init__(
        self,
        backend: GatewayBackend,
        catalog: Catalog,
        book: LinkedSessionBook,
        links: Mapping[str, UpstreamLink],
        relay: Relay,
        contest: Contest,
        run: tuple[Workers, Reporter, GatewayStats, Learning],
        settings: CallSettings,
        viewers: Callable[[str], str | None] = lambda _principal: None,
    ) -> None:
        """``viewers``: whom a principal's answers are worded for (its agent token's name;
        ``None``: an operator)."""
        self._backend = backend
        self._catalog = catalog
        self._book = book
        self._links = links
        self._relay = relay
        self._contest = contest
        self._workers, self._reporter, self.stats, self._learning = run
        self.settings = settings
        self.viewers = viewers
        # the renamed views of the sessions checked most recently: those of a session
        # that ended go with it, and at most VIEWS sessions' are kept
        self._views = SessionViews(catalog, min(book.limits.max_sessions, VIEWS))
        book.on_ended = self._views.forget

    def names(self, exposed: str) -> set[str]:
        """Every name the memory may know the tool ``exposed`` by (:mod:`.catalog`)."""
        route = self._catalog.route(exposed)
        return {exposed} if route is None else {exposed, route.plain, route.prefixed}

    async def call(
        self,
        link: Link,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None = None,
        ctx: ServerRequestContext[Any, Any] | None = None,
        client: str | None = None,
    ) -> CallToolResult:
        """The guarded call of tool ``name`` in the session ``link`` names (``ctx``: the
        client's request, to relay progress and the upstream's requests to; ``client``:
        the key the relay knows that client by)."""
        self.stats.calls += 1
        route = self._catalog.route(name)
        if route is None:
            return answers.error(f"tool not available: {name}")
        self._learning.settle(link.principal)  # every earlier step in its session
        stamp, steps = self._book.stamped_steps(link.key)
        views = self._views.views(link.key, stamp, steps, name)
        viewer = self.viewers(link.principal)
        hidden, verdict = await self._workers.checked(self._guard, views, name, arguments, viewer)
        if hidden:
            self.stats.refused_hidden += 1
            return answers.error(f"tool not available: {name}")
        verdict = _at_risk(verdict, self.settings.warn_risk)
        sampled = False
        if verdict.decision == "block":
            # a call a person must approve is never forwarded as a contest sample
            tool, policy = self._catalog.tool(name), self.settings.approval
            held = policy.active and policy.why(self.names(name), tool, verdict) is not None
            sampled = not held and self._contest.sample(tool, verdict.reasons)
            self._note(link, name, arguments, "sampled" if sampled else "block", verdict)
            if not sampled:
                self.stats.blocked += 1
                return answers.refusal(name, verdict.reasons, self.settings.appeal)
            self.stats.contest_samples += 1
        elif self.settings.approval.active:
            waiting = await self._held(link, name, arguments, verdict)
            if waiting is not None:
                self._note(link, name, arguments, "held", verdict)
                return answers.with_handle(waiting, handle_of(link))
        if not sampled:
            self._note(link, name, arguments, verdict.decision, verdict)
        learn = functools.partial(self.learn, link, sampled=sampled)
        result, forwarded = await self._forward(
            route, client or link.key, name, arguments, meta, ctx, learn
        )
        result = answers.with_handle(result, handle_of(link))
        if not forwarded or verdict.decision == "allow":
            return result
        self.stats.warned += 1
        return answers.warned(result, name, verdict, sampled, self.settings.warning_text)

    def _note(
        self,
        link: Link,
        name: str,
        arguments: dict[str, Any],
        decision: str,
        verdict: GuardVerdict,
    ) -> None:
        """What was decided for this call, for the backend's decision log."""
        level = "block" if verdict.decision == "block" else "warn"
        reasons = [
            {"rule_id": r.rule_id, "level": level, "explanation": r.explanation,
             "evidence": r.evidence}
            for r in verdict.reasons
        ]  # fmt: skip
        call = {"tool": name, "arguments": arguments, "decision": decision, "reasons": reasons}
        self._reporter.note(link.key, link.principal, call)

    async def _held(
        self, link: Link, name: str, arguments: dict[str, Any], verdict: GuardVerdict
    ) -> CallToolResult | None:
        """The answer to a call held for approval, or denied (``None``: it may run)."""
        policy = self.settings.approval
        why = policy.why(self.names(name), self._catalog.tool(name), verdict)
        if why is None:
            return None
        ask = getattr(self._backend, "request_approval", None)
        self.stats.held += 1
        if ask is None:
            return answers.error(
                f"Held for approval: {name} was not run, because {why}; but this gateway's "
                "memory keeps no approvals, so it cannot be approved here"
            )
        who = link.principal
        answer = await held(policy, lambda t, a, w: ask(t, a, who, w), name, arguments, why)
        if answer is None:
            self.stats.held -= 1  # approved: it runs
        return answer

    def _guard(
        self,
        views: list[tuple[list[Step], str]],
        name: str,
        arguments: dict[str, Any],
        viewer: str | None,
    ) -> tuple[bool, GuardVerdict]:
        # one worker-thread hop for every question
        if self.names(name) & self._backend.hidden_tools():
            return True, GuardVerdict.allow()
        return False, self._backend.check_views(views, arguments, viewer)

    async def _forward(
        self,
        route: Route,
        client: str,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None,
        ctx: ServerRequestContext[Any, Any] | None,
        learn: Callable[..., None],
    ) -> tuple[CallToolResult, bool]:
        """The upstream's result (and ``True``), or the gateway's own error when the
        upstream did not answer (and ``False``)."""
        from mcp.shared.exceptions import MCPError

        settings = self.settings
        try:
            with contextlib.ExitStack() as stack:
                on_progress = None
                if ctx is not None:
                    stack.enter_context(self._relay.origin(route.upstream, client, ctx))
                    on_progress = self._relay.progress_to(ctx)
                result = await self._links[route.upstream].call_tool(
                    route.name,
                    arguments,
                    meta,
                    timeout=settings.call_timeout_s,
                    on_progress=on_progress,
                )
        except CallTimedOut as exc:
            self.stats.timeouts += 1
            error = f"timed out after {exc.timeout:g} s"
            learn(_error_step(name, arguments, error, settings.max_chars))
            return answers.error(
                f"upstream {route.upstream}: {name} did not answer within {exc.timeout:g} s "
                "(the gateway's call timeout, SIDECAR_GATEWAY_CALL_TIMEOUT); the call was "
                "cancelled upstream"
            ), False
        except Exception as exc:
            self.stats.upstream_errors += 1
            if isinstance(exc, MCPError) and not is_link_failure(exc):
                # the upstream answered with a protocol error: the caller gets it as is
                learn(_error_step(name, arguments, exc.error.message, settings.max_chars))
                raise
            message = f"upstream {route.upstream} failed: {_exception_text(exc)}"
            learn(_error_step(name, arguments, message, settings.max_chars))
            return answers.error(message[:500]), False
        self.stats.forwarded += 1
        await self._learn_result(name, arguments, result, learn)
        return result, True

    async def _learn_result(
        self,
        name: str,
        arguments: dict[str, Any],
        result: CallToolResult,
        learn: Callable[..., None],
    ) -> None:
        """The step a forwarded call's result becomes: queued when small (built after the
        call returns), built now on a worker thread when large."""
        build = functools.partial(
            step_from_result,
            name,
            arguments,
            structured=result.structured_content,
            content=result.content,
            is_error=result.is_error,
            max_chars=self.settings.max_chars,
        )
        if result_size(result.structured_content, result.content) <= INLINE_EVIDENCE_CHARS:
            learn(build)
            return
        # taken now, off the event loop: queued, a large result's evidence would hold up
        # whichever call came to settle its principal's queue
        step = await self._workers.heavy(build)
        learn(lambda: step)

    def learn(self, link: Link, build: Callable[[], Step], sampled: bool = False) -> None:
        """The step ``build`` makes joins the session ``link`` names, after the call has
        returned (:mod:`sidecar.agents.gateway.guard.learning`), after its session's earlier
        steps."""
        done = functools.partial(self.record, link, sampled=sampled)
        self._learning.defer(link.principal, build, done)

    def record(self, link: Link, step: Step, sampled: bool = False) -> None:
        """``step`` joins the session ``link`` names."""
        traced = link.how == "trace"
        self._reporter.schedule(
            *self._book.observe(link.key, step, link.principal, link.inferred, traced)
        )
        if sampled:
            self._book.flag(link.key)  # a sample's outcome is evidence, even a success


def _error_step(name: str, arguments: dict[str, Any], error: str, max_chars: int) -> Any:
    return functools.partial(step_from_error, name, arguments, error, max_chars)


def _exception_text(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _exception_text(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _at_risk(verdict: GuardVerdict, level: float | None) -> GuardVerdict:
    """An allowed call warned when its session's risk of ending abandoned reached
    ``level``: forwarded, with the warning for the model to read."""
    text = risk_warning(verdict.risk, level) if verdict.decision == "allow" else None
    if text is None or verdict.risk is None:
        return verdict
    shown = ", ".join(f"{k} {v}" for k, v in verdict.risk.features.items())
    reason = GuardReason("session risk", text, shown, rule_id=RISK_RULE)
    return GuardVerdict("warn", (reason,), verdict.risk)
