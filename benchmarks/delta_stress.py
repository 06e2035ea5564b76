"""Many writer processes appending to one Delta table on S3 through a proxy that injects
faults into every request (``benchmarks.s3server.FaultSpec``), and the check that
nothing acknowledged was lost or stored twice.

Each writer (``python -m benchmarks.delta_stress LOCATION ENDPOINT WORKER APPENDS SIZE
SEED``) opens the store, prints ``ready``, waits for a line on stdin, then appends
``APPENDS`` batches of ``SIZE`` chains: every third one the same rows under the same
batch id in every writer (a batch replayed by processes racing each other), the others
its own, some of them several at once in one commit (:meth:`append_batches`).  A call
that fails is retried with the same batch, as the sidecar retries a report; after each
append one key it acknowledged is read back.  It prints one JSON line: the keys each call
acknowledged (written or found stored), those it reported written, the errors it met
(those raised by a call into deltalake abandoned past its deadline counted apart), and any
read of an acknowledged key that did not return the row.  Each call into deltalake has
:data:`CALL_DEADLINE_S`; a writer left with abandoned calls still hung when it is done
exits without the interpreter's teardown (a thread inside deltalake cannot be joined).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from benchmarks.cold_rows import chain_row, run_together
from benchmarks.s3server import ACCESS, REGION
from cold_store import (
    AppendResult,
    ColdStore,
    ColdStoreError,
    CommitFailed,
    CommitStateUnknown,
    RecordNotFound,
    RecordQuarantined,
    S3Options,
    StoreUnavailable,
)

TRIES = 30
"""Tries of one batch before a writer gives up on it (reported: a liveness failure)."""
RETRIED = (CommitFailed, CommitStateUnknown, StoreUnavailable)
CALL_DEADLINE_S = 30.0
"""Each writer's deadline on one call into deltalake."""
REQUEST_TIMEOUT_S = 60.0
"""Each writer's timeout on one request, above :data:`CALL_DEADLINE_S`: a reply the proxy
holds back is cut by the deadline, as a call that never returns would be."""


def batches_of(worker: int, appends: int, size: int) -> list[list[tuple[str, list[str]]]]:
    """The calls a writer makes: each a list of (batch id, keys) appended in one commit."""
    calls: list[list[tuple[str, list[str]]]] = []
    for b in range(appends):
        if b % 3 == 0:
            calls.append([(f"shared-{b}", [f"shared-{b}-{i}" for i in range(size)])])
        elif b % 3 == 1:
            calls.append([(f"w{worker}-{b}", [f"w{worker}-{b}-{i}" for i in range(size)])])
        else:  # a group commit of two batches
            calls.append(
                [
                    (f"w{worker}-{b}{part}", [f"w{worker}-{b}{part}-{i}" for i in range(size)])
                    for part in "ab"
                ]
            )
    return calls


def _open(location: str, endpoint: str) -> ColdStore:
    s3 = S3Options(
        endpoint_url=endpoint,
        region=REGION,
        access_key_id=ACCESS["aws_access_key_id"],
        secret_access_key=ACCESS["aws_secret_access_key"],
        timeout_s=REQUEST_TIMEOUT_S,
        max_retries=0,  # every fault reaches the cold store, none is retried below it
    )
    for attempt in range(TRIES):
        try:
            return ColdStore(location, s3=s3, call_deadline_s=CALL_DEADLINE_S)
        except StoreUnavailable:
            time.sleep(0.05 * (attempt + 1))
    raise RuntimeError("the store could not be opened")


def _append(store: ColdStore, call: list[tuple[str, list[str]]]) -> dict[str, AppendResult]:
    if len(call) == 1:
        ((batch, keys),) = call
        return {batch: store.chains.append([chain_row(k) for k in keys], batch=batch)}
    return store.chains.append_batches({b: [chain_row(k) for k in keys] for b, keys in call})


def _read_back(store: ColdStore, key: str, errors: Counter[str], bad: list[str]) -> None:
    for _ in range(TRIES):
        try:
            if store.chains.get(key) != chain_row(key):
                bad.append(f"{key}: another row")
            return
        except StoreUnavailable as exc:
            errors[f"read: {_kind(exc)}"] += 1
        except (RecordNotFound, RecordQuarantined) as exc:
            bad.append(f"{key}: {type(exc).__name__}: {exc}")
            return


