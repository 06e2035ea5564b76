"""What a replica of a shared state settles before it serves: its tokens (configured, the
same on every replica, never made in its home), and, under ``SIDECAR_MIGRATE=never``,
the schema it waits for while it answers probes.  The two replicas behind one address
are ``test_replicas_behind_a_proxy.py``."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.app.home import migrate_schema
from sidecar.errors import ConfigError, InvalidInput, SchemaTooNew
from sidecar.settings import Settings
from sidecar.shells.api.schema_wait import wait_for_schema
from sidecar.shells.api.serve import bind, server_token
from sidecar.trust.principals import Principals

SHARED = "postgresql://app@127.0.0.1:1/sidecar"
"""A shared state's URL: nothing here connects to it."""
TOKEN = "replica-token-0123456789"
OPERATOR = "operator-token-0123456789"


def tokens_file(path: Path) -> Path:
    path.write_text(
        json.dumps({"tokens": [{"name": "ops", "role": "operator", "token": OPERATOR}]})
    )
    return path


def test_a_replica_takes_configured_tokens_and_makes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    shared = Settings(home=home, database_url=SHARED)
    monkeypatch.delenv("SIDECAR_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="one token set"):
        server_token(shared, "127.0.0.1")
    assert not home.exists()  # no token was made for this replica alone
    monkeypatch.setenv("SIDECAR_TOKEN", TOKEN)
    assert server_token(shared, "0.0.0.0") == TOKEN
    monkeypatch.delenv("SIDECAR_TOKEN")
    named = shared.with_(tokens_file=tokens_file(tmp_path / "tokens.json"))
    assert server_token(named, "0.0.0.0") is None  # the named tokens alone
    home.mkdir()
    (home / "token").write_text("a-token-of-this-home-only\n")
    with pytest.raises(ConfigError, match="is this replica's own and is not read"):
        server_token(shared, "127.0.0.1")
    monkeypatch.setenv("SIDECAR_TOKEN", TOKEN)
    assert server_token(shared, "127.0.0.1") == TOKEN  # the configured one, not the file's
    monkeypatch.delenv("SIDECAR_TOKEN")
    tokens_file(home / "tokens.json")
    with pytest.raises(ConfigError, match="SIDECAR_TOKENS_FILE"):
        server_token(shared, "127.0.0.1")


def test_one_machine_still_makes_its_token_and_may_serve_named_tokens_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIDECAR_TOKEN", raising=False)
    local = Settings(home=tmp_path / "home")
    made = server_token(local, "127.0.0.1")
    assert made and (tmp_path / "home" / "token").read_text().strip() == made
    other = Settings(home=tmp_path / "other")
    with pytest.raises(InvalidInput, match="without a token"):
        server_token(other, "0.0.0.0")
    named = other.with_(tokens_file=tokens_file(tmp_path / "tokens.json"))
    assert server_token(named, "0.0.0.0") is None
    assert not (tmp_path / "other" / "token").exists()


def test_a_replica_that_may_not_migrate_answers_probes_until_the_schema_is_there(
    tmp_path: Path,
) -> None:
    """No state yet: ``/livez`` 200, ``/readyz`` 503 (what is missing only with a token),
    any other route 503 ``schema_pending``; once the schema is there the wait ends, and
    the socket is still the server's, listening."""
    home = tmp_path / "home"
    settings = Settings(home=home, migrate="never")
    principals = Principals.load(None, TOKEN)
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    done = threading.Event()
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            wait_for_schema(sock, settings, principals, poll_s=0.05)
        except BaseException as exc:
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=wait, daemon=True).start()
    try:
        assert httpx.get(f"{url}/livez", timeout=10).json() == {"status": "ok"}
        probe = httpx.get(f"{url}/readyz", timeout=10)
        assert (probe.status_code, probe.json()) == (503, {"ready": False})
        auth = {"Authorization": f"Bearer {TOKEN}"}
        shown = httpx.get(f"{url}/readyz", headers=auth, timeout=10).json()
        assert shown["checks"]["schema"] == f"no state at {home / 'state.sqlite'}"
        other = httpx.post(f"{url}/v1/search", json={"query": "x"}, headers=auth, timeout=10)
        assert other.status_code == 503 and other.json()["error"]["code"] == "schema_pending"
        assert not done.is_set()
        with Sidecar.open(embedder=HashingEmbedder(), home=home):
            pass  # a home made by a process that may migrate: the schema is there
        assert done.wait(30) and not failed, failed
        sock.settimeout(0)
        with pytest.raises(BlockingIOError):
            sock.accept()  # listening still, nothing waiting: the responder has let go
    finally:
        sock.close()


def test_a_schema_newer_than_the_code_ends_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home):
        pass
    migrate_schema(Settings(home=home))
    import sidecar.storage.state as state

    monkeypatch.setattr(state, "MIGRATIONS", state.MIGRATIONS[:-1])
    monkeypatch.setattr("sidecar.app.home.MIGRATIONS", state.MIGRATIONS)
    with bind("127.0.0.1", 0) as sock, pytest.raises(SchemaTooNew):
        wait_for_schema(sock, Settings(home=home, migrate="never"), Principals(), poll_s=0.05)
