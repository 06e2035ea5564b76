"""Three ``sidecar serve`` replicas sharing one memory: one PostgreSQL database, one
Chroma server, one S3 bucket of Delta tables (:class:`benchmarks.cluster.Cluster`).

What one replica learns, every other one knows on its next request; concurrent work
across replicas loses nothing; a replica killed mid-move is finished by another, one
killed mid-batch loses nothing and the batch sent again counts once; a
database or an object store that goes away makes the replicas fail visibly (a check
never answers from a memory it could not read) and costs nothing once it is back.

One cluster serves the whole module (starting one costs seconds); each test works on
tools of its own prefix, and :func:`check_cluster` asserts the invariants over
everything the cluster holds, whatever the tests before left there.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.cluster import Cluster
from sidecar import Tool
from sidecar.errors import Busy, SidecarError, StateUnavailable, StorageError
from sidecar.model import CredentialRef
from sidecar.shells.api.serve import MAINTAIN_EVERY_S
from sidecar.shells.client import RemoteSidecar
from tests.faults.invariants import assert_not_served
from tests.sidecar.helpers import abandoned, completed
from tests.support.shop import (
    SUCCESSES,
    exchange,
    failing_session,
    good_session,
    lookup,
)

pytestmark = pytest.mark.integration

REPLICAS = 3
ADDED: set[str] = set()
"""Every tool added to the module's cluster."""
ARCHIVED: set[str] = set()
"""Every chain a report to it was acknowledged as archived."""
AUDITED: set[str] = set()
"""Cold pointers some replica has resolved already."""
ORDER_TOOLS = [
    Tool("get_order", "look up an order by id"),
    Tool("exchange_items", "exchange delivered items of an order"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # eviction after one dead end: the moves are under test here, not the policy
    with Cluster(REPLICAS, cold="s3", env={"SIDECAR_EVICT_MIN_CHAINS": "1"}) as c:
        ADDED.clear()
        ARCHIVED.clear()
        AUDITED.clear()
        yield c


def add(cluster: Cluster, tools: list[Tool], via: int = 0) -> None:
    cluster.client(via).add_tools(tools)
    ADDED.update(t.tool_id for t in tools)


def world(cluster: Cluster, prefix: str, chains: int = 4, via: int = 0) -> list[str]:
    """``2 * chains`` prefix tools (credentials shared in pairs) and a terminal one;
    each pair's abandoned chain makes both evictable.  Returns the prefix tools."""
    tools = [
        Tool(f"{prefix}{i:02d}", f"tool number {prefix}{i:02d} handles step {i}",
             credentials=(CredentialRef(f"env:{prefix}C{i // 2}"),))
        for i in range(2 * chains)
    ]  # fmt: skip
    terminal = Tool(f"{prefix}end", f"tool number {prefix}end finishes the job")
    add(cluster, [*tools, terminal], via)
    sc = cluster.client(via)
    for i in range(chains):
        got = sc.report(
            abandoned(
                [tools[2 * i].tool_id, tools[2 * i + 1].tool_id, terminal.tool_id],
                f"HTTP 400 {prefix} #{i}",
                session_id=f"{prefix}-dead-{i}",
            )
        )
        assert got.status == "archived", got
        ARCHIVED.add(got.chain_id)
    return [t.tool_id for t in tools]


def teach(sc: RemoteSidecar) -> None:
    """Exchanges of delivered orders succeed; three sessions exchanging pending ones are
    refused: enough independent evidence for a block (sent again, nothing counts
    twice)."""
    sc.report_many([good_session(n) for n in range(SUCCESSES)])
    for result in sc.report_many([failing_session(n) for n in range(3)]):
        if result.chain_id:
            ARCHIVED.add(result.chain_id)


def finish_moves(cluster: Cluster, via: int = 0) -> None:
    """Recover through replica ``via`` until no move is unfinished: a move another
    replica left unfinished is finished by the first that takes the eviction lock,
    which may be another replica's own retry loop (then this one is told Busy and
    asks again once that one is done)."""
    deadline = time.monotonic() + 120
    while cluster.sql("SELECT 1 FROM moves WHERE status != 'done'"):
        assert time.monotonic() < deadline, "unfinished moves nobody finishes"
        with contextlib.suppress(Busy):
            cluster.client(via).recover()
        time.sleep(0.2)


# ---- the invariants ------------------------------------------------------------------
def published(cluster: Cluster, via: int = 0) -> None:
    """Wait until no acknowledged record waits in the state: beside a Delta archive a
    report is acknowledged once durable in the state, and the group publisher appends
    its record soon after (what the archive holds is read past the sidecar)."""
    deadline = time.monotonic() + 120
    while cluster.client(via).status().pending_records:
        assert time.monotonic() < deadline, "acknowledged records never published"
        time.sleep(0.2)


def delta_keys(cluster: Cluster, table: str, key: str) -> list[str]:
    """Every key of every row the Delta table's current version names, read past the
    sidecar (copies included: a row written twice shows twice)."""
    from deltalake import DeltaTable

    assert cluster.s3 is not None and cluster.cold_url is not None
    options = cluster.s3.options().storage_options()
    dt = DeltaTable(f"{cluster.cold_url}/{table}", storage_options=options)
    return [str(k) for k in dt.to_pyarrow_table(columns=[key]).column(key).to_pylist()]


def hot_index_ids(cluster: Cluster) -> set[str]:
    """The ids in the shared Chroma collection itself, through Chroma's REST API (a
    client of our own, closed here: chromadb's keeps its sockets open)."""
    import httpx

    base = f"{cluster.chroma_url}/api/v2/tenants/default_tenant/databases/default_database"
    with httpx.Client(base_url=base, timeout=60) as http:
        found = http.get(f"/collections/{cluster.collection}")
        found.raise_for_status()
        got = http.post(f"/collections/{found.json()['id']}/get", json={"include": []})
        got.raise_for_status()
        return set(got.json()["ids"])


def check_cluster(cluster: Cluster) -> dict[str, Any]:
    """Every invariant of the fault suite, over the shared stores and every replica:
    no unfinished move; every tool ever added active (state and Chroma agreeing) xor
    evicted (its cold record readable from every replica); no cold row twice; every
    acknowledged chain compiled and audited by every replica; one open mandate per
    released credential; one archive digest; no evicted tool served by any replica."""
    clients = cluster.clients
    finish_moves(cluster)
    assert cluster.sql("SELECT move_id, status FROM moves WHERE status != 'done'") == []

    hot = {t for (t,) in cluster.sql("SELECT tool_id FROM hot_tools")}
    evicted = dict(cluster.sql("SELECT tool_id, move_id FROM evicted_tools"))
    added = ADDED
    assert not hot & set(evicted), hot & set(evicted)
    assert hot | set(evicted) == added, added ^ (hot | set(evicted))
    assert hot_index_ids(cluster) == hot
    for sc in clients:
        assert {t.tool_id for t in sc.list_tools()} == hot

    published(cluster)
    chains = delta_keys(cluster, "chains", "chain_id")
    tools = delta_keys(cluster, "tools", "record_id")
    for table, keys in (("chains", chains), ("tools", tools)):
        twice = [k for k, n in Counter(keys).items() if n > 1]
        assert not twice, f"{table}: rows written twice: {twice}"
    assert set(evicted.values()) <= set(tools)

    compiled = {c for (c,) in cluster.sql("SELECT chain_id FROM constraints")}
    archived = ARCHIVED
    assert archived <= compiled, archived - compiled
    assert archived <= set(chains), archived - set(chains)
    # every record is audited once (by one replica, in turn): records never change,
    # and auditing all of them at every check would cost the module minutes
    pointers = sorted(
        [(f"cold://chains/{cid}", cid) for cid in archived]
        + [(f"cold://tools/{move}", tool) for tool, move in evicted.items()]
    )
    for n, (pointer, name) in enumerate(p for p in pointers if p[0] not in AUDITED):
        record = clients[n % REPLICAS].audit(pointer)
        assert name == record.get("chain_id", record.get("tool_id")), (pointer, record)
        AUDITED.add(pointer)

    mandates = clients[1].mandates()
    assert len({m.idempotency_key for m in mandates}) == len(mandates)
    open_refs = Counter(m.ref for m in mandates if m.status != "cancelled")
    assert all(n == 1 for n in open_refs.values()), open_refs
    in_use = {r for (r,) in cluster.sql("SELECT ref FROM tool_credentials")}
    released = {r for (r,) in cluster.sql("SELECT ref FROM released_credentials")} - in_use
    assert released <= set(open_refs), released - set(open_refs)

    digests = {sc.digest() for sc in clients}
    assert len(digests) == 1, digests
    (digest,) = digests
    assert digest.chains == len(chains) and digest.unreadable_chains == 0

    for sc in clients:
        assert_not_served(sc, set(evicted))
    # a replica that met a store down stays degraded until its own retry loop (every
    # MAINTAIN_EVERY_S) finds nothing left to finish, even once another replica did
    # the work: ready again by then
    for sc in clients:
        deadline = time.monotonic() + 6 * MAINTAIN_EVERY_S
        while not (health := sc.health()).ready:
            assert time.monotonic() < deadline, health
            time.sleep(0.5)
    return {"hot": hot, "evicted": evicted, "digest": digest}


# ---- (a) what one replica learns, the next request to any other knows ---------------
def test_a_failure_learned_on_one_replica_blocks_on_the_next_request_to_another(
    cluster: Cluster,
) -> None:
    a, b, c = cluster.clients
    add(cluster, ORDER_TOOLS, via=0)
    args = {"order_id": "#C3000"}
    pending = [lookup("#C3000", "pending")]
    assert b.check_call(pending, "exchange_items", args).decision == "allow"
    teach(a)
    # no wait: revisions are read from the database on every check
    blocked = b.check_call(pending, "exchange_items", args)
    assert blocked.decision == "block", blocked
    assert c.check_call(pending, "exchange_items", args).decision == "block"
    assert c.check_call([lookup("#C3000", "delivered")], "exchange_items", args).decision == (
        "allow"
    )

    # a fatal sequence reported to C is enforced by A at once
    prefix = world(cluster, "fa", chains=1, via=2)
    assert not a.check([*prefix, "faend"]).safe
    # a tool added on B is found by C's next lookup; one evicted on A is served by
    # nobody on the next request
    add(cluster, [Tool("fa_new", "tool number fa_new converts currencies")], via=1)
    assert "fa_new" in {h.tool_id for h in c.search("converts currencies", k=3).hits}
    report = a.evict()
    assert set(prefix) <= {d.tool_id for d in report.evicted}
    for sc in (b, c):
        found = {h.tool_id for h in sc.search("tool number fa00", k=50).hits}
        assert not found & set(prefix), found & set(prefix)
        assert not {t.tool_id for t in sc.list_tools()} & set(prefix)
    # a restore on B is served by C's next lookup; a lift on C is A's next check's
    b.restore(prefix[0], reason="needed again")
    assert prefix[0] in {h.tool_id for h in c.search("tool number fa00", k=50).hits}
    (chain,) = [x for x in a.constraints() if x.sequence[:2] == tuple(prefix)]
    c.lift(chain.chain_id, reason="the terminal tool was fixed")
    assert a.check([*prefix, "faend"]).safe
    b.reinstate(chain.chain_id, reason="it was not")
    assert not c.check([*prefix, "faend"]).safe
    check_cluster(cluster)


# ---- (b) concurrent work across replicas ---------------------------------------------
def test_concurrent_reports_evictions_lookups_and_checks_lose_nothing(cluster: Cluster) -> None:
    prefix = "cb"
    pairs = 12
    tools = [
        Tool(f"{prefix}{i:02d}", f"tool number {prefix}{i:02d} handles step {i}",
             credentials=(CredentialRef(f"env:{prefix}C{i // 2}"),))
        for i in range(2 * pairs)
    ]  # fmt: skip
    add(cluster, [*tools, Tool(f"{prefix}end", "tool number cbend finishes")])
    threads, rounds = 4, 6
    acknowledged: list[tuple[str, str]] = []  # (session, chain id)
    completed_sessions: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(j: int) -> None:
        # a client of its own per replica: nothing shared between the threads
        own = [RemoteSidecar(url, cluster.token, timeout=120) for url in cluster.urls]
        try:
            for k in range(rounds):
                sc = own[(j + k) % REPLICAS]
                m = (j * rounds + k) % pairs
                session = f"{prefix}-{j}-{k}"
                dead = [tools[2 * m].tool_id, tools[2 * m + 1].tool_id, f"{prefix}end"]
                got = sc.report(abandoned(dead, f"HTTP 400 {session}", session_id=session))
                assert got.status == "archived", got
                with lock:
                    acknowledged.append((session, got.chain_id or ""))
                if k % 3 == 1:  # a viable run through one tool of another pair
                    ok = f"{prefix}-ok-{j}-{k}"
                    used = tools[(2 * m + 5) % (2 * pairs)].tool_id
                    sc.report({**completed([used, f"{prefix}end"]), "session_id": ok})
                    with lock:
                        completed_sessions.append(ok)
                own[(j + k + 1) % REPLICAS].search(f"tool number {prefix}{m:02d}", k=5)
                assert not own[(j + k + 2) % REPLICAS].check(dead).safe
                if k % 2 == j % 2:
                    # Busy: another replica's eviction holds the lock; they take turns
                    with contextlib.suppress(Busy):
                        own[(j + k + 1) % REPLICAS].evict()
        except BaseException as exc:
            errors.append(exc)
        finally:
            for c in own:
                c.close()

    workers = [threading.Thread(target=work, args=(j,)) for j in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    assert len(acknowledged) == threads * rounds
    chain_ids = {cid for _, cid in acknowledged}
    assert "" not in chain_ids
    ARCHIVED.update(chain_ids)
    # no lost report: every session is counted once, against its own chain
    rows = cluster.sql(
        "SELECT chain_id, session_key FROM chain_sessions WHERE chain_id = ANY(%s)",
        (list(chain_ids),),
    )
    for session, cid in acknowledged:
        assert any(k.endswith(session) and c == cid for c, k in rows), (session, cid)
    assert len(rows) == len(acknowledged), rows
    usage = [k for (k,) in cluster.sql("SELECT session_key FROM usage_evidence")]
    for session in completed_sessions:
        assert any(session in k for k in usage), session
    cluster.clients[2].evict()  # whatever the racing runs left
    check_cluster(cluster)


# ---- (c) a replica killed mid-move ---------------------------------------------------
@pytest.mark.parametrize("step", ["after_intent", "after_cold", "after_hot_delete"])
def test_a_replica_killed_mid_move_is_finished_by_another(cluster: Cluster, step: str) -> None:
    prefix = f"k{step.split('_')[1][:3]}"
    prefix_tools = world(cluster, prefix, chains=3)
    victim = 2
    cluster.kill(victim)  # to restart it with the step to die at
    cluster.start(victim, env={"SIDECAR_CRASH_AT": step})
    try:
        with pytest.raises(SidecarError):  # the connection drops: Unreachable
            cluster.client(victim).evict()
        assert cluster.wait_exit(victim) == -signal.SIGKILL  # by itself, at that step
        # it died mid-move: the journal holds the moves it began (whether another
        # replica's retry loop has already finished them or not)
        begun = cluster.sql("SELECT tool_id FROM moves WHERE tool_id = ANY(%s)", (prefix_tools,))
        assert {t for (t,) in begun} == set(prefix_tools), begun
        if step == "after_cold":
            # nobody asks: the other replicas' retry loops find the moves the dead one
            # left and the first to take the lock finishes them
            deadline = time.monotonic() + 6 * MAINTAIN_EVERY_S
            while cluster.sql("SELECT 1 FROM moves WHERE status != 'done'"):
                assert time.monotonic() < deadline, "no replica resumed the moves"
                time.sleep(0.5)
        # another replica takes the lock the dead one's session no longer holds
        finish_moves(cluster, via=0)
        evicted = dict(cluster.sql("SELECT tool_id, move_id FROM evicted_tools"))
        assert set(prefix_tools) <= set(evicted)
    finally:
        cluster.start(victim, env={})
    check_cluster(cluster)


def test_a_replica_killed_mid_batch_loses_nothing_and_the_batch_sent_again_counts_once(
    cluster: Cluster,
) -> None:
    """A replica SIGKILLed in the middle of a batch of sessions, once the batch's state
    transaction has committed and before its chains reach the archive: the client sees
    the connection drop and sends the whole batch again to another replica; afterwards
    every session is counted exactly once, every chain archived once, and the dead
    replica, restarted, finishes nothing twice."""
    add(cluster, ORDER_TOOLS)
    refusal = "Error: the order is locked for review"
    reports = []
    for n in range(150):
        order = f"#M{5000 + n}"
        steps = [lookup(order, "pending"), exchange(order, refusal)]
        reports.append({"steps": steps, "outcome": "abandoned", "session_id": f"mb-fail-{n}"})
        reports.append({**good_session(5000 + n), "session_id": f"mb-ok-{n}"})
    victim = 1
    cluster.kill(victim)  # to restart it with the point to die at
    cluster.start(victim, env={"SIDECAR_CRASH_AT": "after_intake_staged"})

    def counted(table: str, like: str) -> int:
        rows = cluster.sql(
            f"SELECT COUNT(DISTINCT session_key) FROM {table} WHERE session_key LIKE %s",
            (like,),
        )
        return int(rows[0][0])

    try:
        with pytest.raises(SidecarError):  # the connection drops: Unreachable
            cluster.client(victim).report_many(reports)
        assert cluster.wait_exit(victim) == -signal.SIGKILL  # by itself, at that point
        results = cluster.client(0).report_many(reports)  # the client sends it all again
        assert Counter(r.status for r in results) == {"archived": 150, "recorded": 150}
        ARCHIVED.update(r.chain_id for r in results if r.status == "archived" and r.chain_id)
    finally:
        cluster.start(victim, env={})  # it takes up what it had staged: nothing twice
    assert counted("chain_sessions", "%mb-fail-%") == 150
    assert counted("usage_evidence", "%mb-ok-%") == 150

    # the memory counted each session once: the same batch a third time changes nothing
    def learned(sc: RemoteSidecar) -> list[tuple[str, int, int]]:
        views = sc.constraints()
        return sorted(
            (v.chain_id, v.sessions, v.support)
            for v in views
            if "locked for review" in v.expected_failure
        )

    before = learned(cluster.client(0))
    assert before and all(sessions <= 150 for _, sessions, _ in before), before
    cluster.client(2).report_many(reports)
    assert [learned(sc) for sc in cluster.clients] == [before] * REPLICAS
    check_cluster(cluster)


# ---- (d) the database goes away ------------------------------------------------------
def files_under(path: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def test_without_the_database_every_replica_fails_closed_and_recovers(cluster: Cluster) -> None:
    add(cluster, ORDER_TOOLS)
    clients = cluster.clients
    teach(clients[0])
    args = {"order_id": "#D1"}
    pending = [lookup("#D1", "pending")]
    body = {"steps": pending, "next": {"tool": "exchange_items", "arguments": args}}
    homes = {r.index: files_under(r.home) for r in cluster.replicas}
    before = cluster.sql("SELECT count(*) FROM chain_sessions")[0][0]
    cluster.stop_database()
    try:
        for sc in clients:
            # never an answer from a memory it could not read
            with pytest.raises(StateUnavailable):
                sc.check_call(pending, "exchange_items", args)
            auth = {"Authorization": f"Bearer {cluster.token}"}
            raw = httpx.post(f"{sc.url}/v1/check", json=body, headers=auth, timeout=60)
            assert raw.status_code == 503, raw.text
            assert raw.json()["error"]["code"] == "state_unavailable"
            with pytest.raises(StorageError):
                sc.check(["get_order", "exchange_items"])
            with pytest.raises(StorageError):
                sc.search("look up an order", k=3)
            with pytest.raises(StorageError):
                sc.report(abandoned(["dd1", "dd2", "dd3"], "HTTP 400 down", session_id="dd"))
            # /readyz: not ready, whether it can say which check failed or only why not
            with contextlib.suppress(StateUnavailable):
                assert not sc.health().ready
        # nothing was kept aside on a replica's disk meanwhile
        assert {r.index: files_under(r.home) for r in cluster.replicas} == homes
    finally:
        cluster.start_database()
    # the next request reconnects
    for sc in clients:
        assert sc.check_call(pending, "exchange_items", args).decision == "block"
    assert cluster.sql("SELECT count(*) FROM chain_sessions")[0][0] == before
    world(cluster, "dd", chains=1, via=1)
    check_cluster(cluster)


# ---- (e) the object store goes away during an eviction --------------------------------
def test_without_the_object_store_an_eviction_completes_and_its_records_wait(
    cluster: Cluster,
) -> None:
    """Beside a shared archive a move acknowledges its records in the state (published
    in group commits): with the object store away an eviction still completes, nobody
    serves the tools it moved, checks still hold, the state keeps what waits (health
    says the archive is away), and once the store is back every record reaches it, once."""
    prefix_tools = world(cluster, "es", chains=2)
    cluster.stop_s3()
    try:
        report = cluster.clients[1].evict()
        assert set(prefix_tools) <= {d.tool_id for d in report.evicted}, report
        moving = cluster.sql("SELECT status FROM moves WHERE tool_id = ANY(%s)", (prefix_tools,))
        assert {status for (status,) in moving} == {"done"}, moving
        for sc in cluster.clients:
            assert_not_served(sc, set(prefix_tools))
            assert not sc.check([*prefix_tools[:2], "esend"]).safe
        waiting = cluster.sql("SELECT count(*) FROM archive_pending")[0][0]
        assert waiting >= len(prefix_tools), waiting
        assert not cluster.clients[0].health().ready  # the archive is away, and it says so
    finally:
        cluster.start_s3()
    published(cluster, via=2)
    evicted = dict(cluster.sql("SELECT tool_id, move_id FROM evicted_tools"))
    assert set(prefix_tools) <= set(evicted)
    check_cluster(cluster)


def test_cluster_cleans_up_after_itself() -> None:
    """Every process a cluster started is gone once it is closed, even when the block
    raised."""
    import os

    pids: list[int] = []
    with pytest.raises(RuntimeError, match="on purpose"), Cluster(1, cold="delta") as c:
        assert c.replicas[0].proc is not None
        pids.append(c.replicas[0].proc.pid)
        assert c._chroma is not None
        pids.append(c._chroma.pid)
        root = c.root
        raise RuntimeError("on purpose")
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not root.exists()


# ---- the Chroma server goes away ------------------------------------------------------
def test_without_the_chroma_server_tool_writes_fail_and_nothing_evicted_is_served(
    cluster: Cluster,
) -> None:
    prefix_tools = world(cluster, "ch", chains=1)
    cluster.clients[0].evict()
    cluster.stop_chroma()
    try:
        for sc in cluster.clients:
            with pytest.raises(StorageError) as failed:
                sc.add_tools([Tool("ch_new", "tool number ch_new appears")])
            assert failed.value.code == "index_unavailable", failed.value
            # a lookup may still answer from the replica's in-process copy of the
            # index, which the state's revision says is current; never with a tool
            # that left it
            try:
                found = {h.tool_id for h in sc.search("tool number ch00", k=50).hits}
            except StorageError as exc:
                assert exc.code == "index_unavailable", exc
            else:
                assert not found & set(prefix_tools), found
            assert not sc.check([*prefix_tools, "chend"]).safe  # the state answers checks
    finally:
        cluster.start_chroma()
    add(cluster, [Tool("ch_new", "tool number ch_new appears")], via=2)
    assert "ch_new" in {h.tool_id for h in cluster.clients[1].search("ch_new appears").hits}
    check_cluster(cluster)
