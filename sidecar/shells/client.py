"""A running sidecar over HTTP, with the library's own methods and answers.

:class:`RemoteSidecar` has the methods of :class:`~sidecar.core.Sidecar` that the shells
use, with the same parameters, returning the same typed values (read back with
:func:`sidecar.wire.load`); an HTTP error comes back as the library's error class for
its code (:func:`sidecar.errors.from_code`).  ``tests/sidecar/test_surface.py`` checks
that the two agree; ``tests/sidecar/test_operations.py`` that each method is an operation
declared in :mod:`sidecar.shells.operations` and asks the route declared for it.  Ids
put into a URL path are percent-encoded.

Batches of any size: tools and reports are sent in as many requests as it takes to keep
each body under the limit the server states in ``/version`` (``max_body_bytes``; the
default limit for a server that does not say), so a command never meets a 413 for a
file it could have sent in parts.  A report that is over the limit alone comes back
``rejected`` with the reason; the others are sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from sidecar.errors import BodyTooLarge, Unauthorized, Unreachable, from_code
from sidecar.eviction import EvictionReport, RestoreResult, ToolDecision
from sidecar.eviction.revocation import Mandate
from sidecar.limits import (
    INTAKE_CHUNK,
    MAX_BODY_BYTES,
    MAX_REPORTS_PER_REQUEST,
    MAX_TOOLS_PER_REQUEST,
    CheckMode,
)
from sidecar.memory import Step
from sidecar.model import CallCheck, CheckResult, IntakeResult, LookupResult, Tool
from sidecar.results import (
    ArchiveMaintenance,
    ArchiveStatus,
    AuditRecord,
    ConstraintChange,
    ConstraintView,
    Digest,
    Forgotten,
    Health,
    Recovered,
    RevocationRun,
    ToolHistory,
)
from sidecar.shells.client_review import RemoteReviewDesk, segment
from sidecar.tools.paging import DEFAULT_LIMIT, MAX_LIMIT, ToolPage
from sidecar.tools.records import AddToolsResult, SyncResult
from sidecar.trust.principals import LOCAL
from sidecar.wire import load

T = TypeVar("T")


def _step(step: Step | Mapping[str, Any]) -> dict[str, Any]:
    return step.to_dict() if isinstance(step, Step) else dict(step)


def encode(value: Any) -> bytes:
    """A request body's JSON as it is sent (and measured against the limit).  A number
    that is not finite has no JSON form: ``ValueError``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def packed(key: str, parts: Sequence[bytes], limit: int, most: int) -> Iterator[list[int]]:
    """The indexes of ``parts`` (encoded items) grouped into ``{key: [...]}`` bodies of at
    most ``limit`` bytes and ``most`` items, in order.  An item over the limit alone is a
    group of its own (its request is refused; the caller decides what that means)."""
    empty = len(encode({key: []}))
    group: list[int] = []
    size = empty
    for i, part in enumerate(parts):
        grown = size + len(part) + (1 if group else 0)
        if group and (grown > limit or len(group) == most):
            yield group
            group, grown = [], empty + len(part)
        group.append(i)
        size = grown
    if group:
        yield group


