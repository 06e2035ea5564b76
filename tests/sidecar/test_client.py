"""RemoteSidecar's reading of ``/readyz``: a server that is not ready answers 503 with
its checks (a Health), but one whose state database cannot be read at all (a replica
whose PostgreSQL went away) answers the error envelope, which must come back as that
error, not as a TypeError from building a Health out of it."""

from __future__ import annotations

import httpx
import pytest

from sidecar.errors import StateUnavailable
from sidecar.shells.client import RemoteSidecar


def remote(status: int, body: object) -> RemoteSidecar:
    sc = RemoteSidecar("http://sidecar.test", "t")
    sc._http = httpx.Client(
        base_url=sc.url,
        transport=httpx.MockTransport(lambda _request: httpx.Response(status, json=body)),
    )
    return sc


def test_a_server_not_ready_gives_its_checks() -> None:
    with remote(503, {"ready": False, "checks": {"hot_index": "missing 2 tools"}}) as sc:
        health = sc.health()
    assert not health.ready


def test_a_server_that_cannot_read_its_state_gives_the_error() -> None:
    envelope = {"error": {"code": "state_unavailable", "message": "cannot reach the state"}}
    with remote(503, envelope) as sc, pytest.raises(StateUnavailable, match="cannot reach"):
        sc.health()