def _kind(exc: ColdStoreError) -> str:
    return f"{type(exc).__name__}{' (deadline)' if 'abandoned' in str(exc) else ''}"


def main() -> None:
    location, endpoint, worker, appends, size, seed = sys.argv[1:7]
    rng = random.Random(int(seed) * 1000 + int(worker))
    store = _open(location, endpoint)
    print("ready", flush=True)
    sys.stdin.readline()
    out: dict[str, Any] = {"acknowledged": [], "written": [], "gave_up": [], "bad_reads": []}
    errors: Counter[str] = Counter()
    for call in batches_of(int(worker), int(appends), int(size)):
        for _ in range(TRIES):
            try:
                results = _append(store, call)
                break
            except RETRIED as exc:
                errors[_kind(exc)] += 1
                time.sleep(rng.uniform(0, 0.1))
        else:
            out["gave_up"].extend(b for b, _keys in call)
            continue
        for result in results.values():
            out["written"].extend(result.written)
            out["acknowledged"].extend([*result.written, *result.skipped])
        _read_back(store, rng.choice(call)[1][0], errors, out["bad_reads"])
    hung = store.deadline.abandoned
    store.close()
    out["errors"] = dict(errors)
    out["hung_at_exit"] = hung
    print(json.dumps(out), flush=True)
    if hung:
        os._exit(0)


@dataclass
class StressReport:
    workers: int
    appends: int
    size: int
    expected: int
    stored: int
    rows: int
    """Rows in the files the table's version names, copies included."""
    acknowledged: int
    lost: list[str]
    """Acknowledged keys the table does not hold."""
    written_twice: list[str]
    """Keys two calls both reported written."""
    unexpected: list[str]
    gave_up: list[str]
    bad_reads: list[str]
    errors: dict[str, int]
    faults: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    hung_at_exit: int = 0
    """Calls into deltalake the writers had abandoned and that were still running when
    they were done."""

    @property
    def ok(self) -> bool:
        return (
            not self.lost
            and not self.written_twice
            and not self.unexpected
            and not self.gave_up
            and not self.bad_reads
            and self.rows == self.stored == self.expected
        )


def run_writers(
    location: str, endpoint: str, workers: int, appends: int, size: int, seed: int
) -> list[dict[str, Any]]:
    """Start the writers, let them all go at once, return what each printed."""
    commands = [
        ["-m", "benchmarks.delta_stress", location, endpoint]
        + [str(v) for v in (w, appends, size, seed)]
        for w in range(workers)
    ]
    return [json.loads(line) for line in run_together(commands)]


def check(
    store: ColdStore,
    rows: int,
    outputs: Sequence[Mapping[str, Any]],
    workers: int,
    appends: int,
    size: int,
) -> StressReport:
    """What the table holds against what the writers were told."""
    expected = {
        k
        for w in range(workers)
        for call in batches_of(w, appends, size)
        for _b, keys in call
        for k in keys
    }
    stored = set(store.chains.all_keys())
    acknowledged = {k for out in outputs for k in out["acknowledged"]}
    written = Counter(k for out in outputs for k in out["written"])
    errors: Counter[str] = Counter()
    for out in outputs:
        errors.update(out["errors"])
    return StressReport(
        workers=workers,
        appends=appends,
        size=size,
        expected=len(expected),
        stored=len(stored),
        rows=rows,
        acknowledged=len(acknowledged),
        lost=sorted(acknowledged - stored),
        written_twice=sorted(k for k, n in written.items() if n > 1),
        unexpected=sorted(stored - expected),
        gave_up=[b for out in outputs for b in out["gave_up"]],
        bad_reads=[r for out in outputs for r in out["bad_reads"]],
        errors=dict(errors),
        hung_at_exit=sum(out.get("hung_at_exit", 0) for out in outputs),
    )


if __name__ == "__main__":
    try:
        main()
    except ColdStoreError as exc:
        print(f"writer failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise


def committed_rows(location: str, s3: S3Options | None, table: str) -> int:
    """Rows in the files the Delta table's current version names, copies included."""
    from deltalake import DeltaTable

    options = s3.storage_options() if s3 is not None else None
    uri = location.removeprefix("delta+file://") + f"/{table}"
    actions = pa.table(DeltaTable(uri, storage_options=options).get_add_actions(flatten=True))
    return sum(int(n) for n in actions.column("num_records").to_pylist())
