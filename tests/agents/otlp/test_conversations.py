"""A conversation (``gen_ai.conversation.id``) against the real library behind the HTTP
app, with its default settings: each turn's trace is reported seconds after its root
span ends, later turns extend the same session, and it counts once; ``/metrics`` says
what became of the spans and sessions."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx
import pytest

from sidecar import Sidecar
from sidecar.errors import ConfigError, NotFound
from sidecar.settings import Settings
from sidecar.trust.toolnames import tool_id_for
from tests.agents.otlp.bodies import agent_turn, request, trace_id
from tests.agents.otlp.conftest import TOKEN, eventually

# real servers: the slow suite, not `make test-fast`
pytestmark = pytest.mark.integration

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def _post(url: str, document: Any) -> httpx.Response:
    # no deadline of the client's own: a large body's first request starts the worker
    # process, which on a loaded machine takes longer than httpx's default 5 s
    body = json.dumps(document)
    return httpx.post(f"{url}/v1/traces", content=body, headers=AUTH, timeout=120)


def _conditions(sc: Sidecar, tool: str) -> dict[str, int]:
    return {
        f"{v.condition['predicate']['feature']}={v.condition['predicate']['value']}": v.support
        for v in sc.constraints(include_lifted=True)
        if v.kind == "call" and v.sequence == (tool,) and v.condition is not None
        if v.condition["predicate"]["op"] == "=="
    }


def _metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", headers=AUTH).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics:\n{text}")


def test_a_conversation_is_reported_per_turn_and_counts_once(
    served: tuple[str, Sidecar],
) -> None:
    url, sc = served
    first = [
        {"tool": "get_order", "arguments": {"order_id": "#W1"},
         "result": {"order_id": "#W1", "status": "pending"}},
        {"tool": "exchange", "arguments": {"order_id": "#W1"},
         "error": "Non-delivered order cannot be exchanged"},
    ]  # fmt: skip
    assert _post(url, request(agent_turn(trace_id(0), "conv-7", first))).status_code == 200
    # reported when the turn's root span ended (a few seconds' grace), not after it idles
    eventually(lambda: "obj:order_id.status=pending" in _conditions(sc, "exchange"))
    second = [
        {"tool": "get_invoice", "arguments": {"invoice_id": "#I1"},
         "result": {"invoice_id": "#I1", "state": "paid"}},
        {"tool": "cancel", "arguments": {"invoice_id": "#I1"},
         "error": "Paid invoice cannot be cancelled"},
        {"tool": "get_order", "arguments": {"order_id": "#W2"},
         "result": {"order_id": "#W2", "status": "pending"}},
        {"tool": "exchange", "arguments": {"order_id": "#W2"},
         "error": "Non-delivered order cannot be exchanged"},
    ]  # fmt: skip
    assert _post(url, request(agent_turn(trace_id(1), "conv-7", second))).status_code == 200
    # the second turn was learned: a failure only it holds has a condition
    eventually(lambda: "obj:invoice_id.state=paid" in _conditions(sc, "cancel"))
    # and the conversation is one session: its two failing exchanges count once
    assert _conditions(sc, "exchange")["obj:order_id.status=pending"] == 1
    eventually(lambda: _metric(url, 'sidecar_otlp_sessions_total{outcome="reported"}') == 2)
    assert _metric(url, "sidecar_otlp_open_sessions") == 1  # open for its next turn
    assert _metric(url, 'sidecar_otlp_spans_total{outcome="accepted"}') == 8


def test_metrics_count_renamed_and_dropped_tool_spans(served: tuple[str, Sidecar]) -> None:
    url, sc = served
    calls = [
        {"tool": "fs/read file", "arguments": {"path": "/a"}, "result": "text"},
        {"tool": "???", "arguments": {}, "result": "x"},
        {"tool": "srv:write", "arguments": {"path": "/a"}, "error": "Permission denied: /a"},
    ]
    assert _post(url, request(agent_turn(trace_id(0), None, calls))).status_code == 200
    mapped = tool_id_for("srv:write")
    eventually(lambda: mapped in sc.hidden_tools() | {c.sequence[0] for c in sc.constraints()})
    assert _metric(url, "sidecar_otlp_tool_names_renamed_total") == 2
    assert _metric(url, 'sidecar_otlp_spans_total{outcome="dropped"}') == 1
    reason = 'sidecar_otlp_dropped_spans_total{reason="unusable tool name (no letter or digit)"}'
    assert _metric(url, reason) == 1


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SIDECAR_SESSION_IDLE_S", "0"),
        ("SIDECAR_SESSION_IDLE_S", "soon"),
        ("SIDECAR_OTLP_MAX_REQUEST_BYTES", "12"),
        ("SIDECAR_OTLP_MAX_MEMORY_BYTES", "2048"),  # less than one request
    ],
)
def test_bad_intake_settings_fail_loudly(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"(?i){variable.removeprefix('SIDECAR_')}"):
        Settings.load(env={variable: value})


def test_intake_settings_are_read() -> None:
    env = {"SIDECAR_SESSION_IDLE_S": "12.5", "SIDECAR_OTLP_MAX_REQUEST_BYTES": "4096"}
    s = Settings.load(env=env)
    assert (s.session_idle_s, s.otlp_max_request_bytes) == (12.5, 4096)
    assert s.otlp_max_memory_bytes == 256 * 1_048_576


def test_a_large_request_is_prepared_in_a_worker_process(served: tuple[str, Sidecar]) -> None:
    """Over a megabyte inflated, a body is parsed and redacted in another process: what
    comes back is the same evidence, and a refusal is the same answer."""
    url, sc = served
    page = "<p>" + "x" * 600_000 + "</p>"
    calls = [
        {"tool": "fetch_page", "arguments": {"url": "/a", "api_key": "k" * 20}, "result": page},
        {"tool": "fetch_page", "arguments": {"url": "/b"}, "result": page},
        {"tool": "extract", "arguments": {"page": "/b"}, "error": "Error: payload too large"},
    ]
    assert _post(url, request(agent_turn(trace_id(0), "conv-big", calls))).status_code == 200
    assert _metric(url, "sidecar_otlp_large_requests_total") == 1
    records: list[dict[str, Any]] = []

    def archived() -> bool:
        # the learned condition may name its record a moment before the record is written
        pointers = [v.pointer for v in sc.constraints() if v.sequence == ("extract",)]
        with contextlib.suppress(NotFound):
            records.extend(sc.audit(p) for p in pointers if p)
        return bool(records)

    eventually(archived)
    record = records[0]
    fetched = record["steps"][0]
    assert fetched["arguments"] == {"url": "/a", "api_key": "[REDACTED]"}
    assert len(fetched["output"]) < 5_000  # cut in the worker, before it was read
    deep = [
        {"tool": "fetch_page", "arguments": {"url": "/c"}, "result": page * 2},
        {"tool": "t", "arguments": {"z": json.loads("[" * 40 + "]" * 40)}, "error": "E"},
    ]
    answer = _post(url, request(agent_turn(trace_id(1), None, deep)))
    assert answer.status_code == 400 and "nested" in answer.json()["message"]
    assert _metric(url, "sidecar_otlp_large_requests_total") == 2
    assert _metric(url, 'sidecar_otlp_requests_total{outcome="malformed"}') == 1


LOOK_ALIKES = (
    "exchange\u200b",  # a zero-width space
    "\uff45\uff58\uff43\uff48\uff41\uff4e\uff47\uff45",  # fullwidth
    "\u0435xchange",  # a Cyrillic e
    "exchange/",
    "srv:exchange",
)


def test_look_alike_tool_names_in_spans_never_teach_the_real_tool(
    served: tuple[str, Sidecar],
) -> None:
    """Before: the intake folded each of these names onto ``exchange``, so failing spans
    under look-alike names made a learned block of the real tool for every agent.  Now
    each is a tool of its own, counted as renamed, and the real tool is untouched."""
    url, sc = served
    sc.report_many([_delivered(n) for n in range(10)])  # the background successes
    n = 0
    for name in LOOK_ALIKES:
        for order in ("#W1", "#W2", "#W5"):
            calls = [
                {"tool": "get_order", "arguments": {"order_id": order},
                 "result": {"order_id": order, "status": "pending"}},
                {"tool": name, "arguments": {"order_id": order, "item": "hat"},
                 "error": "Non-delivered order cannot be exchanged"},
            ]  # fmt: skip
            assert _post(url, request(agent_turn(trace_id(n), None, calls))).status_code == 200
            n += 1
    mapped = {tool_id_for(name) for name in LOOK_ALIKES}
    assert len(mapped) == len(LOOK_ALIKES) and "exchange" not in mapped
    eventually(lambda: mapped <= {c.sequence[-1] for c in sc.constraints() if c.kind == "call"})
    assert _metric(url, "sidecar_otlp_tool_names_renamed_total") == len(LOOK_ALIKES) * 3
    steps = [{"tool": "get_order", "arguments": {"order_id": "#W7"},
              "output": {"order_id": "#W7", "status": "pending"}}]  # fmt: skip
    assert sc.check_call(steps, "exchange", {"order_id": "#W7", "item": "hat"}).decision == "allow"
    assert all("exchange" not in c.sequence for c in sc.constraints(include_lifted=True))


def _delivered(n: int) -> dict[str, Any]:
    order = f"#D{100 + n}"
    return {
        "steps": [
            {"tool": "get_order", "arguments": {"order_id": order},
             "output": {"order_id": order, "status": "delivered"}},
            {"tool": "exchange", "arguments": {"order_id": order, "item": "hat"},
             "output": {"order_id": order, "status": "exchange requested"}},
        ],
        "outcome": "completed",
        "session_id": f"delivered-{n}",
    }  # fmt: skip
