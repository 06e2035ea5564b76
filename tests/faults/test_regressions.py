"""Regression tests, one per defect: each failed on the code before its fix."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cold_store import CommitFailed
from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.demo import demo_tools
from tests.faults.harness import SCRIPT, Server, cli, env_for, no_traceback
from tests.sidecar.helpers import abandoned, completed

FATAL = ["web_search", "html_parser", "llm_extractor"]
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("regressions") / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.add_tools(demo_tools())
        sc.report(abandoned(FATAL, "timeout after 30s on 7.2 MB payload", rule="too large",
                            when=[{"step": "html_parser", "field": "payload_bytes", "op": ">",
                                   "value": 5_000_000}]))  # fmt: skip
    with Server(home) as srv:
        yield srv
        srv.stop()


def raw(server: Server, path: str, text: str) -> httpx.Response:
    """POST ``text`` as the body, unparsed: JSON extensions (NaN) and escapes
    (``\\ud800``) reach the server as a client would send them."""
    with server.client() as http:
        return http.post(path, content=text.encode(), headers=JSON)


def chains(server: Server) -> int:
    return int(server.get("/v1/archive/status").json()["chains"])


# ---- numbers that are not finite ----------------------------------------------------
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_context_or_condition_that_is_not_a_finite_number_is_refused(
    server: Server, value: str
) -> None:
    """``payload_bytes=NaN`` compares false with everything: accepted, it would let a
    plan through a fail-closed condition.  The CLI exits 2 (locally and with --url),
    the HTTP API answers 400, a report whose condition holds one is rejected."""
    plan = ",".join(FATAL)
    for url in ([], ["--url", server.url]):
        proc = cli(server.home, "check", plan, "--context", f"payload_bytes={value}", *url)
        assert proc.returncode == 2, (url, proc.stdout, proc.stderr)
        assert "not a finite number" in proc.stderr
        no_traceback(proc)
    for path, body in (
        ("/v1/check", f'{{"plan": {json.dumps(FATAL)}, "context": {{"payload_bytes": {value}}}}}'),
        ("/v1/search", f'{{"query": "extract", "context": {{"payload_bytes": {value}}}}}'),
    ):
        refused = raw(server, path, body)
        assert refused.status_code == 400, refused.text
        assert "finite number" in refused.json()["error"]["message"]
    before = chains(server)
    report = {**abandoned(["a1", "b1"], f"HTTP 400 {value}"), "constraint": {
        "rule": "r", "when": [{"field": "payload_bytes", "op": ">", "value": "@"}]}}  # fmt: skip
    answered = raw(server, "/v1/reports", json.dumps({"reports": [report]}).replace('"@"', value))
    assert answered.status_code == 200, answered.text
    [result] = answered.json()["results"]
    assert result["status"] == "rejected" and "finite number" in result["reason"], result
    assert chains(server) == before


# ---- text that cannot be stored, nesting that cannot be read back -----------------------
SURROGATE = "\\ud800x"  # as it appears in the raw JSON text


def test_a_lone_surrogate_is_a_400_naming_the_field(server: Server, tmp_path: Path) -> None:
    """``"\\ud800x"`` decodes to a string UTF-8 cannot encode: stored, it broke the
    write (a 503 from Chroma, a 500 from SQLite) or the file.  A tool's description,
    schema key or credential reference is a 400 ``tool_format`` naming the field; a
    report's signature is rejected naming it; the local CLI says so without a
    traceback."""
    cases = {
        "description": {"tool_id": "bad1", "description": "@"},
        "input schema['properties'] key": {
            "name": "bad2", "description": "x", "inputSchema": {"properties": {"@": {}}}},
        "credentials[0].ref": {"tool_id": "bad3", "credentials": [{"ref": "env:@"}]},
    }  # fmt: skip
    for field, tool in cases.items():
        text = json.dumps({"tools": [tool]}).replace("@", SURROGATE)
        refused = raw(server, "/v1/tools", text)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "tool_format" and field in error["message"], error
        assert "lone surrogate" in error["message"]
    before = chains(server)
    report = json.dumps({"reports": [abandoned(["a2", "b2"], "@")]}).replace("@", SURROGATE)
    answered = raw(server, "/v1/reports", report)
    assert answered.status_code == 200, answered.text
    [result] = answered.json()["results"]
    assert result["status"] == "rejected", result
    assert "failure.signature" in result["reason"] and "surrogate" in result["reason"]
    assert chains(server) == before

    home = tmp_path / "home"
    tools = tmp_path / "tools.jsonl"
    tools.write_text(json.dumps(cases["description"]).replace("@", SURROGATE) + "\n")
    added = cli(home, "tools", "add", str(tools))
    assert added.returncode == 2, added.stderr
    assert "description is not valid Unicode text" in added.stderr
    no_traceback(added)
    reports = tmp_path / "reports.jsonl"
    reports.write_text(json.dumps(abandoned(["a2", "b2"], "@")).replace("@", SURROGATE) + "\n")
    reported = cli(home, "report", str(reports))
    assert reported.returncode == 4, reported.stderr
    assert "failure.signature is not valid Unicode text" in reported.stdout
    no_traceback(reported)


def test_deep_nesting_is_refused_at_intake(server: Server) -> None:
    """Logs or an error object nested 500 deep were archived, then unreadable (Parquet
    and JSON readers stop at a depth); a tool schema nested 500 deep was a 500
    (RecursionError while redacting it).  Now each is refused at intake: nothing is
    archived; and a body nested 100,000 deep is a 4xx."""
    deep = "[" * 500 + "]" * 500
    before = chains(server)
    for where, report in (
        ("logs", {**abandoned(["a3", "b3"], "HTTP 400 deep logs"), "logs": ["@"]}),
        ("failure.error", abandoned(["a4", "b4"], "HTTP 400 deep error", error={"x": "@"})),
    ):
        text = json.dumps({"reports": [report]}).replace('"@"', deep)
        answered = raw(server, "/v1/reports", text)
        assert answered.status_code == 200, answered.text
        [result] = answered.json()["results"]
        assert result["status"] == "rejected" and where in result["reason"], result
        assert "nested deeper than" in result["reason"]
    assert chains(server) == before
    schema = json.dumps({"tools": [{"tool_id": "deep", "input_schema": {"a": "@"}}]})
    refused = raw(server, "/v1/tools", schema.replace('"@"', deep))
    assert refused.status_code == 400, refused.text
    assert "nested deeper than" in refused.json()["error"]["message"]
    abyss = "[" * 100_000 + "]" * 100_000
    for path in ("/v1/reports", "/v1/search", "/v1/tools", "/v1/check"):
        answered = raw(server, path, abyss)
        assert 400 <= answered.status_code < 500, (path, answered.status_code, answered.text)


# ---- a batch delivered twice -----------------------------------------------------------
def batch_b() -> list[dict[str, Any]]:
    """A new archived chain, a completed run that contradicts the fatal sequence p>q>r,
    a first sighting of an unknown failure, and a completed run of its own."""
    return [
        abandoned(["a5", "b5", "c5"], "HTTP 400 batch", session_id="s1"),
        {**completed(["p", "q", "r", "z"]), "session_id": "s2"},
        abandoned(["d5", "e5"], "weird failure", session_id="s3"),
        {**completed(["m", "n"]), "session_id": "s4"},
    ]


def counts(sc: Sidecar) -> dict[str, Any]:
    state = sc.state
    (fatal,) = [c for c in sc.constraints(include_lifted=True) if c.sequence == ("p", "q", "r")]
    return {
        "runs p>q>r>z": state.uses.completed_runs(("p", "q", "r", "z")),
        "runs m>n": state.uses.completed_runs(("m", "n")),
        "sightings d5>e5": len(state.sightings.sessions(("d5", "e5"), "weird failure")),
        "sightings a5>b5>c5": len(state.sightings.sessions(("a5", "b5", "c5"), "HTTP 400 batch")),
        "chains": sc.status().chains,
        "contradictions p>q>r": fatal.contradictions,
        "status p>q>r": fatal.status,
    }


def fresh(home: Path) -> Sidecar:
    sc = Sidecar.open(embedder=HashingEmbedder(), home=home, retire_after=2)
    sc.report(abandoned(["p", "q", "r"], "HTTP 422 fatal", session_id="s0"))
    return sc


def test_a_batch_delivered_twice_counts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that resends a batch (its first answer lost, or its archive publication
    failed) must change nothing: a completed run counted twice also contradicted the
    fatal sequence p>q>r twice, which retired it (``retire_after`` 2), so the
    continuation it withheld was served again.  The counts after any mix of deliveries
    and failures are those of one delivery."""
    with fresh(tmp_path / "once") as sc:
        sc.report_many(batch_b())
        once = counts(sc)
    assert once["runs p>q>r>z"] == 1 and once["status p>q>r"] == "contested", once

    def failing_append(*_args: object, **_kw: object) -> None:
        raise CommitFailed("injected: the cold append failed")

    with fresh(tmp_path / "failed-first") as sc:
        monkeypatch.setattr(sc.cold.chains, "append", failing_append)
        sc.report_many(batch_b())  # acknowledged: durable in the state, its record waits
        assert sc.status().pending_records == 1
        assert "injected" in sc.health().checks["cold_store"]
        monkeypatch.undo()
        sc.report_many(batch_b())
        sc.maintain()  # what the server's maintenance does: the record is published
        assert counts(sc) == once
        assert sc.status().pending_records == 0
    with fresh(tmp_path / "failed-second") as sc:
        sc.report_many(batch_b())
        monkeypatch.setattr(sc.cold.chains, "append", failing_append)
        sc.report_many(batch_b())  # every chain already archived: no append to fail
        monkeypatch.undo()
        assert counts(sc) == once
        sc.report_many(batch_b())
        sc.report_many(batch_b())
        assert counts(sc) == once


