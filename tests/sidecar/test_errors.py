"""One error tree, one table: every class is mapped, and the HTTP envelope, the CLI's exit
code, the MCP tool error and the client's reverse mapping agree for each."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar import errors as E
from sidecar.errors import SidecarError, error_table, from_code
from sidecar.shells.api import create_app
from sidecar.shells.cli import main
from tests.support.docs import documentation

DOCUMENTED_EXITS = {1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
CLASSES = sorted(error_table().values(), key=lambda c: c.code)
TOKEN = "errors-token-0123456789"


def instance(cls: type[SidecarError]) -> SidecarError:
    """An instance with a plain message (as a client rebuilds one from its code)."""
    err = from_code(cls.code, "something went wrong", cls.status)
    assert type(err) is cls
    return err


def test_every_class_declares_a_code_a_status_and_an_exit_code() -> None:
    codes = [c.code for c in CLASSES]
    assert len(codes) == len(set(codes))
    for cls in CLASSES:
        assert cls.code.isidentifier() and cls.code.islower(), cls
        assert 400 <= cls.status <= 599, cls
        assert cls.exit_code in DOCUMENTED_EXITS, cls
    # the store errors wrapped at the library boundary are all here
    for name in ("IndexUnavailable", "ColdStoreUnavailable", "StateUnavailable", "Degraded"):
        assert issubclass(getattr(E, name), E.StorageError)
    assert E.Busy.exit_code == 6 and E.UsageError.exit_code == 2
    assert E.Unreachable.exit_code == E.Unauthorized.exit_code == 9
    # a body over the server's limit is its own failure, not "unreachable or wrong token"
    assert E.BodyTooLarge.exit_code == 10 and not issubclass(E.BodyTooLarge, E.RemoteError)
    assert from_code("body_too_large", "request body over 10 bytes", 413).exit_code == 10
    assert issubclass(E.UpstreamSpecError, E.InvalidInput) and E.UpstreamSpecError.exit_code == 2
    # a gateway that cannot serve has its own code, never 3 ("blocked")
    assert E.GatewayUnavailable.exit_code == E.UpstreamUnavailable.exit_code == 11


@pytest.fixture
def sc(tmp_path: Path) -> Iterator[Sidecar]:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as s:
        yield s


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.code)
def test_the_four_surfaces_agree(
    cls: type[SidecarError], sc: Sidecar, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    err = instance(cls)

    def fail(*_a: Any, **_k: Any) -> Any:
        raise err

    monkeypatch.setattr(sc, "status", fail)
    monkeypatch.setattr(sc, "audit", fail)
    # HTTP: the envelope carries the class's status and code
    with TestClient(create_app(sc, TOKEN), base_url="http://127.0.0.1") as client:
        response = client.get("/v1/archive/status", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == cls.status
    assert response.json() == {"error": {"code": cls.code, "message": str(err)}}
    # the client reads it back into the same class
    back = from_code(cls.code, str(err), cls.status)
    assert type(back) is cls and str(back) == str(err)

    # the CLI: its exit code, and the same code in --json
    @contextlib.contextmanager
    def backend(*_a: Any, **_k: Any) -> Iterator[Sidecar]:
        yield sc

    monkeypatch.setattr("sidecar.shells.cli.commands.backend", backend)
    assert main(["archive", "status", "--json"]) == cls.exit_code
    assert f'"code": "{cls.code}"' in capsys.readouterr().err
    # MCP: a tool error that starts with the code
    from mcp.server.mcpserver.exceptions import ToolError

    from sidecar.shells.mcp_server import build_mcp

    server = build_mcp(sc)
    with pytest.raises(ToolError) as raised:
        asyncio.run(server.call_tool("audit_chain", {"pointer": "cold://chains/x"}))
    assert f"audit_chain: {cls.code}: {err}" in str(raised.value)


def test_an_unknown_code_from_a_newer_server_is_a_remote_error() -> None:
    err = from_code("brand_new_code", "what happened", 503)
    assert isinstance(err, E.RemoteError) and "brand_new_code" in str(err)
    assert isinstance(from_code("invalid_request", "k: too big", 422), E.InvalidInput)


def test_the_docs_list_every_exit_code() -> None:
    """The docs' exit-code list names each code an error class declares."""
    import re

    readme = documentation()
    listed = readme[readme.index("Exit codes: 0 ok;") :].split("\n\n")[0]
    named = {int(n) for n in re.findall(r"(?:^|[;:] ?|\n)(\d+) ", listed)}
    assert {cls.exit_code for cls in CLASSES} | {0, 3, 4} <= named, listed


def test_exit_codes_are_distinct_but_for_the_one_documented_alias() -> None:
    """Each outcome has its own exit code, but for one pair: a warned call shares 4 with a
    report that rejected a line (no command can end both ways), and the README says so.
    No error class exits 4 either, so a script reading 4 from ``check`` knows it warned."""
    codes = {name: value for name, value in vars(E).items() if name.startswith("EXIT_")}
    values = list(codes.values())
    shared = {name for name, value in codes.items() if values.count(value) > 1}
    assert shared == {"EXIT_REJECTED", "EXIT_WARNED"}, codes
    assert E.EXIT_WARNED == E.EXIT_REJECTED == 4
    assert E.EXIT_WARNED not in {cls.exit_code for cls in CLASSES}
    readme = documentation()
    listed = " ".join(readme[readme.index("Exit codes: 0 ok;") :].split("\n\n")[0].split())
    assert "; 4 `report` rejected a line, or `check` of a call warned;" in listed
