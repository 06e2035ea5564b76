"""A client for a running sidecar's HTTP API, with the same answers as the library's
``to_dict()`` forms (the CLI uses it for ``--url``)."""

from __future__ import annotations

from typing import Any

import httpx

from sidecar.errors import InvalidInput, NotFound, SidecarError
from sidecar.lock import LockBusy


class RemoteError(SidecarError):
    code = "remote"

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} (HTTP {status} {code})")
        self.status = status
        self.code = code


class RemoteSidecar:
    def __init__(self, url: str, token: str | None, timeout: float = 600.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteSidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise RemoteError(0, "unreachable", f"cannot reach the sidecar: {exc}") from None
        if response.status_code >= 400:
            try:
                err = response.json()["error"]
                code, message = str(err["code"]), str(err["message"])
            except (ValueError, KeyError, TypeError):
                code, message = "http_error", response.text[:200]
            raise _mapped(response.status_code, code, message)
        return response.json()


def _mapped(status: int, code: str, message: str) -> SidecarError:
    """HTTP errors back into the library's classes, so exit codes match local runs."""
    if status in (400, 422):
        return InvalidInput(message)
    if status == 404:
        return NotFound(message)
    if status == 409:
        return LockBusy(message)
    return RemoteError(status, code, message)
