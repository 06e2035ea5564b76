"""Revocation mandates: written by real evictions, revoked over real HTTP (RFC 7009).

The endpoint is a ``ThreadingHTTPServer`` on 127.0.0.1 with an OS-chosen port that
records every request and answers each path from its own scripted list of replies.
Time is an injected clock, so retry schedules are checked without sleeping.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import urllib.parse
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import Busy
from sidecar.eviction import EvictionReport
from sidecar.eviction.journal import mandate_key
from sidecar.eviction.revocation import (
    MAX_ATTEMPTS,
    Mandate,
    RecordOnlyRevoker,
    Rfc7009Revoker,
    env_resolver,
    make_revoker,
)
from sidecar.limits import MANDATE_STATUSES as STATUSES
from sidecar.model import CredentialRef
from tests.sidecar.helpers import abandoned

TOKEN_VAR = "TEST_TOKEN_X"
TOKEN_REF = f"env:{TOKEN_VAR}"
TOKEN = "2YotnFZFEjr1zCsicMWpAA"  # the access token of RFC 6749's examples
T0 = 1_900_000_000.0
SINK = "llm_extractor"
"""The terminal tool of every abandoned chain here: it stays active."""


# ---- the revocation endpoint ---------------------------------------------------------
@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    raw: bytes | None = None
    """Written verbatim instead of an HTTP response (a misbehaving endpoint)."""


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    form: dict[str, list[str]]


UNSCRIPTED = Reply(418, body=b"unscripted request")


class RevocationServer:
    """Records every request; answers each path from its scripted replies, in order."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self._replies: dict[str, deque[Reply]] = {}
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner._answer(self)

            do_GET = do_POST

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def endpoint(self, path: str = "/oauth2/revoke") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self._replies.setdefault(path, deque()).extend(replies)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length).decode("utf-8", "replace")
        seen = Seen(
            h.command,
            h.path,
            {k.lower(): v for k, v in h.headers.items()},
            urllib.parse.parse_qs(body, keep_blank_values=True),
        )
        with self._lock:
            self.requests.append(seen)
            queue = self._replies.get(h.path)
            reply = queue.popleft() if queue else UNSCRIPTED
        if reply.raw is not None:
            h.wfile.write(reply.raw)
            return
        h.send_response(reply.status)
        for name, value in reply.headers.items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(reply.body)))
        h.end_headers()
        h.wfile.write(reply.body)


