"""OpenAPI fuzzing with schemathesis: over a thousand generated requests, never a 5xx."""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.api import create_app
from sidecar.demo import demo_tools
from tests.sidecar.helpers import abandoned

TOKEN = "fuzz-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

_home = Path(tempfile.mkdtemp(prefix="sidecar-fuzz-"))
_sc = Sidecar.open(embedder=HashingEmbedder(), home=_home)
_sc.add_tools(demo_tools())
_sc.report(abandoned(["web_search", "html_parser", "llm_extractor"], "HTTP 413"))
APP = create_app(_sc, TOKEN, with_mcp=False)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, headers=AUTH)
CALLS: list[int] = []


@schema.parametrize()
@settings(
    max_examples=70,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case: schemathesis.Case) -> None:
    response = case.call(headers=AUTH)
    CALLS.append(response.status_code)
    assert response.status_code < 500, f"{case.method} {case.path}: {response.text[:300]}"
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])


def test_the_fuzzer_sent_over_a_thousand_requests() -> None:
    assert len(CALLS) >= 1000, len(CALLS)