# ---- metrics under a flood of junk ---------------------------------------------------------
def series(text: str) -> set[str]:
    """The metric series (name and labels) of a Prometheus text page."""
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#")}


def test_random_paths_do_not_grow_the_metrics(server: Server) -> None:
    """3,000 requests, without a token, to random paths (and 300 with one): labelled by
    path, each would add series to ``/metrics`` for ever; labelled by route template,
    the set of series does not change."""
    rng = random.Random(7)
    with httpx.Client(base_url=server.url, timeout=30) as anonymous, server.client() as http:

        def flood(n: int) -> list[str]:
            paths = [f"/{rng.getrandbits(64):016x}/{rng.getrandbits(32):08x}" for _ in range(n)]
            for path in paths:
                assert anonymous.get(path).status_code == 401
            for path in paths[: n // 10]:
                assert http.get(path).status_code == 404
                assert http.post(f"/v1/tools/{path.strip('/')[:20]}/restore",
                                 json={"reason": "r"}).status_code == 404  # fmt: skip
            return paths

        flood(30)  # every label the flood can reach, once
        http.get("/metrics")  # and the page's own
        before = series(http.get("/metrics").text)
        paths = flood(3_000)
        page = http.get("/metrics").text
    assert series(page) == before
    assert not any(p.strip("/").split("/")[0] in page for p in paths)


# ---- serve on a port that is taken --------------------------------------------------------
def test_a_port_in_use_fails_at_once_with_exit_8(tmp_path: Path) -> None:
    """``sidecar serve --port P`` on a taken port used to load the embedding model (~10
    s) before it tried the port.  It binds first: exit 8 with a clear message, and it
    never gets to loading the model (the default, real one here)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = env_for(tmp_path / "home")
        env.pop("SIDECAR_EMBEDDER")
        proc = cli(tmp_path / "home", "serve", "--port", str(port), env=env)
    assert proc.returncode == 8, proc.stderr
    assert f"cannot serve on 127.0.0.1:{port}: the address is in use" in proc.stderr
    assert "loading the embedding model" not in proc.stderr
    no_traceback(proc)


# ---- a reader that goes away -----------------------------------------------------------------
def test_a_closed_pipe_ends_a_listing_quietly(tmp_path: Path) -> None:
    """``sidecar tools list | head -1`` on a listing far larger than a pipe's buffer:
    the write that meets the closed pipe ends the command with exit 0 and nothing on
    stderr (it was a BrokenPipeError traceback)."""
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.add_tools(
            [Tool(f"tool_{i:04d}", f"tool {i} " + "does things " * 8) for i in range(2000)]
        )
    for extra in ([], ["--json"]):
        proc = subprocess.Popen(
            [SCRIPT, "tools", "list", *extra],
            env=env_for(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # what `head -1` does once it has its line
        err = proc.stderr.read().decode()
        proc.stderr.close()
        proc.wait(timeout=120)
        assert first.strip(), extra
        assert proc.returncode == 0 and err == "", (extra, proc.returncode, err)
    shell = subprocess.run(
        ["bash", "-c", f'"{SCRIPT}" tools list | head -1; exit "${{PIPESTATUS[0]}}"'],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shell.returncode == 0 and shell.stderr == "", shell.stderr
    assert re.match(r"TOOL\s+TYPE\s+DESCRIPTION", shell.stdout)
