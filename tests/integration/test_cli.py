"""The CLI contract, end to end from a shell on a fresh home (the installed script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sidecar import Sidecar
from sidecar.demo import catalog_text

SCRIPT = str(Path(sys.executable).with_name("sidecar"))
FATAL = "web_search,html_parser,llm_extractor"


def run(
    home: Path, *args: str, stdin: str | None = None, embedder: str = "hashing"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": embedder}
    return subprocess.run(
        [SCRIPT, *args], input=stdin, capture_output=True, text=True, env=env, timeout=300
    )


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


REPORTS = [
    {
        "topology": ["web_search", "html_parser", "llm_extractor"],
        "outcome": "abandoned",
        "failure": {"signature": "timeout on 7.2 MB payload", "kind": None, "error": {}},
        "constraint": {
            "rule": "IF html_parser output > 5 MB THEN llm_extractor times out",
            "when": [
                {"step": "html_parser", "field": "payload_bytes", "op": ">", "value": 5000000}
            ],
            "gapped": False,
        },
        "logs": ["Authorization: Bearer abcdefghijklmnop123"],
        "session_id": "s1",
    },
    {
        "topology": ["web_search", "news_search"],
        "outcome": "abandoned",
        "failure": {"signature": "HTTP 503", "kind": None, "error": {}},
        "constraint": {"rule": "r", "when": [], "gapped": False},
    },
    {"topology": ["only_one"], "outcome": "abandoned", "failure": {"signature": "x"}},
    {"topology": ["web_search", "text_summarizer"], "outcome": "completed"},
]


@pytest.fixture
def loaded(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(catalog_text())
    openai = tmp_path / "openai.json"
    openai.write_text(
        json.dumps(
            [{"type": "function", "function": {"name": "fx_rates", "description": "FX rates"}}]
        )
    )
    proc = run(home, "tools", "add", str(catalog), str(openai), "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(as_json(proc)["added"]) == 63
    return home


def test_help_answers_without_loading_heavy_libraries(tmp_path: Path) -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from sidecar.shells.cli import main\n"
        "from sidecar import Sidecar\n"
        f"missing = main(['--home', {str(tmp_path / 'typo')!r}, 'check', 'a,b'])\n"
        f"Sidecar.open(home={str(tmp_path)!r}).close()\n"
        f"code = main(['--home', {str(tmp_path)!r}, 'check', 'a,b', '--json'])\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'chromadb') if m in sys.modules]\n"
        "print(missing, code, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "5 0 []"
    assert "no sidecar home at" in out.stderr
    assert not (tmp_path / "typo").exists()  # a read never creates a home
    assert run(tmp_path, "--help").returncode == 0


def test_the_cli_contract(loaded: Path) -> None:
    home = loaded
    listed = as_json(run(home, "tools", "list", "--json"))["tools"]
    assert len(listed) == 63 and {"tool_id", "description", "credentials"} <= set(listed[0])

    lines = "\n".join(json.dumps(r) for r in REPORTS) + "\nnot json\n"
    proc = run(home, "report", "-", "--json", stdin=lines)
    assert proc.returncode == 4  # at least one line rejected
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["status"] for r in results] == [
        "archived",
        "not_archived",
        "rejected",
        "recorded",
        "rejected",
    ]
    archived = results[0]
    assert archived["pointer"] == f"cold://chains/{archived['chain_id']}"
    assert "transient" in results[1]["reason"]
    assert results[2]["reason"] == "An abandoned chain must contain at least two tools."
    assert "not JSON" in results[4]["reason"]

    blocked = run(home, "check", FATAL, "--context", "payload_bytes=7200000", "--json")
    assert blocked.returncode == 3
    verdict = as_json(blocked)
    assert verdict["safe"] is False
    collision = verdict["collisions"][0]
    assert {"chain_id", "matched", "rule", "expected_failure", "pointer"} <= set(collision)
    assert collision["pointer"] == archived["pointer"]

    safe = run(home, "check", FATAL, "--context", "payload_bytes=100", "--json")
    assert safe.returncode == 0 and as_json(safe) == {"safe": True, "collisions": []}

    prefix = run(home, "check", "web_search,html_parser", "--mode", "prefix", "--json")
    assert prefix.returncode == 3
    assert as_json(prefix)["collisions"][0]["reason"].startswith(
        "PREFIX_COLLISION: Sequence ('web_search', 'html_parser')"
    )

    found = run(
        home,
        "search",
        "extract product prices from text",
        "-k",
        "63",
        "--after",
        "web_search,html_parser",
        "--context",
        "payload_bytes=7200000",
        "--json",
    )
    assert found.returncode == 0, found.stderr
    body = as_json(found)
    assert set(body) == {"hits", "withheld", "abstained"}
    assert len(body["hits"]) == 62  # everything but the withheld continuation
    assert {"tool_id", "score", "description", "warnings"} <= set(body["hits"][0])
    assert "llm_extractor" not in [h["tool_id"] for h in body["hits"]]
    assert [(w["tool_id"], w["pointer"]) for w in body["withheld"]] == [
        ("llm_extractor", archived["pointer"])
    ]

    audit = as_json(run(home, "audit", archived["pointer"], "--json"))
    assert audit["topology"] == FATAL.split(",")
    assert "abcdefghijklmnop123" not in json.dumps(audit)

    digest = run(home, "archive", "digest")
    assert digest.returncode == 0 and len(digest.stdout.strip()) == 64
    assert as_json(run(home, "archive", "digest", "--json"))["chains"] == 1

    human = run(home, "check", FATAL)
    assert human.returncode == 3 and "BLOCKED" in human.stdout


def test_report_reads_a_file(loaded: Path, tmp_path: Path) -> None:
    """One summary line by default (no progress bar off a terminal); one line per report
    with --verbose, the summary last."""
    path = tmp_path / "reports.jsonl"
    path.write_text(json.dumps(REPORTS[0]) + "\n\n" + json.dumps(REPORTS[3]) + "\n")
    proc = run(loaded, "report", str(path))
    assert proc.returncode == 0, proc.stderr
    summary = "2 report(s): 1 archived, 1 recorded, 0 not archived, 0 rejected"
    assert proc.stdout.splitlines() == [summary] and proc.stderr == ""
    verbose = run(loaded, "report", str(path), "--verbose").stdout.splitlines()
    assert verbose[0].startswith("line 1: archived cold://chains/")
    assert verbose[1].startswith("line 3: recorded")
    assert verbose[2] == summary  # a replay is answered as the first time


def test_a_report_summary_names_the_rejected_lines(loaded: Path, tmp_path: Path) -> None:
    path = tmp_path / "reports.jsonl"
    lines = [json.dumps(REPORTS[3])] + ["not json"] * 12 + [json.dumps(REPORTS[2])]
    path.write_text("\n".join(lines) + "\n")
    proc = run(loaded, "report", str(path))
    assert proc.returncode == 4
    out = proc.stdout.splitlines()
    assert out[0] == "line 2: rejected - line 2: not JSON (Expecting value)"
    assert out[-2] == "… and 3 more rejected (--verbose or --json)"
    assert out[-1] == "14 report(s): 0 archived, 1 recorded, 0 not archived, 13 rejected"


def test_files_that_are_not_utf8_are_usage_errors(loaded: Path, tmp_path: Path) -> None:
    """Nothing is reported from a file with a line that is not UTF-8: it is refused
    before the first line is sent (exit 2, no traceback)."""
    reports = tmp_path / "reports.jsonl"
    good = json.dumps(REPORTS[0]).encode()
    reports.write_bytes(good + b"\n" + b'{"topology": ["caf\xe9", "b"]}\n')
    steps = tmp_path / "steps.json"
    steps.write_bytes(b'{"steps": [], "next": {"tool": "caf\xe9"}}')
    for args in (("report", str(reports)), ("check", "--steps", str(steps))):
        proc = run(loaded, *args)
        assert proc.returncode == 2, proc.stderr
        assert "not UTF-8" in proc.stderr and "Traceback" not in proc.stderr
    assert "line 2, byte 19 is 0xe9" in run(loaded, "report", str(reports)).stderr
    assert run(loaded, "archive", "digest").returncode == 5  # nothing was archived


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("check", "a,bad id"), 2, "not a valid tool name"),
        (("audit", "cold://chains/nope"), 5, "nothing archived"),
        (("audit", "http://x"), 2, "bad cold storage pointer"),
        (("archive", "digest"), 5, "empty abandoned chain archive"),
        (("report", "/no/such/file"), 2, "cannot read"),
        (("tools", "add", "/no/such/file"), 2, "cannot read"),
    ],
)
def test_errors_become_messages_and_exit_codes(
    tmp_path: Path, args: tuple[str, ...], code: int, message: str
) -> None:
    Sidecar.open(home=tmp_path / "home").close()
    proc = run(tmp_path / "home", *args)
    assert proc.returncode == code
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    as_json_err = run(tmp_path / "home", *args, "--json")
    assert json.loads(as_json_err.stderr)["error"]["message"]


@pytest.mark.parametrize(
    "args",
    [
        ("tools", "list"),
        ("check", "a,b"),
        ("archive", "status"),
        # writes that act on what a home holds: a typo must not give them an empty one
        ("evict", "--dry-run"),
        ("evict",),
        ("evict", "--recover"),
        ("restore", "web_search", "--reason", "fixed"),
        ("constraints", "lift", "0" * 32, "--reason", "r"),
        ("forget", "--source", "alice"),
        ("revocations", "run"),
        ("archive", "maintain"),
    ],
    ids=" ".join,
)
def test_a_missing_home_is_an_error_unless_the_command_creates_one(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    typo = tmp_path / "typo"
    proc = run(typo, *args)
    assert proc.returncode == 5, proc.stderr
    assert f"no sidecar home at {typo}" in proc.stderr
    assert "`sidecar tools add`, `report`, `serve`, `mcp`, `gateway` and `demo`" in proc.stderr
    assert not typo.exists()


def test_a_refused_token_says_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hint of a 401 survives the redaction of error messages: it names
    $SIDECAR_TOKEN or the token file, never "[REDACTED]"."""
    from indexes import HashingEmbedder
    from tests.serving import serving

    client = tmp_path / "client"
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc,
        serving(sc, "the-right-token-0123456789") as url,
    ):
        monkeypatch.setenv("SIDECAR_URL", url)
        monkeypatch.setenv("SIDECAR_TOKEN", "a-wrong-token-0123456789")
        wrong = run(client, "tools", "list")
        monkeypatch.delenv("SIDECAR_TOKEN")
        none = run(client, "tools", "list")
        client.mkdir()
        (client / "token").write_text("a-wrong-token-0123456789")
        from_file = run(client, "tools", "list")
    assert "(the token sent came from $SIDECAR_TOKEN)" in wrong.stderr
    assert f"(no token was sent: none in $SIDECAR_TOKEN or {client / 'token'})" in none.stderr
    assert "the Authorization header must be `Bearer <token>`" in none.stderr
    assert f"(the token sent came from {client / 'token'})" in from_file.stderr
    for proc in (wrong, none, from_file):
        assert proc.returncode == 9 and "[REDACTED]" not in proc.stderr, proc.stderr


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    proc = run(tmp_path, "check", "a,b", "--context", "novalue")
    assert proc.returncode == 2 and "key=value" in proc.stderr


