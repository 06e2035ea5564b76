"""The hot index loses its files (``chroma/`` deleted) or its records (the collection
emptied): never served as if no tool were active; the owner rebuilds it from the
state's records."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from indexes import HashingEmbedder
from sidecar import Sidecar
from tests.faults.harness import Server, build_world, cli, no_traceback
from tests.faults.invariants import check_home, check_server

EMPTY = """
import sys
from indexes import ActiveIndex, HashingEmbedder
index = ActiveIndex.persistent(sys.argv[1], HashingEmbedder())
print(len(index.delete(sys.argv[2:])), index.count())
"""


def search_ids(home: Path, query: str) -> tuple[int, list[str], str]:
    proc = cli(home, "search", query, "-k", "5", "--json")
    no_traceback(proc)
    hits = [h["tool_id"] for h in json.loads(proc.stdout)["hits"]] if proc.returncode == 0 else []
    return proc.returncode, hits, proc.stderr


def test_a_deleted_or_emptied_hot_index(tmp_path: Path) -> None:
    """Injects, in turn: ``chroma/`` deleted under a running server; ``chroma/``
    deleted while no process owns the home; every record deleted from the collection
    (its files intact) while no process owns the home.

    Under the running server, lookups answer from the files it holds open and
    ``/readyz`` is 503 naming the hot index.  A reader (a CLI lookup with no server)
    exits 7 ``index_unavailable`` saying the index is missing or lacks N tools: never an
    empty answer, and it creates nothing.  Listing and checks keep working.  The owner
    rebuilds the index from the records on its next open (a server start, or
    ``sidecar evict --recover``): lookups find the tools again, evicted tools stay cold,
    and the invariants hold."""
    home = tmp_path / "home"
    world = build_world(home, n_tools=20, chains=3)
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        evicted = {d.tool_id for d in sc.evict().evicted}
    assert evicted == {f"t{i:03d}" for i in range(6)}
    active = set(world["tools"]) - evicted
    chroma = home / "chroma"

    with Server(home) as server:
        # ready: the server opened its hot index (it opens it on first use, and a server
        # that is only alive may not have yet: then the deleted folder is all it finds)
        assert server.get("/readyz").status_code == 200
        shutil.rmtree(chroma)
        found = server.post("/v1/search", {"query": "tool number t015", "k": 5})
        assert found.status_code == 200 and found.json()["hits"][0]["tool_id"] == "t015"
        ready = server.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert "deleted" in ready.json()["checks"]["hot_index"], ready.text
        server.stop()

    code, hits, err = search_ids(home, "tool number t015")
    assert code == 7 and hits == [], err
    assert "index_unavailable" in err and "is missing" in err, err
    assert not chroma.exists(), "a reader created a store"
    listed = cli(home, "tools", "list", "--json")
    assert {t["tool_id"] for t in json.loads(listed.stdout)["tools"]} == active
    assert cli(home, "check", "t000,t001,t019").returncode == 3

    with Server(home) as server:  # the owner's open rebuilds it
        assert server.get("/readyz").status_code == 200
        hits = server.post("/v1/search", {"query": "tool number t015", "k": 5}).json()["hits"]
        assert hits[0]["tool_id"] == "t015"
        check_server(server)
        server.stop()

    # emptied, its files intact (in a process of its own: this one's Chroma client still
    # points at the files deleted above)
    emptied = subprocess.run(
        [sys.executable, "-c", EMPTY, str(chroma), *sorted(active)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert emptied.returncode == 0 and emptied.stdout.split() == ["14", "0"], emptied.stderr
    code, hits, err = search_ids(home, "tool number t015")
    assert code == 7 and hits == [], err
    assert f"lacks {len(active)} of the {len(active)} active tool(s)" in err, err
    recovered = cli(home, "evict", "--recover")
    assert recovered.returncode == 0, recovered.stderr
    code, hits, err = search_ids(home, "tool number t015")
    assert code == 0 and hits[0] == "t015", err
    check_home(home, world["tools"], [p.rsplit("/", 1)[1] for p in world["pointers"]])
