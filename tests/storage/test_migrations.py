"""Schema migrations of a state written by an earlier sidecar: applied once, in order,
nothing lost."""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from pathlib import Path

import numpy as np

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.memory import FailureMemory, Session, Step
from tests.support.shop import REFUSAL

OLD_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE schema_version (
    version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL NOT NULL
);
CREATE TABLE call_memory (
    id INTEGER PRIMARY KEY CHECK (id = 1), snapshot TEXT NOT NULL, revision INTEGER NOT NULL
);
CREATE TABLE memory_evidence (
    evidence_key TEXT PRIMARY KEY, source TEXT NOT NULL, kind TEXT NOT NULL,
    received_at REAL NOT NULL, payload TEXT NOT NULL
);
"""


def session(n: int, status: str, error: str | None) -> Session:
    order = f"#A{1000 + n}"
    return Session(
        f"s{n}",
        (
            Step(
                "get_order", {"order_id": order}, json.dumps({"order_id": order, "status": status})
            ),
            Step(
                "exchange_items",
                {"order_id": order, "item_ids": ["i1"]},
                None if error else "ok",
                error,
            ),
        ),
        "abandoned" if error else "completed",
    )


def test_the_evidence_of_a_version_1_state_is_numbered_and_learned_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    sessions = [session(n, "delivered", None) for n in range(20)]
    sessions += [session(100 + n, "pending", REFUSAL) for n in range(3)]
    learner = FailureMemory()
    db = sqlite3.connect(home / "state.sqlite")
    db.executescript(OLD_TABLES)
    db.execute("INSERT INTO schema_version VALUES (1, 'sightings', ?)", (time.time(),))
    for s in sessions:
        derived = learner.derive(s)
        db.execute(
            "INSERT INTO memory_evidence VALUES (?, 'local', 'session', ?, ?)",
            (s.session_id, time.time(), json.dumps(derived)),
        )
    db.execute("INSERT INTO call_memory VALUES (1, '{}', 7)")
    db.commit()
    db.close()
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        steps = [{"tool": "get_order", "arguments": {"order_id": "#C1"},
                  "output": {"order_id": "#C1", "status": "pending"}, "error": None}]  # fmt: skip
        check = sc.check_call(steps, "exchange_items", {"order_id": "#C1", "item_ids": ["i1"]})
        assert check.decision == "block"
    db = sqlite3.connect(home / "state.sqlite")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "memory_evidence" not in tables and "call_memory" not in tables
    assert db.execute("SELECT COUNT(*), MIN(seq), MAX(seq) FROM memory_log").fetchone() == (
        23,
        1,
        23,
    )
    assert db.execute("SELECT MAX(version) FROM schema_version").fetchone() == (3,)
    db.close()


def test_usage_requests_of_a_version_2_state_become_counts(tmp_path: Path) -> None:
    """A version 2 state kept one usage row per session: its sessions of one request
    become one row counting them, and lookups read the same usage."""
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home):
        pass
    db = sqlite3.connect(home / "state.sqlite")
    db.execute("DELETE FROM schema_version WHERE version = 3")
    db.execute("DROP TABLE usage_request_counts")
    db.execute(
        "CREATE TABLE usage_requests (tool_id TEXT NOT NULL, source TEXT NOT NULL, "
        "session_key TEXT NOT NULL, request_key TEXT NOT NULL, vector TEXT NOT NULL, "
        "outcome TEXT NOT NULL, seen_at REAL NOT NULL, rev INTEGER NOT NULL, "
        "PRIMARY KEY (tool_id, source, session_key))"
    )
    vector = base64.b64encode(np.ones(8, dtype="<f4").tobytes()).decode()
    db.executemany(
        "INSERT INTO usage_requests VALUES (?, 'alice', ?, ?, ?, 'completed', ?, 1)",
        [("t", f"src:alice/session:s{n}", f"k{n % 2}", vector, float(n)) for n in range(5)]
        + [("u", "src:alice/session:s9", "k0", vector, 9.0)],
    )
    db.commit()
    db.close()
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        rows, _ = sc.state.requests.since(0)
        assert sorted((r.tool_id, r.key, r.sessions, r.at) for r in rows) == [
            ("t", "k0", 3, 4.0),
            ("t", "k1", 2, 3.0),
            ("u", "k0", 1, 9.0),
        ]
    db = sqlite3.connect(home / "state.sqlite")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "usage_requests" not in tables
    db.close()
