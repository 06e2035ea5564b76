"""OpenAPI fuzzing with schemathesis: over a thousand generated requests, never a 5xx.

The app, its home and its schema are built in module fixtures, so any one test of this
module runs alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.demo import demo_tools
from sidecar.shells.api import create_app
from tests.sidecar.helpers import abandoned

TOKEN = "fuzz-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = 70


@pytest.fixture(scope="module")
def calls() -> Iterator[dict[str, list[int]]]:
    """Status codes by operation; once every operation ran, over a thousand requests."""
    seen: dict[str, list[int]] = {}
    yield seen
    if len(seen) == OPERATIONS:
        total = sum(len(v) for v in seen.values())
        assert total >= 1000, total


class _NotOpenedYet:
    """Stands in for the library while the module is imported: the OpenAPI document does
    not depend on it, and every request is sent after the fixture below put the real
    one in place."""


APP = create_app(cast(Sidecar, _NotOpenedYet()), TOKEN, with_mcp=False)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, headers=AUTH)
OPERATIONS = 40
"""Operations in the OpenAPI document (a new route changes it; the test says so)."""


@pytest.fixture(scope="module", autouse=True)
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    home: Path = tmp_path_factory.mktemp("fuzz") / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.add_tools(demo_tools())
        sc.report(abandoned(["web_search", "html_parser", "llm_extractor"], "HTTP 413"))
        APP.api.state.sidecar = sc  # type: ignore[attr-defined]
        yield sc


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case: schemathesis.Case, calls: dict[str, list[int]]) -> None:
    response = case.call(headers=AUTH)
    calls.setdefault(f"{case.method} {case.path}", []).append(response.status_code)
    assert response.status_code < 500, f"{case.method} {case.path}: {response.text[:300]}"
    if response.status_code >= 400:
        body = response.json()
        if case.path == "/v1/traces" and "error" not in body:
            # the OTLP route itself answers as a collector does: a google.rpc.Status
            assert {"code", "message"} <= set(body)
        else:
            assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])


def test_every_operation_is_fuzzed() -> None:
    assert len(list(schema.get_all_operations())) == OPERATIONS