@pytest.fixture
def server() -> Iterator[RevocationServer]:
    srv = RevocationServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def other_server() -> Iterator[RevocationServer]:
    """A second origin (another port on 127.0.0.1)."""
    srv = RevocationServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def closed_port() -> int:
    """A loopback port that was just opened and closed: nothing listens on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


# ---- sidecars and mandates made the real way -----------------------------------------
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SIDECAR_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(TOKEN_VAR, TOKEN)


@pytest.fixture
def sc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_url: str | None) -> Iterator[Sidecar]:
    _clean_env(monkeypatch)
    with Sidecar.open(
        embedder=HashingEmbedder(),
        home=tmp_path / "home",
        evict_min_chains=1,
        database_url=state_url,
    ) as sidecar:
        yield sidecar


def cred(
    ref: str = TOKEN_REF,
    endpoint: str | None = None,
    scopes: tuple[str, ...] = ("crm.read", "crm.write"),
    provider: str | None = "crm-auth",
) -> CredentialRef:
    return CredentialRef(ref, scopes, provider, endpoint)


def tool(tool_id: str, *creds: CredentialRef) -> Tool:
    return Tool(tool_id, f"{tool_id.replace('_', ' ')} tool", "api_client", credentials=creds)


def evict(sc: Sidecar, *tools: Tool, keep: tuple[Tool, ...] = ()) -> tuple[EvictionReport, str]:
    """Register ``tools`` (plus the sink and ``keep``), report ``tools + [sink]`` abandoned
    with a deterministic failure, and evict: ``tools`` are prefix-only tools."""
    sc.add_tools([*tools, tool(SINK), *keep])
    result = sc.report(abandoned([t.tool_id for t in tools] + [SINK], "HTTP 400"))
    assert result.status == "archived", result
    assert result.chain_id is not None
    report = sc.evict()
    assert sorted(d.tool_id for d in report.evicted) == sorted(t.tool_id for t in tools)
    return report, result.chain_id


def only(sc: Sidecar) -> Mandate:
    (mandate,) = sc.mandates()
    return mandate


def one_mandate(sc: Sidecar, endpoint: str | None, ref: str = TOKEN_REF) -> Mandate:
    evict(sc, tool("crm_export", cred(ref, endpoint)))
    return only(sc)


def revoker(
    client_auth: tuple[str, str] | None = None, token_type_hint: str = "access_token"
) -> Rfc7009Revoker:
    return Rfc7009Revoker(client_auth=client_auth, token_type_hint=token_type_hint, timeout=5.0)


def stored(home: Path) -> list[tuple[Path, bytes]]:
    """Every file under ``home`` as bytes, plus each Parquet file decoded to text (its
    pages are compressed, so a raw byte search could miss a value)."""
    out: list[tuple[Path, bytes]] = []
    for path in sorted(home.rglob("*")):
        if not path.is_file():
            continue
        out.append((path, path.read_bytes()))
        if path.suffix == ".parquet":
            rows = pq.read_table(path).to_pylist()
            out.append((path, json.dumps(rows, default=str).encode()))
    return out


def state_rows(sc: Sidecar) -> bytes:
    """Every row of every table of a PostgreSQL state, as text."""
    db = sc.state.database
    tables = [
        r[0]
        for r in db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    ]
    assert "mandates" in tables
    rows = {t: db.execute(f"SELECT * FROM {t}").fetchall() for t in tables}
    return json.dumps(rows, default=str).encode()


def assert_never_stored(sc: Sidecar, *secrets: str, visible: str = TOKEN_REF) -> None:
    for m in sc.mandates():
        text = json.dumps(m.to_dict())
        for secret in secrets:
            assert secret not in text, f"{secret!r} in the ledger: {text}"
    files = stored(sc.settings.home)
    names = {p.name for p, _ in files}
    if sc.settings.database_url is None:
        assert "state.sqlite" in names
    else:
        files.append((Path("postgresql"), state_rows(sc)))
    assert any(p.suffix == ".parquet" and "tools" in p.parts for p, _ in files)
    # the scan does see stored values: the (non-secret) ref is in the decoded cold record
    assert any(p.suffix == ".parquet" and visible.encode() in data for p, data in files)
    for path, data in files:
        for secret in secrets:
            assert secret.encode() not in data, f"{secret!r} stored in {path}"


# ---- mandate creation through evict -------------------------------------------------
def test_eviction_writes_one_pending_mandate_per_released_credential(
    sc: Sidecar, server: RevocationServer
) -> None:
    endpoint = server.endpoint()
    report, chain = evict(
        sc, tool("crm_export", cred(TOKEN_REF, endpoint), cred("vault://kv/crm", None, ("x",)))
    )
    assert report.mandates == 2
    move = report.pointers["crm_export"].removeprefix("cold://tools/")
    by_ref = {m.ref: m for m in sc.mandates()}
    assert set(by_ref) == {TOKEN_REF, "vault://kv/crm"}
    m = by_ref[TOKEN_REF]
    assert m.idempotency_key == mandate_key(move, TOKEN_REF)
    assert (m.tool_ids, m.move_id, m.chain_ids) == (("crm_export",), move, (chain,))
    assert (m.scopes, m.provider, m.revocation_endpoint) == (
        ("crm.read", "crm.write"),
        "crm-auth",
        endpoint,
    )
    assert (m.status, m.attempts, m.last_error, m.next_attempt_at) == ("pending", 0, None, None)
    assert "no longer used by any active tool" in m.reason
    assert by_ref["vault://kv/crm"].revocation_endpoint is None
    assert sc.state.credentials.of(["crm_export"]) == {"crm_export": []}
    assert server.requests == []


def test_ref_still_used_by_an_active_tool_gets_no_mandate(sc: Sidecar) -> None:
    shared = cred(TOKEN_REF)
    report, first_chain = evict(
        sc,
        tool("crm_export", shared, cred("env:CRM_EXPORT_ONLY")),
        keep=(tool("crm_reader", shared),),
    )
    assert report.mandates == 1
    assert [m.ref for m in sc.mandates()] == ["env:CRM_EXPORT_ONLY"]
    assert sc.state.credentials.of(["crm_reader"])["crm_reader"] == [shared]
    # once its last active holder is evicted too, the reference gets its mandate, which
    # names every evicted holder and the chains behind them
    later_chain = sc.report(abandoned(["crm_reader", SINK], "HTTP 400")).chain_id
    later = sc.evict()
    assert [d.tool_id for d in later.evicted] == ["crm_reader"]
    assert later.mandates == 1
    (m,) = [m for m in sc.mandates() if m.ref == TOKEN_REF]
    assert m.tool_ids == ("crm_export", "crm_reader")
    assert m.chain_ids == tuple(sorted([first_chain, later_chain]))
    assert m.move_id == later.pointers["crm_reader"].removeprefix("cold://tools/")


@pytest.mark.parametrize("batch_size", [500, 1], ids=["one-batch", "batch-per-tool"])
def test_ref_shared_by_two_evicted_tools_gets_one_mandate_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_size: int
) -> None:
    _clean_env(monkeypatch)
    home = tmp_path / "home"
    with Sidecar.open(
        embedder=HashingEmbedder(), home=home, evict_batch_size=batch_size, evict_min_chains=1
    ) as sidecar:
        report, chain = evict(
            sidecar, tool("crm_export", cred()), tool("crm_import", cred(), cred("env:OWN"))
        )
        assert report.mandates == 2
        (m,) = [m for m in sidecar.mandates() if m.ref == TOKEN_REF]
        assert m.tool_ids == ("crm_export", "crm_import")
        assert m.chain_ids == (chain,)
        moves = {p.removeprefix("cold://tools/") for p in report.pointers.values()}
        assert m.move_id in moves and len(moves) == 2
        assert m.idempotency_key == mandate_key(m.move_id, TOKEN_REF)
        assert sidecar.mandate_counts()["pending"] == 2


def test_rerunning_evict_creates_no_new_mandates(sc: Sidecar) -> None:
    evict(sc, tool("crm_export", cred(), cred("env:OTHER")), tool("crm_import", cred()))
    before = [m.to_dict() for m in sc.mandates()]
    assert len(before) == 2
    again = sc.evict()
    assert again.evicted == () and again.mandates == 0
    assert [m.to_dict() for m in sc.mandates()] == before
    assert sc.mandate_counts()["pending"] == 2


def test_counts_sum_up(
    sc: Sidecar, server: RevocationServer, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_TOKEN_BUSY", "busy-token-value-1")
    monkeypatch.delenv("TEST_TOKEN_UNSET", raising=False)
    server.script("/ok", Reply(200))
    server.script("/busy", Reply(503, {"Retry-After": "120"}))
    evict(
        sc,
        tool("crm_export", cred(TOKEN_REF, server.endpoint("/ok"))),
        tool("crm_import", cred("env:TEST_TOKEN_BUSY", server.endpoint("/busy"))),
        tool("mail_send", cred("env:MAIL_NO_ENDPOINT", None)),
        tool("mail_search", cred("env:TEST_TOKEN_UNSET", server.endpoint("/never"))),
    )
    counts = sc.mandate_counts()
    assert tuple(counts) == STATUSES
    assert counts == {
        "pending": 4,
        "submitted": 0,
        "revoked": 0,
        "failed": 0,
        "unsupported": 0,
        "cancelled": 0,
    }
    tally = sc.ledger.run(revoker(), now=clock)
    assert tally == {"revoked": 1, "submitted": 1, "unsupported": 1, "failed": 1}
    counts = sc.mandate_counts()
    assert counts == {"pending": 0, "cancelled": 0, **tally}
    assert sum(counts.values()) == len(sc.mandates()) == 4
    for status in STATUSES:
        assert len(sc.mandates(status)) == counts[status]
    assert sorted(r.path for r in server.requests) == ["/busy", "/ok"]


# ---- the RFC 7009 request -----------------------------------------------------------
def test_post_carries_token_and_hint_as_a_form(
    sc: Sidecar, server: RevocationServer, clock: Clock
) -> None:
    server.script("/oauth2/revoke", Reply(200))
    one_mandate(sc, server.endpoint())
    assert sc.ledger.run(revoker(), now=clock) == {"revoked": 1}
    (req,) = server.requests
    assert (req.method, req.path) == ("POST", "/oauth2/revoke")
    assert req.headers["content-type"] == "application/x-www-form-urlencoded"
    assert req.form == {"token": [TOKEN], "token_type_hint": ["access_token"]}
    assert "authorization" not in req.headers
    m = only(sc)
    assert (m.status, m.attempts, m.last_error, m.next_attempt_at) == (
        "revoked",
        1,
        "HTTP 200",
        None,
    )
    assert m.updated_at == clock.t


def test_client_auth_adds_http_basic_authorization(
    sc: Sidecar, server: RevocationServer, clock: Clock
) -> None:
    server.script("/oauth2/revoke", Reply(200))
    one_mandate(sc, server.endpoint())
    rv = revoker(client_auth=("sidecar-client", "client-pw:42"), token_type_hint="refresh_token")
    assert sc.ledger.run(rv, now=clock) == {"revoked": 1}
    (req,) = server.requests
    expected = base64.b64encode(b"sidecar-client:client-pw:42").decode()
    assert req.headers["authorization"] == f"Basic {expected}"
    assert req.form == {"token": [TOKEN], "token_type_hint": ["refresh_token"]}
    assert only(sc).status == "revoked"


def test_503_with_retry_after_defers_the_next_attempt(
    sc: Sidecar, server: RevocationServer, clock: Clock
) -> None:
    server.script("/oauth2/revoke", Reply(503, {"Retry-After": "120"}), Reply(200))
    one_mandate(sc, server.endpoint())
    assert sc.ledger.run(revoker(), now=clock) == {"submitted": 1}
    m = only(sc)
    assert (m.status, m.attempts) == ("submitted", 1)
    assert m.next_attempt_at == pytest.approx(T0 + 120)
    assert m.last_error is not None and "HTTP 503" in m.last_error
    assert sc.ledger.due(T0 + 119) == []

    clock.advance(119)
    assert sc.ledger.run(revoker(), now=clock) == {}
    assert len(server.requests) == 1
    assert only(sc).to_dict() == m.to_dict()

    clock.advance(1)
    assert sc.ledger.run(revoker(), now=clock) == {"revoked": 1}
    assert len(server.requests) == 2
    m = only(sc)
    assert (m.status, m.attempts, m.next_attempt_at) == ("revoked", 2, None)


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (Reply(500, body=b"upstream exploded"), "HTTP 500: upstream exploded"),
        (Reply(503), "HTTP 503"),
        (Reply(429, {"Retry-After": "30"}), "HTTP 429"),
    ],
    ids=["500", "503-no-header", "429"],
)
def test_server_errors_are_retried(
    sc: Sidecar, server: RevocationServer, clock: Clock, reply: Reply, needle: str
) -> None:
    server.script("/oauth2/revoke", reply)
    one_mandate(sc, server.endpoint())
    assert sc.ledger.run(revoker(), now=clock) == {"submitted": 1}
    m = only(sc)
    delay = float(reply.headers.get("Retry-After", 60))
    assert (m.status, m.attempts) == ("submitted", 1)
    assert m.next_attempt_at == pytest.approx(T0 + delay)
    assert m.last_error is not None and needle in m.last_error


def test_repeated_503_gives_up_after_max_attempts(
    sc: Sidecar, server: RevocationServer, clock: Clock
) -> None:
    server.script("/oauth2/revoke", *[Reply(503, {"Retry-After": "30"})] * MAX_ATTEMPTS)
    one_mandate(sc, server.endpoint())
    for attempt in range(1, MAX_ATTEMPTS):
        assert sc.ledger.run(revoker(), now=clock) == {"submitted": 1}
        m = only(sc)
        assert (m.status, m.attempts) == ("submitted", attempt)
        assert m.next_attempt_at == pytest.approx(clock.t + 30)
        clock.advance(30)
    assert sc.ledger.run(revoker(), now=clock) == {"failed": 1}
    m = only(sc)
    assert (m.status, m.attempts, m.next_attempt_at) == ("failed", MAX_ATTEMPTS, None)
    assert m.last_error is not None
    assert m.last_error.startswith("gave up") and "HTTP 503" in m.last_error
    assert len(server.requests) == MAX_ATTEMPTS
    clock.advance(3600)
    assert sc.ledger.run(revoker(), now=clock) == {}
    assert len(server.requests) == MAX_ATTEMPTS


def test_unsupported_token_type_is_final(
    sc: Sidecar, server: RevocationServer, clock: Clock
) -> None:
    body = b'{"error":"unsupported_token_type"}'
    server.script("/oauth2/revoke", Reply(400, {"Content-Type": "application/json"}, body))
    one_mandate(sc, server.endpoint())
    assert sc.ledger.run(revoker(), now=clock) == {"unsupported": 1}
    m = only(sc)
    assert (m.status, m.attempts, m.next_attempt_at) == ("unsupported", 1, None)
    assert m.last_error is not None and "unsupported_token_type" in m.last_error
    clock.advance(3600)
    assert sc.ledger.run(revoker(), now=clock) == {}
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b'{"error":"invalid_request"}'),
        (401, b'{"error":"invalid_client"}'),
        (403, b"forbidden"),
        (404, b"no such endpoint"),
    ],
)
def test_other_client_errors_fail(
    sc: Sidecar, server: RevocationServer, clock: Clock, status: int, body: bytes
) -> None:
    server.script("/oauth2/revoke", Reply(status, body=body))
    one_mandate(sc, server.endpoint())
    assert sc.ledger.run(revoker(), now=clock) == {"failed": 1}
    m = only(sc)
    assert (m.status, m.attempts, m.next_attempt_at) == ("failed", 1, None)
    assert m.last_error is not None and f"HTTP {status}" in m.last_error
    assert body.decode() in m.last_error
    clock.advance(3600)
    assert sc.ledger.run(revoker(), now=clock) == {}
    assert len(server.requests) == 1


def test_credential_without_endpoint_is_unsupported_and_not_sent(
    sc: Sidecar, server: RevocationServer, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHER_TOKEN", "other-token-value")
    server.script("/live", Reply(200))
    evict(
        sc,
        tool("crm_export", cred(TOKEN_REF, None)),
        tool("crm_import", cred("env:OTHER_TOKEN", server.endpoint("/live"))),
    )
    # the server is live (the other mandate reaches it); this one sends nothing
    assert sc.ledger.run(revoker(), now=clock) == {"unsupported": 1, "revoked": 1}
    (req,) = server.requests
    assert req.form["token"] == ["other-token-value"]
    (m,) = [m for m in sc.mandates() if m.ref == TOKEN_REF]
    assert (m.status, m.attempts) == ("unsupported", 1)
    assert m.last_error is not None and "revocation_endpoint" in m.last_error


@pytest.mark.parametrize("ref", ["env:TEST_TOKEN_UNSET", "env:TEST_TOKEN_EMPTY", "vault://kv/crm"])
def test_unresolvable_ref_fails_without_a_request(
    sc: Sidecar,
    server: RevocationServer,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    ref: str,
) -> None:
    monkeypatch.delenv("TEST_TOKEN_UNSET", raising=False)
    monkeypatch.setenv("TEST_TOKEN_EMPTY", "")
    assert env_resolver(ref) is None
    one_mandate(sc, server.endpoint(), ref=ref)
    assert sc.ledger.run(revoker(), now=clock) == {"failed": 1}
    m = only(sc)
    assert (m.status, m.attempts) == ("failed", 1)
    assert m.last_error == f"cannot resolve {ref!r} to a token"
    assert server.requests == []


def test_unreachable_endpoint_stays_submitted(sc: Sidecar, clock: Clock, closed_port: int) -> None:
    one_mandate(sc, f"http://127.0.0.1:{closed_port}/oauth2/revoke")
    assert sc.ledger.run(revoker(), now=clock) == {"submitted": 1}
    m = only(sc)
    assert (m.status, m.attempts) == ("submitted", 1)
    assert m.next_attempt_at == pytest.approx(T0 + 60)
    assert m.last_error is not None and m.last_error.startswith("endpoint unreachable")
    clock.advance(59)
    assert sc.ledger.run(revoker(), now=clock) == {}
    clock.advance(1)
    assert sc.ledger.run(revoker(), now=clock) == {"submitted": 1}
    assert (only(sc).status, only(sc).attempts) == ("submitted", 2)


def test_record_only_is_the_default_and_sends_nothing(
    sc: Sidecar, server: RevocationServer
) -> None:
    one_mandate(sc, server.endpoint())
    assert sc.settings.revoker == "record-only"
    assert isinstance(make_revoker(sc.settings.revoker), RecordOnlyRevoker)
    assert sc.run_revocations().results == {"pending": 1}
    assert sc.run_revocations().results == {"pending": 1}
    m = only(sc)
    assert (m.status, m.attempts, m.last_error, m.next_attempt_at) == ("pending", 0, None, None)
    assert server.requests == []
    assert RecordOnlyRevoker().revoke(m) is None


def test_make_revoker_names() -> None:
    assert isinstance(make_revoker("rfc7009"), Rfc7009Revoker)
    with pytest.raises(ValueError, match="unknown revoker"):
        make_revoker("smtp")


def test_configured_rfc7009_revoker_runs_from_the_sidecar(
    tmp_path: Path, server: RevocationServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clean_env(monkeypatch)
    server.script("/oauth2/revoke", Reply(200))
    home = tmp_path / "home"
    with Sidecar.open(
        embedder=HashingEmbedder(), home=home, revoker="rfc7009", evict_min_chains=1
    ) as sidecar:
        one_mandate(sidecar, server.endpoint())
        assert sidecar.run_revocations().results == {"revoked": 1}
        assert only(sidecar).status == "revoked"
    assert [r.form["token"] for r in server.requests] == [[TOKEN]]


def test_second_run_after_revoked_sends_nothing(
    sc: Sidecar, server: RevocationServer, clock: Clock
) -> None:
    server.script("/oauth2/revoke", Reply(200), Reply(200))
    one_mandate(sc, server.endpoint())
    assert sc.ledger.run(revoker(), now=clock) == {"revoked": 1}
    done = only(sc).to_dict()
    for _ in range(2):
        clock.advance(3600)
        assert sc.ledger.run(revoker(), now=clock) == {}
        assert sc.ledger.due(clock.t) == []
    assert len(server.requests) == 1
    assert only(sc).to_dict() == done


# ---- secrets ------------------------------------------------------------------------
def test_token_values_are_never_stored(
    sc: Sidecar, server: RevocationServer, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = {
        "TEST_TOKEN_X": TOKEN,
        "TEST_TOKEN_B": "8xLOxBtZp8-refresh-bbbb",
        "TEST_TOKEN_C": "opaque.cccc.9d2f0e71",
        "TEST_TOKEN_D": "dddd-4b1e2a7c-busy",
    }
    for name, value in tokens.items():
        monkeypatch.setenv(name, value)
    server.script("/ok", Reply(200))
    server.script("/unsupported", Reply(400, body=b'{"error":"unsupported_token_type"}'))
    server.script("/denied", Reply(401, body=b'{"error":"invalid_client"}'))
    server.script("/busy", Reply(503, {"Retry-After": "120"}), Reply(200))
    evict(
        sc,
        tool("crm_export", cred("env:TEST_TOKEN_X", server.endpoint("/ok"))),
        tool("crm_import", cred("env:TEST_TOKEN_B", server.endpoint("/unsupported"))),
        tool("mail_send", cred("env:TEST_TOKEN_C", server.endpoint("/denied"))),
        tool("mail_search", cred("env:TEST_TOKEN_D", server.endpoint("/busy"))),
    )
    client_secret = "client-secret-5f3a9e"
    rv = revoker(client_auth=("sidecar", client_secret))
    assert sc.ledger.run(rv, now=clock) == {
        "revoked": 1,
        "unsupported": 1,
        "failed": 1,
        "submitted": 1,
    }
    clock.advance(120)
    assert sc.ledger.run(rv, now=clock) == {"revoked": 1}
    # every token did go out, each to its own endpoint
    sent = sorted((r.path, r.form["token"][0]) for r in server.requests)
    assert sent == sorted(
        [
            ("/ok", TOKEN),
            ("/unsupported", tokens["TEST_TOKEN_B"]),
            ("/denied", tokens["TEST_TOKEN_C"]),
            ("/busy", tokens["TEST_TOKEN_D"]),
            ("/busy", tokens["TEST_TOKEN_D"]),
        ]
    )
    basic = base64.b64encode(f"sidecar:{client_secret}".encode()).decode()
    assert_never_stored(sc, *tokens.values(), client_secret, basic)


def test_token_echoed_by_the_endpoint_is_not_stored(
    sc: Sidecar, server: RevocationServer, clock: Clock
) -> None:
    """An error body that quotes the token (RFC 6749 ``error_description`` is free text)
    must not carry the token into ``last_error``: the revoker knows the exact value."""
    body = json.dumps(
        {"error": "invalid_request", "error_description": f"{TOKEN} was not issued to you"}
    ).encode()
    server.script("/oauth2/revoke", Reply(400, {"Content-Type": "application/json"}, body))
    one_mandate(sc, server.endpoint())
    assert sc.ledger.run(revoker(), now=clock) == {"failed": 1}
    m = only(sc)
    assert m.last_error is not None and "HTTP 400" in m.last_error
    assert TOKEN not in m.last_error, m.last_error
    assert_never_stored(sc, TOKEN)


# ---- what must not count as a revocation ---------------------------------------------
def test_redirect_is_not_taken_for_a_revocation(
    sc: Sidecar, server: RevocationServer, other_server: RevocationServer, clock: Clock
) -> None:
    """A 302 (say, to a sign-in page) revokes nothing: urllib turns the POST into a GET
    of the new location, and its 200 must not mark the credential revoked."""
    server.script("/oauth2/revoke", Reply(302, {"Location": other_server.endpoint("/login")}))
    other_server.script("/login", Reply(200, body=b"<html>sign in</html>"))
    one_mandate(sc, server.endpoint())
    sc.ledger.run(revoker(), now=clock)
    m = only(sc)
    assert m.status != "revoked", (m.status, m.last_error, other_server.requests)
    assert len(server.requests) == 1


def test_client_credentials_do_not_follow_a_redirect_to_another_origin(
    sc: Sidecar, server: RevocationServer, other_server: RevocationServer, clock: Clock
) -> None:
    server.script("/oauth2/revoke", Reply(302, {"Location": other_server.endpoint("/collect")}))
    other_server.script("/collect", Reply(200))
    one_mandate(sc, server.endpoint())
    sc.ledger.run(revoker(client_auth=("sidecar-client", "client-pw")), now=clock)
    (first,) = server.requests
    assert first.headers["authorization"].startswith("Basic ")
    leaked = [r for r in other_server.requests if "authorization" in r.headers]
    assert leaked == [], f"client credentials sent to {other_server.endpoint('/collect')}"


def test_a_malformed_response_does_not_abort_the_run(
    sc: Sidecar, server: RevocationServer, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint that answers with something other than HTTP fails (or is retried)
    alone: the other due mandates are still revoked."""
    monkeypatch.setenv("OTHER_TOKEN", "other-token-value")
    server.script("/garbage", Reply(raw=b"NOT-HTTP garbage\r\n\r\n"))
    server.script("/ok", Reply(200))
    evict(
        sc,
        tool("crm_export", cred(TOKEN_REF, server.endpoint("/garbage"))),
        tool("crm_import", cred("env:OTHER_TOKEN", server.endpoint("/ok"))),
    )
    tally = sc.ledger.run(revoker(), now=clock)
    by_ref = {m.ref: m for m in sc.mandates()}
    assert by_ref["env:OTHER_TOKEN"].status == "revoked"
    assert by_ref[TOKEN_REF].status in ("submitted", "failed")
    assert sum(tally.values()) == 2


