"""The group publisher (beside a Delta archive) outlives a state that goes away: records
acknowledged after the outage are published by it, not left for the maintenance loop."""

from __future__ import annotations

import time
from pathlib import Path

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.errors import StateUnavailable
from tests.sidecar.helpers import abandoned


def test_the_group_publisher_survives_a_state_outage(tmp_path: Path) -> None:
    cold = f"delta+file://{tmp_path / 'cold'}"
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home", cold_url=cold) as sc:
        sc.add_tools([Tool(n, f"tool {n}") for n in ("fetch", "parse", "write")])
        publisher = sc.publisher
        assert publisher.group
        pending = sc.state.pending
        real_count = pending.count
        failures = {"left": 1}

        def count() -> int:
            # the publisher's thread asks after each publication; the first time, the
            # state is away
            if failures["left"]:
                failures["left"] -= 1
                raise StateUnavailable("state database unreachable")
            return real_count()

        pending.count = count  # type: ignore[method-assign]
        first = sc.report(abandoned(["fetch", "parse", "write"], "HTTP 401", session_id="a"))
        deadline = time.monotonic() + 30
        while failures["left"]:
            assert time.monotonic() < deadline, "the publisher never asked"
            time.sleep(0.05)
        second = sc.report(abandoned(["parse", "fetch", "write"], "HTTP 402", session_id="b"))
        deadline = time.monotonic() + 30
        # published, then their staging rows cleared: the archive holds a record a
        # moment before the state lets it go
        while not (
            all(sc.cold.chains.contains(r.chain_id) for r in (first, second)) and real_count() == 0
        ):
            assert time.monotonic() < deadline, "acknowledged records never published"
            time.sleep(0.05)
        assert publisher.error is None
