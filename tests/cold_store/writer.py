"""A cold store writer in its own process, for the concurrent-writer tests.

``python -m tests.cold_store.writer LOCATION ENDPOINT WORKER BATCHES SIZE``: opens the
store (``ENDPOINT``: the test S3 server's, or ``-``), prints ``ready``, waits for a line
on stdin, then appends ``BATCHES`` times two batches of ``SIZE`` chains:

- ``shared-<b>``: the same rows and the same batch id in every worker (a batch replayed
  by processes racing each other);
- ``w<WORKER>-<b>``: rows only this worker has.

Prints one JSON line: the keys each append reported written.
"""

from __future__ import annotations

import json
import sys

from cold_store import ColdStore, S3Options
from tests.cold_store.backends import ACCESS, REGION
from tests.cold_store.helpers import chain_row


def shared_keys(batch: int, size: int) -> list[str]:
    return [f"shared-{batch}-{i}" for i in range(size)]


def own_keys(worker: int, batch: int, size: int) -> list[str]:
    return [f"w{worker}-{batch}-{i}" for i in range(size)]


def main() -> None:
    location, endpoint, worker, batches, size = sys.argv[1:6]
    s3 = None
    if endpoint != "-":
        s3 = S3Options(
            endpoint_url=endpoint,
            region=REGION,
            access_key_id=ACCESS["aws_access_key_id"],
            secret_access_key=ACCESS["aws_secret_access_key"],
        )
    store = ColdStore(location, s3=s3)
    print("ready", flush=True)
    sys.stdin.readline()
    written: list[str] = []
    for b in range(int(batches)):
        for batch, keys in (
            (f"shared-{b}", shared_keys(b, int(size))),
            (f"w{worker}-{b}", own_keys(int(worker), b, int(size))),
        ):
            result = store.chains.append([chain_row(k) for k in keys], batch=batch)
            written.extend(result.written)
    store.close()
    print(json.dumps({"written": written}), flush=True)


if __name__ == "__main__":
    main()
