"""The review desk and the decision log over HTTP: the part of
:class:`~sidecar.shells.client.RemoteSidecar` that asks what waits for a person and what
was decided (inherited by it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from sidecar.results import Activity, SessionActivity
from sidecar.storage.review import Appeal, Approval
from sidecar.trust.principals import LOCAL
from sidecar.wire import load

T = TypeVar("T")


def segment(value: str) -> str:
    """``value`` as one URL path segment (``/``, ``?``, ``..`` cannot escape it)."""
    return quote(value, safe="")


class _Calls(Protocol):
    def call(self, method: str, path: str, **kwargs: Any) -> Any: ...

    def _get(self, cls: type[T], path: str, key: str | None = None, **params: Any) -> T: ...

    def _post(self, cls: type[T], path: str, body: Any = None, key: str | None = None) -> T: ...


class RemoteReviewDesk:
    """Approvals, appeals and the decision log, asked of a server."""

    def request_approval(
        self: _Calls,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        source: str = LOCAL,
        why: str = "",
    ) -> Approval:
        body: dict[str, Any] = {"tool": tool, "arguments": dict(arguments or {}), "why": why}
        if source != LOCAL:
            body["source"] = source
        return self._post(Approval, "/v1/approvals", body)

    def approvals(self: _Calls, status: str | None = None, limit: int = 100) -> list[Approval]:
        return self._get(list[Approval], "/v1/approvals", "approvals", status=status, limit=limit)

    def approve(
        self: _Calls, approval_id: str, for_s: float | None = None, *, by: str = LOCAL
    ) -> Approval:
        path = f"/v1/approvals/{segment(approval_id)}/approve"
        return self._post(Approval, path, {"for_s": for_s})

    def deny(self: _Calls, approval_id: str, *, by: str = LOCAL) -> Approval:
        return self._post(Approval, f"/v1/approvals/{segment(approval_id)}/deny")

    def appeal(
        self: _Calls,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        reason: str = "",
        constraint_ids: Sequence[str] = (),
        *,
        source: str = LOCAL,
    ) -> Appeal:
        body: dict[str, Any] = {
            "tool": tool,
            "arguments": dict(arguments or {}),
            "reason": reason,
            "constraint_ids": list(constraint_ids),
        }
        if source != LOCAL:
            body["source"] = source
        return self._post(Appeal, "/v1/appeals", body)

    def note_calls(self: _Calls, calls: Sequence[Mapping[str, Any]], source: str = LOCAL) -> int:
        body: dict[str, Any] = {"calls": [dict(c) for c in calls]}
        if source != LOCAL:
            body["source"] = source
        return int(self.call("POST", "/v1/decisions", json=body)["kept"])

    def activity(self: _Calls, hours: int = 48) -> Activity:
        return self._get(Activity, "/v1/activity", hours=hours)

    def session_activity(self: _Calls, session_key: str, limit: int = 500) -> SessionActivity:
        params = {"key": session_key, "limit": limit}
        return load(SessionActivity, self.call("GET", "/v1/sessions/activity", params=params))

    def appeals(self: _Calls, status: str | None = None, limit: int = 100) -> list[Appeal]:
        return self._get(list[Appeal], "/v1/appeals", "appeals", status=status, limit=limit)

    def close_appeal(self: _Calls, appeal_id: str, granted: bool, *, by: str = LOCAL) -> Appeal:
        path = f"/v1/appeals/{segment(appeal_id)}/close"
        return self._post(Appeal, path, {"granted": granted})
