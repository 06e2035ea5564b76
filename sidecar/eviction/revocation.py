"""Revocation mandates for credentials that evicted tools leave dormant.

The ledger lives in the state (:class:`~sidecar.storage.mandates.MandateRepository`).  A
mandate goes
``pending -> submitted -> revoked | failed | unsupported``; a revoker that is told to
retry later (HTTP 503 with ``Retry-After``) leaves it ``submitted`` with a
``next_attempt_at``, and the next run tries again.  Restoring the tool before the
credential is revoked ``cancelled`` its open mandates: the credential is in use again.

Revokers are pluggable:

- :class:`RecordOnlyRevoker` (the default) submits nothing: mandates stay ``pending``
  for an operator to act on;
- :class:`Rfc7009Revoker` POSTs ``token`` and ``token_type_hint`` to the credential's
  ``revocation_endpoint`` (RFC 7009).  The sidecar never stores secret values, so the
  token is looked up at revocation time by a resolver (by default ``env:NAME`` reads
  the environment variable ``NAME``).
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from sidecar.storage.mandates import Mandate as Mandate
from sidecar.storage.state import State
from sidecar.trust.redact import MASK, redact_text

MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class Outcome:
    status: Literal["revoked", "failed", "unsupported", "retry"]
    detail: str
    retry_after: float | None = None


class Revoker(Protocol):
    name: str

    def revoke(self, mandate: Mandate) -> Outcome | None:
        """The outcome of one attempt; ``None`` means "not submitted" (stays pending)."""
        ...


class RecordOnlyRevoker:
    name = "record-only"

    def revoke(self, mandate: Mandate) -> Outcome | None:
        return None


def env_resolver(ref: str) -> str | None:
    """``env:NAME`` -> the value of ``$NAME``; other schemes cannot be resolved here."""
    if ref.startswith("env:"):
        return os.environ.get(ref[4:]) or None
    return None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A revocation is never re-sent elsewhere: following a redirect would turn the POST
    into a GET (a false "revoked") and could hand client credentials to another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Rfc7009Revoker:
    """OAuth 2.0 token revocation (RFC 7009) over HTTP."""

    name = "rfc7009"

    def __init__(
        self,
        resolve: Callable[[str], str | None] = env_resolver,
        client_auth: tuple[str, str] | None = None,
        token_type_hint: str = "access_token",
        timeout: float = 10.0,
        allow_link_local: bool = False,
        lookup: Callable[[str], list[str]] | None = None,
    ) -> None:
        """``allow_link_local``: send to link-local and cloud-metadata addresses too (off:
        a tool definition must not turn the revoker into a request to the metadata
        service); ``lookup``: host -> addresses (DNS by default)."""
        self._resolve = resolve
        self._client_auth = client_auth
        self._hint = token_type_hint
        self._timeout = timeout
        self._allow_link_local = allow_link_local
        self._lookup = lookup or _addresses
        self._opener = urllib.request.build_opener(_NoRedirects())

    def revoke(self, mandate: Mandate) -> Outcome:
        endpoint = mandate.revocation_endpoint
        if not endpoint:
            return Outcome("unsupported", "the credential declares no revocation_endpoint")
        if not self._allow_link_local:
            refused = forbidden_target(endpoint, self._lookup)
            if refused:
                return Outcome(
                    "failed",
                    f"refused: {refused} (set SIDECAR_REVOCATION_ALLOW_LINK_LOCAL=true to allow)",
                )
        token = self._resolve(mandate.ref)
        if not token:
            return Outcome("failed", f"cannot resolve {mandate.ref!r} to a token")
        body = urllib.parse.urlencode({"token": token, "token_type_hint": self._hint}).encode()
        request = urllib.request.Request(endpoint, data=body, method="POST")
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        if self._client_auth:
            pair = f"{self._client_auth[0]}:{self._client_auth[1]}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode())
        outcome = self._post(request)
        # the endpoint may quote the token back; it must not reach the ledger
        return replace(outcome, detail=outcome.detail.replace(token, MASK))

    def _post(self, request: urllib.request.Request) -> Outcome:
        try:
            with self._opener.open(request, timeout=self._timeout) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            with exc:
                return _http_outcome(exc.code, exc.headers.get("Retry-After"), exc.read(512))
        except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as exc:
            return Outcome("retry", f"endpoint unreachable: {redact_text(str(exc))}", 60.0)
        if status == 200:
            return Outcome("revoked", "HTTP 200")
        return _http_outcome(status, None, b"")


def _http_outcome(status: int, retry_after: str | None, body: bytes) -> Outcome:
    text = redact_text(body.decode("utf-8", "replace"))[:200]
    if status == 503 or status == 429:
        delay = 60.0
        if retry_after and retry_after.strip().isdigit():
            delay = float(retry_after.strip())
        return Outcome("retry", f"HTTP {status}, retry after {delay:.0f}s", delay)
    if 300 <= status < 400:
        return Outcome("failed", f"HTTP {status}: the endpoint redirects; not followed")
    if status == 400 and "unsupported_token_type" in text:
        return Outcome("unsupported", f"HTTP 400 unsupported_token_type: {text}")
    if status >= 500:
        return Outcome("retry", f"HTTP {status}: {text}", 60.0)
    return Outcome("failed", f"HTTP {status}: {text}")


class Ledger:
    def __init__(self, state: State) -> None:
        self._state = state
        self._repo = state.mandates

    def mandates(self, status: str | None = None) -> list[Mandate]:
        return self._repo.mandates(status)

    def counts(self) -> dict[str, int]:
        return self._repo.counts()

    def due(self, now: float) -> list[Mandate]:
        return self._repo.due(now)

    def run(self, revoker: Revoker, now: Callable[[], float] = time.time) -> dict[str, int]:
        """One attempt for every mandate that is due; returns counts by resulting status.
        One run at a time across every process on the state (a second one is
        :class:`~sidecar.errors.Busy`): two would submit the same mandate twice."""
        with self._state.lock("revoke", "revocation run"):
            return self._run(revoker, now)

    def _run(self, revoker: Revoker, now: Callable[[], float]) -> dict[str, int]:
        tally: dict[str, int] = {}
        for mandate in self.due(now()):
            if isinstance(revoker, RecordOnlyRevoker):
                tally["pending"] = tally.get("pending", 0) + 1
                continue
            with self._state.tx() as tx:
                self._repo.submit(tx, mandate.idempotency_key, now())
            try:
                outcome = revoker.revoke(mandate)
            except Exception as exc:  # a faulty revoker must not stop the other mandates
                outcome = Outcome("retry", f"revoker error: {type(exc).__name__}", 60.0)
            status, detail, next_at = _settled(outcome, mandate.attempts + 1, now)
            with self._state.tx() as tx:
                self._repo.settle(tx, mandate.idempotency_key, status, detail, next_at, now())
            tally[status] = tally.get(status, 0) + 1
        return tally


def _settled(
    outcome: Outcome | None, attempts: int, now: Callable[[], float]
) -> tuple[str, str | None, float | None]:
    """A mandate's status, detail and next attempt after one try."""
    if outcome is None:
        return "pending", None, None
    if outcome.status != "retry":
        return outcome.status, outcome.detail, None
    if attempts >= MAX_ATTEMPTS:
        return "failed", f"gave up: {outcome.detail}", None
    delay = 60.0 if outcome.retry_after is None else outcome.retry_after
    return "submitted", outcome.detail, now() + delay


METADATA_HOSTS = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "metadata.azure.com"}
)


def _addresses(host: str) -> list[str]:
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)})
    except OSError:
        return []


def forbidden_target(url: str, lookup: Callable[[str], list[str]] = _addresses) -> str | None:
    """Why ``url`` must not be sent a revocation (a link-local or cloud-metadata
    address, by name or by what the name resolves to), else ``None``."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower().rstrip(".")
    if host in METADATA_HOSTS:
        return f"{host} is a cloud metadata service"
    for address in [host, *lookup(host)]:
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            continue
        if ip.is_link_local or (
            ip.version == 6 and ip.ipv4_mapped and ip.ipv4_mapped.is_link_local
        ):
            return f"{host} is a link-local address ({ip})"
    return None


def make_revoker(name: str, allow_link_local: bool = False) -> Revoker:
    if name == "record-only":
        return RecordOnlyRevoker()
    if name == "rfc7009":
        return Rfc7009Revoker(allow_link_local=allow_link_local)
    raise ValueError(f"unknown revoker {name!r}")