class RemoteSidecar(RemoteReviewDesk):
    def __init__(
        self, url: str, token: str | None, timeout: float = 600.0, token_source: str = ""
    ) -> None:
        """``token_source`` says where the token came from (``$SIDECAR_TOKEN``, a
        file), or where none was found, for a 401's message."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        # worded so that the redaction of error messages keeps it whole: "token: from"
        # reads as a secret after its name and would be masked
        self._token_hint = (
            f"the token sent came from {token_source or 'the caller'}"
            if token
            else f"no token was sent: none {f'in {token_source}' if token_source else 'given'}"
        )
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._limit: int | None = None
        self.page_size = MAX_LIMIT
        """Tools asked for per page when :meth:`list_tools` walks the catalog."""

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteSidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transport ------------------------------------------------------------------
    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise Unreachable(f"cannot reach the sidecar at {self.url}: {exc}") from None
        if response.status_code < 400:
            return response.json()
        try:
            err = response.json()["error"]
            code, message = str(err["code"]), str(err["message"])
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", response.text[:200]
        if response.status_code == 401:
            raise Unauthorized(f"{self.url} refused the token: {message} ({self._token_hint})")
        if response.status_code == 413:
            raise BodyTooLarge(
                f"the sidecar at {self.url} refused the request: {message} (its limit is "
                "set by `sidecar serve --max-body BYTES`)"
            )
        raise from_code(code, message, response.status_code)

    def _body_limit(self) -> int:
        """The largest request body the server takes, as its ``/version`` states it (read
        once); a server that does not state it takes the default."""
        if self._limit is None:
            stated = self.call("GET", "/version").get("max_body_bytes")
            ok = isinstance(stated, int) and not isinstance(stated, bool) and stated > 0
            self._limit = stated if ok else MAX_BODY_BYTES
        return self._limit

    def _post_raw(self, path: str, body: bytes) -> Any:
        return self.call("POST", path, content=body, headers={"content-type": "application/json"})

    def _get(self, cls: type[T], path: str, key: str | None = None, **params: Any) -> T:
        data = self.call("GET", path, params={k: v for k, v in params.items() if v is not None})
        return load(cls, data[key] if key else data)

    def _post(self, cls: type[T], path: str, body: Any = None, key: str | None = None) -> T:
        data = self.call("POST", path, json=body)
        return load(cls, data[key] if key else data)

    # ---- the library's surface --------------------------------------------------------
    def add_tools(
        self, tools: Sequence[Tool], progress: Callable[[int], None] | None = None
    ) -> AddToolsResult:
        """One request per batch under the server's body limit; a tool over the limit
        alone is :class:`BodyTooLarge`, with the tools before it already added."""
        parts = [encode(t.to_dict()) for t in tools]
        added: list[str] = []
        updated: list[str] = []
        warnings: list[str] = []
        done = 0
        for group in packed("tools", parts, self._body_limit(), MAX_TOOLS_PER_REQUEST):
            body = b'{"tools":[' + b",".join(parts[i] for i in group) + b"]}"
            if len(body) > self._body_limit():
                raise BodyTooLarge(
                    f"tool {tools[group[0]].tool_id} alone is {len(body)} bytes, over the "
                    f"{self._body_limit()}-byte request limit of the sidecar at {self.url} "
                    f"({len(added) + len(updated)} tool(s) before it were added)"
                )
            result = load(AddToolsResult, self._post_raw("/v1/tools", body))
            added += result.added
            updated += result.updated
            warnings += result.warnings
            done += len(group)
            if progress is not None:
                progress(done)
        return AddToolsResult(tuple(added), tuple(updated), tuple(warnings))

    def list_tools(self) -> list[Tool]:
        """Every page of ``GET /v1/tools``, followed to the end."""
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            page = self.list_tools_page(cursor, self.page_size)
            tools += page.tools
            if page.next_cursor is None:
                return tools
            cursor = page.next_cursor

    def list_tools_page(self, cursor: str | None = None, limit: int = DEFAULT_LIMIT) -> ToolPage:
        return self._get(ToolPage, "/v1/tools", cursor=cursor, limit=limit)

    def sync_tools(self, source: str, tools: Sequence[Tool]) -> SyncResult:
        """One request: the sync of a source is all-or-nothing (a catalog over the
        server's body limit is :class:`BodyTooLarge`)."""
        body = {"source": source, "tools": [t.to_dict() for t in tools]}
        return self._post(SyncResult, "/v1/tools/sync", body)

    def hidden_tools(self) -> set[str]:
        return set(self.call("GET", "/v1/tools/hidden")["tools"])

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
        body: dict[str, Any] = {
            "query": query,
            "k": k,
            "after": list(after),
            "context": dict(context or {}),
        }
        if steps is not None:
            body["steps"] = [_step(s) for s in steps]
        if task_input is not None:
            body["task_input"] = task_input
        if viewer is not None:
            body["viewer"] = viewer
        if session_id is not None:
            body["session_id"] = session_id
        return self._post(LookupResult, "/v1/search", body)

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
        body = {
            "steps": [_step(s) for s in steps],
            "next": {"tool": tool, "arguments": dict(arguments or {})},
            "task_input": task_input,
            "context": dict(context or {}),
            "viewer": viewer,
            "session_id": session_id,
        }
        return self._post(CallCheck, "/v1/check", body)

    def check(
        self,
        plan: Sequence[str],
        mode: CheckMode = "sequence",
        context: Mapping[str, Any] | None = None,
        viewer: str | None = None,
    ) -> CheckResult:
        body = {"plan": list(plan), "mode": mode, "context": dict(context or {}), "viewer": viewer}
        return self._post(CheckResult, "/v1/check", body)

    def report_many(
        self,
        reports: Iterable[Any],
        chunk: int = INTAKE_CHUNK,
        progress: Callable[[int], None] | None = None,
        source: str = LOCAL,
    ) -> list[IntakeResult]:
        """One request per batch of at most ``chunk`` reports under the server's body
        limit (each request is all-or-nothing on the server).  A report that cannot be
        sent (over the limit alone, or a number JSON has no form for) comes back
        ``rejected`` with the reason, in its place.  ``source``: the source the reports
        are attributed to (another than the token's own needs an operator's token); the
        default leaves it to the server: the token's name."""
        items = list(reports)
        out: list[IntakeResult | None] = [None] * len(items)
        parts: list[bytes] = []
        sendable: list[int] = []
        for i, item in enumerate(items):
            try:
                parts.append(encode(item))
                sendable.append(i)
            except (TypeError, ValueError):
                out[i] = IntakeResult(
                    "rejected", reason="not JSON: a number that is not finite, or a value "
                    "JSON has no form for",
                )  # fmt: skip
        tail = (b',"source":' + encode(source) if source != LOCAL else b"") + b"}"
        limit, done = self._body_limit(), len(items) - len(sendable)
        most = max(1, min(chunk, MAX_REPORTS_PER_REQUEST))
        for group in packed("reports", parts, limit - len(tail) + 1, most):
            body = b'{"reports":[' + b",".join(parts[j] for j in group) + b"]" + tail
            if len(body) > limit:
                out[sendable[group[0]]] = IntakeResult(
                    "rejected",
                    reason=f"{len(parts[group[0]])} bytes, over the {limit}-byte request "
                    f"limit of the sidecar at {self.url} (`sidecar serve --max-body`)",
                )
            else:
                data = self._post_raw("/v1/reports", body)
                for j, result in zip(group, load(list[IntakeResult], data["results"]), strict=True):
                    out[sendable[j]] = result
            done += len(group)
            if progress is not None:
                progress(done)
        return [r for r in out if r is not None]

    def report(self, report: Any) -> IntakeResult:
        return self.report_many([report])[0]

    def audit(self, pointer: str, viewer: str | None = None) -> AuditRecord:
        if viewer is None:
            return self._get(AuditRecord, "/v1/audit", pointer=pointer)
        return self._get(AuditRecord, "/v1/audit", pointer=pointer, viewer=viewer)

    def digest(self) -> Digest:
        return self._get(Digest, "/v1/archive/digest")

    def maintain_archive(self, retention_hours: float | None = None) -> ArchiveMaintenance:
        return self._post(
            ArchiveMaintenance, "/v1/archive/maintain", {"retention_hours": retention_hours}
        )

    def status(self, verify: bool = False) -> ArchiveStatus:
        return self._get(ArchiveStatus, "/v1/archive/status", verify=verify)

    def health(self) -> Health:
        # /readyz answers 503 with the checks when not ready, so ``call`` (which raises
        # on any 4xx/5xx) cannot read it; but a server whose state cannot be read at all
        # answers the error envelope instead, which is that error, not a Health
        try:
            response = self._http.get("/readyz")
        except httpx.HTTPError as exc:
            raise Unreachable(f"cannot reach the sidecar at {self.url}: {exc}") from None
        data = response.json()
        if isinstance(data, dict) and "ready" not in data and isinstance(data.get("error"), dict):
            err = data["error"]
            raise from_code(str(err.get("code")), str(err.get("message")), response.status_code)
        return load(Health, data)

    def constraints(
        self, include_lifted: bool = False, viewer: str | None = None
    ) -> list[ConstraintView]:
        asked: dict[str, Any] = {"include_lifted": include_lifted}
        if viewer is not None:
            asked["viewer"] = viewer
        return self._get(list[ConstraintView], "/v1/constraints", "constraints", **asked)

    def constraint(self, constraint_id: str, viewer: str | None = None) -> ConstraintView:
        path = f"/v1/constraints/{segment(constraint_id)}"
        if viewer is None:
            return self._get(ConstraintView, path)
        return self._get(ConstraintView, path, viewer=viewer)

    def lift(self, constraint_id: str, reason: str) -> ConstraintChange:
        path = f"/v1/constraints/{segment(constraint_id)}/lift"
        return self._post(ConstraintChange, path, {"reason": reason})

    def reinstate(self, constraint_id: str, reason: str) -> ConstraintChange:
        path = f"/v1/constraints/{segment(constraint_id)}/reinstate"
        return self._post(ConstraintChange, path, {"reason": reason})

    def confirm(self, constraint_id: str, reason: str) -> ConstraintChange:
        path = f"/v1/constraints/{segment(constraint_id)}/confirm"
        return self._post(ConstraintChange, path, {"reason": reason})

    def retire(self, constraint_id: str, reason: str) -> ConstraintChange:
        path = f"/v1/constraints/{segment(constraint_id)}/retire"
        return self._post(ConstraintChange, path, {"reason": reason})

    def forget(self, source: str, since: float | None = None) -> Forgotten:
        path = f"/v1/sources/{segment(source)}/forget"
        return self._post(Forgotten, path, {"since": since})

    def decide(self, min_chains: int | None = None) -> list[ToolDecision]:
        return self._get(
            list[ToolDecision], "/v1/evictions/decision", "decisions", min_chains=min_chains
        )

    def evict(
        self,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        min_chains: int | None = None,
    ) -> EvictionReport:
        body: dict[str, Any] = {"dry_run": dry_run}
        if min_chains is not None:
            body["min_chains"] = min_chains
        return self._post(EvictionReport, "/v1/evictions", body)

    def recover(self) -> Recovered:
        return self._post(Recovered, "/v1/evictions/recover")

    def restore(self, tool_id: str, reason: str, lift_constraints: bool = False) -> RestoreResult:
        body = {"reason": reason, "lift_constraints": lift_constraints}
        return self._post(RestoreResult, f"/v1/tools/{segment(tool_id)}/restore", body)

    def tool_history(self, tool_id: str) -> ToolHistory:
        return self._get(ToolHistory, f"/v1/tools/{segment(tool_id)}/history")

    def mandates(self, status: str | None = None) -> list[Mandate]:
        return self._get(list[Mandate], "/v1/revocations", "mandates", status=status)

    def run_revocations(self) -> RevocationRun:
        return self._post(RevocationRun, "/v1/revocations/run")

    # ---- what waits for a person (``by`` and an agent's ``source``: the token's name)