def test_restored_tool_keeps_its_credential(
    sc: Sidecar, server: RevocationServer, clock: Clock
) -> None:
    """A mandate is for a credential that left the active set; once its tool is restored
    (its reference is active again) a run must not revoke it."""
    server.script("/oauth2/revoke", Reply(200))
    one_mandate(sc, server.endpoint())
    sc.restore("crm_export", reason="upstream fixed the 400")
    assert sc.state.credentials.of(["crm_export"])["crm_export"] == [
        cred(TOKEN_REF, server.endpoint())
    ]
    sc.ledger.run(revoker(), now=clock)
    assert server.requests == [], "revoked the credential of a restored, active tool"
    assert only(sc).status == "cancelled"
    assert only(sc).last_error == "cancelled: crm_export restored"


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://169.254.169.254/latest/meta-data/iam",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://[fe80::1]/revoke",
        "http://internal.example/revoke",  # resolves to a link-local address
    ],
)
def test_a_link_local_or_metadata_endpoint_is_refused_unless_allowed(
    sc: Sidecar, server: RevocationServer, clock: Clock, endpoint: str
) -> None:
    one_mandate(sc, endpoint)

    def lookup(host: str) -> list[str]:
        return ["169.254.10.10"] if host == "internal.example" else []

    sent: list[str] = []
    refusing = Rfc7009Revoker(resolve=lambda ref: TOKEN, lookup=lookup)
    refusing._post = lambda request: sent.append(request.full_url)  # type: ignore[assignment,method-assign,return-value]
    assert sc.ledger.run(refusing, now=clock) == {"failed": 1}
    assert sent == []
    assert "refused" in (only(sc).last_error or "")
    assert "SIDECAR_REVOCATION_ALLOW_LINK_LOCAL" in (only(sc).last_error or "")


def test_an_allowed_link_local_endpoint_is_called() -> None:
    from sidecar.eviction.revocation import forbidden_target

    assert forbidden_target("https://auth.example.com/revoke", lambda h: ["93.184.216.34"]) is None
    assert forbidden_target("http://169.254.169.254/", lambda h: []) is not None
    allowing = Rfc7009Revoker(resolve=lambda ref: None, allow_link_local=True)
    mandate_like = type("M", (), {"revocation_endpoint": "http://169.254.169.254/", "ref": "x"})()
    # past the address check, it fails only for the missing token
    outcome = allowing.revoke(mandate_like)  # type: ignore[arg-type]
    assert outcome.status == "failed" and "cannot resolve" in outcome.detail


def test_one_revocation_run_at_a_time(sc: Sidecar, server: RevocationServer) -> None:
    server.script("/oauth2/revoke", Reply(200))
    one_mandate(sc, server.endpoint())
    with sc.state.lock("revoke", "revocation run"):
        with pytest.raises(Busy, match="another revocation run is running"):
            sc.run_revocations(revoker())
        assert only(sc).status == "pending"  # nothing was submitted
    assert sc.run_revocations(revoker()).results == {"revoked": 1}
