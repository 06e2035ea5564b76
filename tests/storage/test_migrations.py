"""Schema migrations of a state written by an earlier sidecar: applied once, in order,
nothing lost."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.memory import FailureMemory, Session, Step
from tests.sidecar.test_call_memory import REFUSAL

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
    assert db.execute("SELECT MAX(version) FROM schema_version").fetchone() == (2,)
    db.close()
