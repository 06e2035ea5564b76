"""Agents' appeals against blocks: an agent that believes a block is wrong says why,
with the call it was refused; the appeal waits for an operator, who closes it
(``granted``: the rule lifted or the call approved; ``upheld``: the block stays)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sidecar.errors import InvalidInput, NotFound, RateLimited
from sidecar.storage.review import APPEAL_STATUSES, Appeal
from sidecar.storage.state import State
from sidecar.trust.redact import redact, redact_text

MAX_REASON = 2_000
MAX_OPEN = 100
"""Appeals one source may have open at once (past it, 429)."""


class Appeals:
    def __init__(self, state: State, clock: Callable[[], float] = time.time) -> None:
        self._state = state
        self._clock = clock

    def file(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        reason: str,
        constraint_ids: Sequence[str],
        source: str,
    ) -> Appeal:
        if not tool or not isinstance(tool, str):
            raise InvalidInput("an appeal names the tool whose call was blocked")
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("an appeal says why the block is wrong (a non-empty reason)")
        shown = redact(dict(arguments))
        appeal = Appeal(
            uuid.uuid4().hex[:16], tool, shown if isinstance(shown, dict) else {},
            tuple(str(c) for c in constraint_ids)[:16], redact_text(reason.strip()[:MAX_REASON]),
            source, "open", self._clock(),
        )  # fmt: skip
        with self._state.tx() as tx:
            if self._state.review.open_appeals_of(tx, source) >= MAX_OPEN:
                raise RateLimited(
                    f"{source!r} has {MAX_OPEN} appeals open already; an operator must "
                    "close some first"
                )
            self._state.review.insert_appeal(tx, appeal)
        return appeal

    def close(self, appeal_id: str, granted: bool, by: str) -> Appeal:
        with self._state.tx() as tx:
            status = "granted" if granted else "upheld"
            if not self._state.review.close_appeal(tx, appeal_id, status, self._clock(), by):
                found = self._state.review.appeal(appeal_id)
                if found is None:
                    raise NotFound(f"no appeal {appeal_id!r}")
                raise InvalidInput(f"appeal {appeal_id} is {found.status}, not open")
        closed = self._state.review.appeal(appeal_id)
        assert closed is not None
        return closed

    def list(self, status: str | None = None, limit: int = 100) -> list[Appeal]:
        if status is not None and status not in APPEAL_STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(APPEAL_STATUSES)}")
        return self._state.review.appeals(status, max(1, min(limit, 1_000)))
