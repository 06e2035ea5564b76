"""One agent token against a real ``sidecar serve``, scaled down from the attack that
found it (``benchmarks/bench_bounds.py`` runs it whole): its steps on tools in no catalog
leave no per-tool state, its tool ids in no catalog and its evidence are counted, and
past its evidence budget it gets a 429 naming the budget, which ``/metrics`` shows."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.live import post, serving
from tests.support.quota import CATALOG, attack, catalog_session, tools_in
from tests.support.tokens import TOKENS, tokens_file

BUDGET = 60_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    yield from serving(home, {"SIDECAR_EVIDENCE_BUDGET": str(BUDGET)})


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def state_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in home.glob("state.sqlite*") if p.is_file())


def test_an_agent_tokens_made_up_tools_and_evidence_are_bounded(
    server: tuple[str, Path, dict[str, str]],
) -> None:
    url, home, _env = server
    operator, alice = (home / "token").read_text().strip(), TOKENS["alice"]
    tools = [{"tool_id": t, "description": t.replace("_", " ")} for t in sorted(CATALOG)]
    assert post(url, operator, "/v1/tools", {"tools": tools}).status_code == 200
    before = state_bytes(home)
    # the attack, scaled down: 300 made-up tools a request, until their rate refuses
    statuses = [
        post(url, alice, "/v1/reports", {"reports": [attack(n, 300)]}).status_code for n in range(3)
    ]
    assert statuses == [200, 200, 429]  # 600 tool ids in no catalog a minute by default
    for table, named in tools_in(home).items():
        assert named <= CATALOG, table
    assert state_bytes(home) - before < 2_000_000
    # the same token's evidence on the catalog's tools, until its budget refuses it
    for n in range(100):
        answer = post(url, alice, "/v1/reports", {"reports": [catalog_session(n)]})
        if answer.status_code != 200:
            break
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "budget_exhausted"
    assert "SIDECAR_EVIDENCE_BUDGET" in answer.json()["error"]["message"]
    assert "Retry-After" not in answer.headers  # waiting does not refill a budget
    assert post(url, operator, "/v1/reports", {"reports": [catalog_session(500)]}).is_success
    metrics = httpx.get(
        f"{url}/metrics", headers={"Authorization": f"Bearer {operator}"}, timeout=60
    ).text
    spent = metric(metrics, 'sidecar_evidence_bytes{token="alice"}')
    assert BUDGET <= spent < 2 * BUDGET
    assert metric(metrics, 'sidecar_reports_refused_total{limit="evidence_budget"}') == 1
    assert metric(metrics, 'sidecar_reports_refused_total{limit="new_tool_ids"}') == 1
    assert metric(metrics, 'sidecar_uncataloged_steps_total{token="alice"}') == 600
    # what the state counts for alice is what /metrics says
    db = sqlite3.connect(home / "state.sqlite")
    (stored,) = db.execute("SELECT SUM(bytes) FROM evidence_bytes WHERE source='alice'").fetchone()
    db.close()
    assert stored == spent
