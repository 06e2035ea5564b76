"""Every surface against the declaration of the operations
(:mod:`sidecar.shells.operations`): a route, a CLI command, an MCP tool or a client
method that is not declared fails here, and so does a declared one that is missing,
or a route that lets in a role it should refuse (or refuses the role it should let in),
or a client method, a CLI command or an MCP tool that calls another route or library
method than its operation declares.

The client's signatures are held to the library's by ``tests/sidecar/test_surface.py``
(over the declared client operations), the docs' table by ``tests/test_docs.py``, and
the MCP tool ``forget_source``'s refusal of an agent over HTTP by
``tests/integration/test_trust_live.py``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import RemoteSidecar, Sidecar, Tool
from sidecar.interface import SidecarAPI
from sidecar.shells import operations as ops
from sidecar.shells.api import create_app
from sidecar.shells.operations import OPERATIONS
from sidecar.shells.surfaces import Http, Operation
from tests.support.tokens import OPERATOR, TOKENS, tokens_file

AGENT = TOKENS["alice"]


def _app_routes() -> dict[tuple[str, str], Any]:
    """Every route of the HTTP app (``(method, path)``; a mounted folder as ``GET``),
    read from an app over a stand-in for the library (building the routes opens
    nothing)."""
    app = create_app(cast(Sidecar, object()), None, with_mcp=False)
    found: dict[tuple[str, str], Any] = {}
    routes = list(app.api.routes)  # type: ignore[attr-defined]
    while routes:
        r = routes.pop(0)
        included = getattr(r, "original_router", None)  # a router included (no prefix)
        if included is not None:
            routes += included.routes
        elif isinstance(r, Mount):
            found[("GET", r.path)] = r
        elif isinstance(r, Route | APIRoute):
            for method in sorted((r.methods or set()) - {"HEAD"}):
                found[(method, r.path)] = r
    return found


def _declared_routes() -> dict[tuple[str, str], Http]:
    return {(op.http.method, op.http.path): op.http for op in OPERATIONS if op.http}


def test_every_route_is_declared_and_every_declared_route_exists() -> None:
    """The MCP transport is served by the gate beside the app's routes (its path is the
    declared one: ``gate.MCP_PATH``)."""
    from sidecar.shells.api import gate

    routes = _app_routes()
    declared = _declared_routes()
    del declared[("POST", gate.MCP_PATH)]
    assert sorted(set(routes) - set(declared)) == [], "routes no operation declares"
    assert sorted(set(declared) - set(routes)) == [], "declared routes the app lacks"
    # a folder of files is declared as one, and served as a mount
    for key, http in declared.items():
        assert http.prefix == isinstance(routes[key], Mount), key


def test_each_routes_summary_is_its_operations() -> None:
    """The OpenAPI summary of a route is what its operations declare (the one the
    route serves, or both of ``POST /v1/check``)."""
    for (method, path), r in _app_routes().items():
        if isinstance(r, APIRoute) and r.include_in_schema:
            served = [op for op in ops.on_route(method, path) if op.summary in (r.summary or "")]
            assert served and r.summary == ops.joined(served), (method, path)


def test_the_openapi_document_names_each_routes_declared_role() -> None:
    """``x-role`` and the description's last sentence; the OTLP intake's route is made
    beside its assembler (``sidecar/agents/otlp/``), not from the declaration: its role
    is held by the calls below."""
    from sidecar.shells.api.deps import ROLE_NOTES

    app = create_app(cast(Sidecar, object()), None, with_mcp=False)
    schema = app.api.openapi()  # type: ignore[attr-defined]
    unmarked = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            role = ops.strictest(ops.on_route(method.upper(), path))
            if "x-role" not in operation:
                unmarked.append(f"{method.upper()} {path}")
                continue
            assert operation["x-role"] == role, (method, path)
            assert operation["description"].endswith(ROLE_NOTES[role]), (method, path)
    assert unmarked == ["POST /v1/traces"]


def test_the_operations_of_one_surface_agree_on_the_role() -> None:
    """A route, a command or a tool that serves two operations asks one role."""
    surfaces: dict[Any, set[str]] = {}
    for op in OPERATIONS:
        for surface in (op.http and ("http", op.http.method, op.http.path), op.cli, op.mcp):
            if surface:
                surfaces.setdefault(surface, set()).add(op.access)
    assert {s: roles for s, roles in surfaces.items() if len(roles) > 1} == {}


def test_each_declaration_names_what_exists() -> None:
    names = [op.name for op in OPERATIONS]
    assert len(names) == len(set(names))
    for op in OPERATIONS:
        assert op.access in ops.ACCESS and op.summary, op.name
        assert op.summary == op.summary.strip() and "\n" not in op.summary, op.name
        if op.method is not None:
            assert op.signature().parameters and op.result() is not None, op.name
        else:
            assert not op.client, f"{op.name}: a client method calls a library method"


# ---- each route asks its declared role ------------------------------------------------
@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app over a fresh home that knows an agent's token and an operator's."""
    home = tmp_path_factory.mktemp("operations") / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        app = create_app(sc, OPERATOR, with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1") as c:
            yield c


def _ask(client: TestClient, http: Http, token: str | None) -> int:
    path = http.path + ("/swagger-ui.css" if http.prefix else "")
    for name in ("constraint_id", "chain_id", "tool_id", "source"):
        path = path.replace("{" + name + "}", "x")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    kwargs: dict[str, Any] = {"json": {}} if http.method == "POST" else {}
    if http.path == "/v1/traces":  # an empty OTLP export: a body the intake takes
        kwargs = {"json": {"resourceSpans": []}}
    return client.request(http.method, path, headers=headers, **kwargs).status_code


def _routes_by_role() -> list[tuple[str, Http]]:
    seen: dict[Http, str] = {}
    for op in OPERATIONS:
        if op.http is not None:
            seen.setdefault(op.http, op.access)
    return [(access, http) for http, access in seen.items()]


@pytest.mark.parametrize(("access", "http"), _routes_by_role(), ids=str)
def test_each_route_refuses_the_roles_its_declaration_refuses(
    client: TestClient, access: str, http: Http
) -> None:
    """Without a token, as an agent and as an operator: refused (401 or 403) exactly
    when the declared role does not admit the caller; let in (whatever the request then
    makes of its empty body) otherwise."""
    for role, token in ((None, None), ("agent", AGENT), ("operator", OPERATOR)):
        status = _ask(client, http, token)
        if http.path.startswith("/console"):
            # the gate lets the console through; its own session and CSRF checks answer
            # after it (tests/console/)
            assert status != 401, (http, role, status)
        elif ops.admits(cast(ops.Access, access), role):
            assert status not in (401, 403), (http, role, status)
        else:
            assert status == (401 if role is None else 403), (http, role, status)


def test_the_gate_reads_the_public_paths_from_the_declaration() -> None:
    from sidecar.shells.api import gate

    public = {op.http.path for op in OPERATIONS if op.http and op.access == "public"}
    assert set(gate.PUBLIC) | {p.rstrip("/") for p in gate.PUBLIC_FOLDERS} == public


# ---- the CLI ----------------------------------------------------------------------------
def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, tuple[argparse.ArgumentParser, str | None]]:
    """Every command that runs (a parser bound to a function), with its help; groups
    that only hold commands (``tools``) are not commands."""
    out: dict[str, tuple[argparse.ArgumentParser, str | None]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.get_default("func") is not None:
                    out[f"{prefix}{name}"] = (sub, helps.get(name))
                out.update(_commands(sub, f"{prefix}{name} "))
    return out


def test_every_cli_command_is_declared_and_every_declared_command_exists() -> None:
    from sidecar.shells.cli.parser import build_parser

    found = _commands(build_parser())
    declared = {op.cli for op in OPERATIONS if op.cli}
    assert sorted(set(found) - declared) == [], "commands no operation declares"
    assert sorted(declared - set(found)) == [], "declared commands the CLI lacks"
    for words, (_parser, help_text) in found.items():
        assert help_text == ops.command_help(words), words


# ---- the MCP tools ------------------------------------------------------------------------
def test_every_mcp_tool_is_declared_and_every_declared_tool_exists() -> None:
    import anyio

    from sidecar.shells.mcp_server import build_mcp

    # listing the tools calls nothing of the library: a stand-in serves
    tools = anyio.run(build_mcp(cast(Sidecar, object())).list_tools)
    found = {t.name: t.description for t in tools}
    declared = {op.mcp for op in OPERATIONS if op.mcp}
    assert sorted(set(found) - declared) == [], "tools no operation declares"
    assert sorted(declared - set(found)) == [], "declared tools the MCP server lacks"
    for name, description in found.items():
        assert description == ops.tool_description(name), name


# ---- the client and the interface ---------------------------------------------------------
def _client_methods() -> set[str]:
    transport = {"call"}  # the client's own: a request to any path
    return {
        name
        for cls in RemoteSidecar.__mro__[:-1]  # its own, and its mixins' (not object's)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_") and name not in transport
    }


def test_every_client_method_is_a_declared_operation_and_back() -> None:
    declared = {op.method for op in OPERATIONS if op.client}
    assert sorted(_client_methods() ^ declared) == []


def test_the_interface_is_the_declared_client_operations() -> None:
    """What a remote caller may use (``SidecarAPI``) is what is declared as the
    client's: each of its methods an operation of the library."""
    interface = {n for n in vars(SidecarAPI) if not n.startswith("_")}
    assert interface == {op.method for op in OPERATIONS if op.client}


def test_the_checks_can_fail() -> None:
    """An undeclared route, command or tool is seen (a check that cannot fail holds
    nothing)."""
    ghost = Operation("ghost", "a ghost", "agent", http=Http("GET", "/v1/ghost"))
    assert ops.on_route("GET", "/v1/ghost") == []
    assert ghost.http is not None and (ghost.http.method, ghost.http.path) not in _app_routes()
    with pytest.raises(KeyError):
        ops.command_help("ghost")
    with pytest.raises(KeyError):
        ops.tool_description("ghost")
    assert not ops.admits("operator", "agent") and not ops.admits("agent", None)
    assert ops.admits("public", None) and ops.admits("agent", "operator")


def test_the_renderer_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert ops.main(["--markdown"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == ops.markdown()
    assert all(f"`sidecar {op.cli}`" in printed for op in OPERATIONS if op.cli)
    assert ops.main([]) == 2


def test_each_client_method_asks_its_declared_route() -> None:
    """The client sends each library operation to the route declared for it (``health``
    reads ``/readyz`` past the error handling: the integration tests ask it)."""
    seen: list[tuple[str, str]] = []

    class Spy(RemoteSidecar):
        def call(self, method: str, path: str, **kwargs: Any) -> Any:
            seen.append((method, path))
            raise LookupError  # the answer is not asked for

    ids = {
        "constraint_id": "c1",
        "chain_id": "c1",
        "tool_id": "t1",
        "source": "s1",
        "approval_id": "a1",
        "appeal_id": "p1",
    }
    report = {"topology": ["a"], "outcome": "completed"}
    calls: dict[str, tuple[Any, ...]] = {
        "add_tools": ([Tool("a", "an a")],),
        "report": (report,),
        "report_many": ([report],),
        "constraint": ("c1",),
        "lift": ("c1", "r"),
        "reinstate": ("c1", "r"),
        "confirm": ("c1", "r"),
        "retire": ("c1", "r"),
        "note_calls": ([{"tool": "a", "decision": "allow"}],),
        "session_activity": ("src:a/session:s1",),
        "forget": ("s1",),
        "restore": ("t1", "r"),
        "tool_history": ("t1",),
        "audit": ("cold://chains/c1",),
        "search": ("q",),
        "check": (["a"],),
        "check_call": ([], "a"),
        "sync_tools": ("s1", []),
        "request_approval": ("a", {}),
        "approve": ("a1",),
        "deny": ("a1",),
        "appeal": ("a", {}, "why"),
        "close_appeal": ("p1", True),
    }
    with Spy("http://127.0.0.1:1", None) as spy:
        spy._limit = 1_000_000  # no /version asked first
        for op in OPERATIONS:
            if not op.client or op.http is None or op.name == "health":
                continue
            seen.clear()
            with pytest.raises(LookupError):
                getattr(spy, op.name)(*calls.get(op.name, ()))
            path = op.http.path
            for name, value in ids.items():
                path = path.replace("{" + name + "}", value)
            assert seen[0] == (op.http.method, path), op.name


# ---- each CLI command calls its declared library methods ---------------------------------
class _Called(Exception):
    """A library method was called (the spy stops the command there)."""


class _SpyBackend:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def __getattr__(self, name: str) -> Any:
        def record(*_args: Any, **_kwargs: Any) -> Any:
            self.calls.append(name)
            raise _Called

        return record


def _cli_samples(folder: Path) -> list[tuple[str, list[str]]]:
    """A call of every command that calls the library: its words, and its arguments
    (``constraints lift --reinstate`` is ``reinstate`` by another name, and left out)."""
    tools = folder / "tools.jsonl"
    tools.write_text('{"tool_id": "a", "description": "an a"}\n')
    reports = folder / "reports.jsonl"
    reports.write_text('{"topology": ["a"], "outcome": "completed"}\n')
    steps = folder / "steps.json"
    steps.write_text('{"steps": [], "next": {"tool": "a", "arguments": {}}}')
    return [
        ("tools add", [str(tools)]),
        ("tools list", []),
        ("tools history", ["t1"]),
        ("search", ["q"]),
        ("report", [str(reports)]),
        ("check", ["a,b"]),
        ("check", ["--steps", str(steps)]),
        ("audit", ["cold://chains/c1"]),
        ("archive digest", []),
        ("archive status", []),
        ("archive maintain", []),
        ("constraints list", []),
        ("constraints show", ["c1"]),
        ("constraints lift", ["c1", "--reason", "r"]),
        ("constraints reinstate", ["c1", "--reason", "r"]),
        ("constraints confirm", ["c1", "--reason", "r"]),
        ("constraints retire", ["c1", "--reason", "r"]),
        ("forget", ["--source", "s1"]),
        ("evict", []),
        ("evict", ["--recover"]),
        ("restore", ["t1", "--reason", "r"]),
        ("revocations", []),
        ("revocations run", []),
        ("approvals list", []),
        ("approvals approve", ["a1", "--for", "60"]),
        ("approvals deny", ["a1"]),
        ("appeals list", []),
        ("appeals close", ["p1", "--upheld"]),
    ]


def test_each_cli_command_calls_its_declared_library_methods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command, run on a spy of the library, calls one of the methods its
    operations declare; every declared pair of command and method is run."""
    import contextlib

    from sidecar.shells.cli import commands, main

    calls: list[str] = []

    @contextlib.contextmanager
    def spy(*_args: Any, **_kwargs: Any) -> Iterator[_SpyBackend]:
        yield _SpyBackend(calls)

    monkeypatch.setattr(commands, "backend", spy)
    seen: set[tuple[str, str]] = set()
    for words, args in _cli_samples(tmp_path):
        calls.clear()
        with pytest.raises(_Called):
            main(["--home", str(tmp_path / "home"), "--json", *words.split(), *args])
        declared = {op.method for op in ops.of_command(words)}
        assert calls[:1] and calls[0] in declared, (words, args, calls, declared)
        seen.add((words, calls[0]))
    assert seen == {(op.cli, op.method) for op in OPERATIONS if op.cli and op.method}


MCP_SAMPLES: list[tuple[str, dict[str, Any]]] = [
    ("search_tools", {"query": "q"}),
    ("check_plan", {"plan": ["a", "b"]}),
    ("check_plan", {"steps": [], "next": {"tool": "a"}}),
    ("report_chain", {"report": {"topology": ["a"], "outcome": "completed"}}),
    ("audit_chain", {"pointer": "cold://chains/c1"}),
    ("forget_source", {"source": "s1"}),
    ("appeal_block", {"tool": "a", "reason": "it was delivered"}),
]


def test_each_mcp_tool_calls_its_declared_library_methods() -> None:
    """Each tool, called on a spy of the library (in this process: as its owner), calls
    one of the methods its operations declare; every declared pair of tool and method is
    called."""
    import anyio
    from mcp.server.mcpserver.exceptions import ToolError

    from sidecar.shells.mcp_server import build_mcp

    calls: list[str] = []
    server = build_mcp(cast(Sidecar, _SpyBackend(calls)))
    seen: set[tuple[str, str]] = set()
    for tool, arguments in MCP_SAMPLES:
        calls.clear()
        # the spy stops the tool at the library's call; the server reports that as an error
        with pytest.raises(ToolError, match=f"Error executing tool {tool}"):
            anyio.run(server.call_tool, tool, arguments)
        declared = {op.method for op in ops.of_tool(tool)}
        assert calls[:1] and calls[0] in declared, (tool, calls, declared)
        seen.add((tool, calls[0]))
    assert seen == {(op.mcp, op.method) for op in OPERATIONS if op.mcp and op.method}
