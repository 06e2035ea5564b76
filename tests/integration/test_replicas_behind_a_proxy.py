"""Two ``sidecar serve`` replicas behind one address, as a Kubernetes Service puts them:
one PostgreSQL state, one Chroma server, one Delta archive, one token file for both, and
a round-robin proxy in front that sends each connection to the next replica.

The replicas run as the shared overlay runs them: ``SIDECAR_MIGRATE=never``, so they
answer probes but leave the schema alone until ``sidecar migrate`` has run once; then a
client with one token (the operator's, from the shared token file: no replica made a
token of its own) adds tools, reports, checks and looks up through the proxy, and gets
the same answers whichever replica serves it, the very request after a write.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import sidecar
from benchmarks.cluster import Replica
from benchmarks.pgserver import PostgresServer, free_port
from tests.loopback import Listener
from tests.sidecar.helpers import abandoned
from tests.support.postgres import tables_in

pytestmark = pytest.mark.integration

SCRIPT = str(Path(sys.executable).with_name("sidecar"))
FATAL = ["web_search", "html_parser", "llm_extractor"]
CATALOG = Path(sidecar.__file__).parent / "demo" / "catalog.jsonl"
ASKS = 6
"""Requests of each kind through the proxy: every replica serves several."""


class RoundRobin(Listener):
    """A TCP proxy: each connection goes to the next backend in turn (bytes piped both
    ways, nothing parsed), and is counted by backend."""

    def __init__(self, backends: list[tuple[str, int]]) -> None:
        self.backends = backends
        self.served: Counter[int] = Counter()
        self._next = 0
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        index = self._next % len(self.backends)
        self._next += 1
        self.served[index] += 1
        threading.Thread(target=self._relay, args=(conn, self.backends[index]), daemon=True).start()

    @staticmethod
    def _relay(client: socket.socket, backend: tuple[str, int]) -> None:
        with client, socket.create_connection(backend) as upstream:
            back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
            back.start()
            _pipe(client, upstream)
            back.join()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@pytest.fixture
def replicas(
    tmp_path: Path, postgres_server: PostgresServer, chroma_server: tuple[str, int]
) -> Iterator[tuple[list[Replica], dict[str, str], str]]:
    """Two replicas on one fresh state, told not to migrate, not started on a migrated
    schema: ``(replicas, their environment, the operator's token)``."""
    token = secrets.token_urlsafe(24)
    token_file = tmp_path / "tokens.json"  # what the Secret holds, mounted as a file
    token_file.write_text(
        json.dumps({"tokens": [{"name": "ops", "role": "operator", "token": token}]})
    )
    host, port = chroma_server
    with postgres_server.schema() as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "AWS_"))}
        env.update(
            {
                "SIDECAR_DATABASE_URL": url,
                "SIDECAR_CHROMA_URL": f"http://{host}:{port}",
                "SIDECAR_COLLECTION": f"proxy-{uuid.uuid4().hex[:12]}",
                "SIDECAR_COLD_URL": f"delta+file://{tmp_path / 'cold'}",
                "SIDECAR_EMBEDDER": "hashing",
                "SIDECAR_MIGRATE": "never",
                "SIDECAR_TOKENS_FILE": str(token_file),
            }
        )
        started = [
            Replica(i, tmp_path / f"replica-{i}", tmp_path / f"replica-{i}.log") for i in (0, 1)
        ]
        try:
            for replica in started:
                replica.port = free_port()
                replica.launch({**env, "SIDECAR_HOME": str(replica.home)})
            yield started, env, token
        finally:
            for replica in started:
                replica.stop()


def until(predicate: Any, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def answers(url: str) -> int | None:
    """``/readyz``'s status, or ``None`` while nothing answers."""
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code
    except httpx.HTTPError:
        return None


def ask(proxy: RoundRobin, token: str, method: str, path: str, body: Any = None) -> Any:
    """One request through the proxy on a connection of its own (so the next request
    reaches the next replica), with the one token."""
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    response = httpx.request(method, f"{proxy.url}{path}", json=body, headers=headers, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_two_replicas_behind_one_address_are_one_service(
    replicas: tuple[list[Replica], dict[str, str], str],
) -> None:
    started, env, token = replicas
    # not migrated: alive, not ready, and the schema is still nobody's
    for replica in started:
        until(lambda r=replica: answers(r.url) == 503, f"replica {replica.index} answers")
        assert httpx.get(f"{replica.url}/livez", timeout=5).status_code == 200
    assert tables_in(env["SIDECAR_DATABASE_URL"]) == set()
    migrated = subprocess.run(
        [SCRIPT, "migrate"], capture_output=True, text=True, env=env, timeout=300
    )
    assert migrated.returncode == 0, migrated.stderr
    for replica in started:
        replica.wait_up(token)  # /readyz 200, with the shared token
        assert not (replica.home / "token").exists()  # no replica made a token of its own

    proxy = RoundRobin([("127.0.0.1", r.port) for r in started])
    try:
        tools = [json.loads(line) for line in CATALOG.read_text().splitlines() if line.strip()]
        added = ask(proxy, token, "POST", "/v1/tools", {"tools": tools})
        assert len(added["added"]) == len(tools)
        lookup = {"query": "extract prices from the page text", "k": 3, "after": FATAL[:2],
                  "context": {"payload_bytes": 7_200_000}}  # fmt: skip
        check = {"plan": FATAL, "context": {"payload_bytes": 7_200_000}}
        before = [ask(proxy, token, "POST", "/v1/check", check) for _ in range(ASKS)]
        assert all(c == before[0] for c in before) and before[0]["safe"] is True

        report = abandoned(FATAL, "timeout after 30s on 7.2 MB payload", rule="IF big THEN slow",
                           kind="deterministic", session_id="through-the-proxy")  # fmt: skip
        [result] = ask(proxy, token, "POST", "/v1/reports", {"reports": [report]})["results"]
        assert result["status"] == "archived", result

        # the very next requests, whichever replica serves them, know the report
        checks = [ask(proxy, token, "POST", "/v1/check", check) for _ in range(ASKS)]
        lookups = [ask(proxy, token, "POST", "/v1/search", lookup) for _ in range(ASKS)]
        assert all(c == checks[0] for c in checks), checks
        assert checks[0]["safe"] is False
        assert checks[0]["collisions"][0]["pointer"] == result["pointer"]
        assert all(found == lookups[0] for found in lookups), lookups
        assert "llm_extractor" not in [h["tool_id"] for h in lookups[0]["hits"]]
        assert [w["tool_id"] for w in lookups[0]["withheld"]] == ["llm_extractor"]
        audits = [
            ask(proxy, token, "GET", f"/v1/audit?pointer={result['pointer']}") for _ in range(ASKS)
        ]
        assert all(a == audits[0] for a in audits) and audits[0]["chain_id"] == result["chain_id"]
        # each kind of request reached both replicas, alternately
        assert proxy.served[0] == proxy.served[1] >= ASKS * 2
    finally:
        proxy.close()
    # and straight at each replica: the same answers as through the proxy
    for replica in started:
        direct = httpx.post(f"{replica.url}/v1/check", json=check, timeout=60,
                            headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        assert direct.json() == checks[0]