def test_home_resolution(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SIDECAR_HOME"}
    env["SIDECAR_EMBEDDER"] = "hashing"
    write = {"env": env, "check": True, "capture_output": True, "input": b""}
    subprocess.run([SCRIPT, "report", "-"], cwd=tmp_path, **write)  # type: ignore[call-overload]
    assert (tmp_path / ".sidecar" / "state.sqlite").exists()
    other = tmp_path / "explicit"
    subprocess.run([SCRIPT, "--home", str(other), "report", "-"], **write)  # type: ignore[call-overload]
    assert (other / "state.sqlite").exists()


def test_real_model_search_from_the_shell(tmp_path: Path) -> None:
    home = tmp_path / "home"
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(catalog_text())
    assert run(home, "tools", "add", str(catalog), embedder="minilm").returncode == 0
    proc = run(
        home, "search", "weather forecast for the weekend", "-k", "2", "--json", embedder="minilm"
    )
    assert proc.returncode == 0, proc.stderr
    assert as_json(proc)["hits"][0]["tool_id"] == "weather_forecast"


def test_demo_shows_the_fallacy_then_prevents_it(tmp_path: Path) -> None:
    proc = run(tmp_path / "demo-home", "demo", "--json", embedder="minilm")
    assert proc.returncode == 0, proc.stderr
    summary = as_json(proc)
    assert summary["fallacy_reproduced"] is True
    assert summary["plain_chain"] == FATAL.split(",")
    assert summary["successor_with_sidecar"][-1] != "llm_extractor"
    assert summary["prevented"] is True
    assert summary["withheld"][0]["tool_id"] == "llm_extractor"
    assert summary["check_sequence"]["safe"] is False


def test_help_imports_neither_pyarrow_nor_numpy() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from sidecar.shells.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "print([m for m in ('pyarrow', 'numpy', 'chromadb', 'torch') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("preset", "expected"), [(None, 1), ("2", 2)])
def test_a_sidecar_process_runs_numpy_on_one_blas_thread(preset: str | None, expected: int) -> None:
    """Lookups rank with one matrix product: on one thread it never waits for a busy
    core.  An operator's OPENBLAS_NUM_THREADS wins."""
    probe = (
        "import contextlib, io\n"
        "from sidecar.shells.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "import numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "print([i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == f"[{expected}]"


def test_evict_min_chains_flag(tmp_path: Path) -> None:
    home = tmp_path / "home"
    catalog = tmp_path / "tools.jsonl"
    catalog.write_text(
        "\n".join(json.dumps({"tool_id": t, "description": f"{t} tool"}) for t in FATAL.split(","))
    )
    assert run(home, "tools", "add", str(catalog)).returncode == 0
    assert run(home, "report", "-", stdin=json.dumps(REPORTS[0])).returncode == 0
    # the default policy needs a second distinct chain
    default = as_json(run(home, "evict", "--dry-run", "--json"))
    assert default["evicted"] == []
    assert {d["reason"] for d in default["kept_with_constraint"]} == {
        "1 dead-end session(s) through it; eviction needs 2"
    }
    loose = as_json(run(home, "evict", "--min-chains", "1", "--json"))
    assert {d["tool_id"] for d in loose["evicted"]} == {"web_search", "html_parser"}
    bad = run(home, "evict", "--min-chains", "0")
    assert bad.returncode == 2 and "must be at least 1" in bad.stderr


def test_a_dry_run_counts_the_revocation_mandates_the_run_writes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    catalog = tmp_path / "tools.jsonl"
    refs = {"web_search": ["env:SEARCH_KEY"], "html_parser": ["env:SHARED"],
            "llm_extractor": ["env:SHARED"]}  # fmt: skip
    lines = [
        {"tool_id": t, "description": f"{t} tool", "credentials": [{"ref": r} for r in refs[t]]}
        for t in FATAL.split(",")
    ]
    catalog.write_text("\n".join(json.dumps(line) for line in lines))
    assert run(home, "tools", "add", str(catalog)).returncode == 0
    assert run(home, "report", "-", stdin=json.dumps(REPORTS[0])).returncode == 0
    dry = run(home, "evict", "--dry-run", "--min-chains", "1")
    assert dry.returncode == 0, dry.stderr
    # env:SEARCH_KEY; env:SHARED stays with llm_extractor, the terminal tool
    assert "revocation mandates: 1" in dry.stdout.splitlines()
    real = as_json(run(home, "evict", "--min-chains", "1", "--json"))
    assert real["mandates"] == 1 and len(real["evicted"]) == 2


def test_constraints_lift_and_reinstate(loaded: Path) -> None:
    """`constraints lift ID` and `constraints reinstate ID`, as the README names them;
    `lift --reinstate` is the same as `reinstate`."""
    archived = as_json(run(loaded, "report", "-", "--json", stdin=json.dumps(REPORTS[0])))
    cid = archived["chain_id"]
    lifted = run(loaded, "constraints", "lift", cid, "--reason", "false positive")
    assert (lifted.returncode, lifted.stdout.strip()) == (0, f"{cid}: lifted")
    assert run(loaded, "check", FATAL, "--context", "payload_bytes=7200000").returncode == 0
    back = run(loaded, "constraints", "reinstate", cid, "--reason", "it fails again")
    assert (back.returncode, back.stdout.strip()) == (0, f"{cid}: active")
    assert run(loaded, "check", FATAL, "--context", "payload_bytes=7200000").returncode == 3
    run(loaded, "constraints", "lift", cid, "--reason", "again")
    alias = run(loaded, "constraints", "lift", cid, "--reinstate", "--reason", "alias")
    assert alias.stdout.strip() == f"{cid}: active"
    missing = run(loaded, "constraints", "reinstate", "0" * 32, "--reason", "x")
    assert missing.returncode == 5
    status = run(loaded, "archive", "status").stdout
    assert "active constraints: 1 (1 fatal sequence(s), 0 call condition(s))" in status
