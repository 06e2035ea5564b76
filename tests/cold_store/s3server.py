"""The test S3 server lives in :mod:`benchmarks.s3server` (``python -m benchmarks.cluster``
runs it too); ``python -m tests.cold_store.s3server`` still runs it."""

from __future__ import annotations

from benchmarks.s3server import main

if __name__ == "__main__":
    main()
