"""Many writer processes on one Delta table on S3, every request to the store passing a
proxy that delays some, answers some with 503 before they reach the store, and drops
the reply of some after the store took them (the client sees a reset and retries): at
every step of a commit.  Every key a writer was told is stored must be in the table
exactly once (``python -m benchmarks.run delta --stress`` runs it longer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.delta_stress import check, run_writers
from benchmarks.s3server import FaultSpec, S3Server
from cold_store import ColdStore, StoreUnavailable
from tests.cold_store.backends import Backend, committed_rows
from tests.cold_store.helpers import chain_row

FAULTS = {
    # every step of a commit
    # a delay on half the requests: with a fifth, a request went through unharmed with
    # chance 0.72, so the 16 or so log entries' puts of a run all did about once in 200
    # runs (0.72 ** 16), and one such run failed here
    "everywhere": FaultSpec(seed=11, delay=0.5, max_delay_s=0.05, fail=0.05, lose_reply=0.05),
    # the log entry's put, where an attempt's outcome is left open
    "log entry": FaultSpec(seed=12, fail=0.2, lose_reply=0.3, only="log write"),
}


@pytest.fixture(scope="module", params=list(FAULTS))
def faulty_server(request: pytest.FixtureRequest) -> Iterator[S3Server]:
    server = S3Server(faults=FAULTS[request.param])
    yield server
    server.close()


@pytest.mark.integration
def test_writers_meeting_faults_at_every_step_lose_nothing_and_store_nothing_twice(
    faulty_server: S3Server,
) -> None:
    workers, appends, size = 4, 4, 2
    location = f"s3://{faulty_server.new_bucket()}/cold"
    faulty_server.set_faults(False)
    ColdStore(location, s3=faulty_server.options()).close()  # the tables exist
    faulty_server.set_faults(True)

    outputs = run_writers(location, faulty_server.endpoint, workers, appends, size, seed=1)

    faulty_server.set_faults(False)
    faults = faulty_server.fault_counts()
    store = ColdStore(location, s3=faulty_server.options())
    try:
        backend = Backend("s3", location, faulty_server.options(), faulty_server)
        report = check(store, committed_rows(backend, "chains"), outputs, workers, appends, size)
    finally:
        store.close()
    assert report.lost == [] and report.written_twice == [] and report.bad_reads == []
    assert report.gave_up == [] and report.unexpected == []
    assert report.rows == report.stored == report.expected  # no copy of any row
    # the faults reached the log entry's put (and, everywhere, the data file's upload)
    assert any(k.startswith("log write") for k in faults), faults
    if faulty_server.faults is FAULTS["everywhere"]:
        assert any(k.startswith("data write") for k in faults), faults


@pytest.mark.integration
def test_a_store_failing_every_data_read_gets_no_healthy_file_quarantined() -> None:
    """The store answers for the file (it is there, at its committed size) but every GET
    of its bytes fails: the store is unavailable, the file is not damaged."""
    server = S3Server(faults=FaultSpec(fail=1.0, only="data read"))
    try:
        location = f"s3://{server.new_bucket()}/cold"
        server.set_faults(False)
        store = ColdStore(location, s3=server.options(max_retries=0))
        store.chains.append([chain_row("c1")])
        reader = ColdStore(location, s3=server.options(max_retries=0), writable=False)
        server.set_faults(True)
        try:
            with pytest.raises(StoreUnavailable):
                reader.chains.get("c1")
            with pytest.raises(StoreUnavailable):
                store.chains.get("c1")
            assert store.quarantined() == [] and reader.quarantined() == []
            server.set_faults(False)
            assert reader.chains.get("c1") == store.chains.get("c1") == chain_row("c1")
        finally:
            store.close()
            reader.close()
    finally:
        server.close()
