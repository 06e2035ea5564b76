"""A running sidecar over HTTP, with the library's own methods and answers.

:class:`RemoteSidecar` has the methods of :class:`~sidecar.app.Sidecar` that the shells
use, with the same parameters, returning the same typed values (read back with
:func:`sidecar.wire.load`); an HTTP error comes back as the library's error class for
its code (:func:`sidecar.errors.from_code`).  ``tests/sidecar/test_surface.py`` checks
that the two agree.  Ids put into a URL path are percent-encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from sidecar.errors import Unauthorized, Unreachable, from_code
from sidecar.eviction import EvictionReport, RestoreResult, ToolDecision
from sidecar.limits import INTAKE_CHUNK, MAX_REPORTS_PER_REQUEST, CheckMode
from sidecar.memory import Step
from sidecar.model import CallCheck, CheckResult, IntakeResult, LookupResult, Tool
from sidecar.registry import AddToolsResult
from sidecar.results import (
    ArchiveStatus,
    AuditRecord,
    ConstraintChange,
    ConstraintView,
    Digest,
    Forgotten,
    Health,
    Recovered,
    RevocationRun,
)
from sidecar.revocation import Mandate
from sidecar.wire import load

T = TypeVar("T")


def _step(step: Step | Mapping[str, Any]) -> dict[str, Any]:
    return step.to_dict() if isinstance(step, Step) else dict(step)


def segment(value: str) -> str:
    """``value`` as one URL path segment (``/``, ``?``, ``..`` cannot escape it)."""
    return quote(value, safe="")


class RemoteSidecar:
    def __init__(
        self, url: str, token: str | None, timeout: float = 600.0, token_source: str = ""
    ) -> None:
        """``token_source`` says where the token came from, for a 401's message."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._token_source = token_source or ("given" if token else "none found")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

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
            raise Unauthorized(
                f"{self.url} refused the token: {message} (token: {self._token_source})"
            )
        raise from_code(code, message, response.status_code)

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
        body = {"tools": [t.to_dict() for t in tools]}
        result = self._post(AddToolsResult, "/v1/tools", body)
        if progress is not None:
            progress(len(tools))
        return result

    def list_tools(self) -> list[Tool]:
        return self._get(list[Tool], "/v1/tools", "tools")

    def search(
        self,
        query: str,
        k: int = 5,
        after: Sequence[str] = (),
        context: Mapping[str, Any] | None = None,
        steps: Sequence[Step | Mapping[str, Any]] | None = None,
        task_input: str | None = None,
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
        return self._post(LookupResult, "/v1/search", body)

    def check_call(
        self,
        steps: Sequence[Step | Mapping[str, Any]],
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        task_input: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> CallCheck:
        body = {
            "steps": [_step(s) for s in steps],
            "next": {"tool": tool, "arguments": dict(arguments or {})},
            "task_input": task_input,
            "context": dict(context or {}),
        }
        return self._post(CallCheck, "/v1/check", body)

    def check(
        self,
        plan: Sequence[str],
        mode: CheckMode = "sequence",
        context: Mapping[str, Any] | None = None,
    ) -> CheckResult:
        body = {"plan": list(plan), "mode": mode, "context": dict(context or {})}
        return self._post(CheckResult, "/v1/check", body)

    def report_many(self, reports: Iterable[Any], chunk: int = INTAKE_CHUNK) -> list[IntakeResult]:
        """One request per ``chunk`` reports, at most a request's limit: each request
        is all-or-nothing on the server."""
        items = list(reports)
        out: list[IntakeResult] = []
        chunk = min(chunk, MAX_REPORTS_PER_REQUEST)
        for start in range(0, len(items), chunk):
            body = {"reports": items[start : start + chunk]}
            out += self._post(list[IntakeResult], "/v1/reports", body, "results")
        return out

    def report(self, report: Any) -> IntakeResult:
        return self.report_many([report])[0]

    def audit(self, pointer: str) -> AuditRecord:
        return self._get(AuditRecord, "/v1/audit", pointer=pointer)

    def digest(self) -> Digest:
        return self._get(Digest, "/v1/archive/digest")

    def status(self, verify: bool = False) -> ArchiveStatus:
        return self._get(ArchiveStatus, "/v1/archive/status", verify=verify)

    def health(self) -> Health:
        response = self._http.get("/readyz")
        return load(Health, response.json())

    def constraints(self, include_lifted: bool = False) -> list[ConstraintView]:
        return self._get(
            list[ConstraintView], "/v1/constraints", "constraints", include_lifted=include_lifted
        )

    def constraint(self, constraint_id: str) -> ConstraintView:
        return self._get(ConstraintView, f"/v1/constraints/{segment(constraint_id)}")

    def lift(self, chain_id: str, reason: str) -> ConstraintChange:
        path = f"/v1/constraints/{segment(chain_id)}/lift"
        return self._post(ConstraintChange, path, {"reason": reason})

    def reinstate(self, chain_id: str, reason: str) -> ConstraintChange:
        path = f"/v1/constraints/{segment(chain_id)}/reinstate"
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

    def mandates(self, status: str | None = None) -> list[Mandate]:
        return self._get(list[Mandate], "/v1/revocations", "mandates", status=status)

    def run_revocations(self) -> RevocationRun:
        return self._post(RevocationRun, "/v1/revocations/run")
